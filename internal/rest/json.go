package rest

// errorJSON is the body of every error response.
type errorJSON struct {
	Error string `json:"error"`
}
