package rest

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3 description of the routes, written by hand; a test checks
// that it parses and describes every route and no other.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
