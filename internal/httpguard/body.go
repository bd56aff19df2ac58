package httpguard

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
)

// BodyError is a request body that could not be read for the client's doing: it ended
// before its Content-Length or last chunk, a chunk was malformed, or it did not arrive
// within the server's read timeout. It deserves a 400, and no more than a debug log.
type BodyError struct {
	Err error
}

// Error says why the body could not be read, in words for the client.
func (e *BodyError) Error() string {
	var reason string
	var netErr net.Error
	switch {
	case errors.Is(e.Err, os.ErrDeadlineExceeded):
		reason = "it did not arrive within the server's read timeout"
	case errors.Is(e.Err, io.ErrUnexpectedEOF):
		reason = "it ended before its announced length (Content-Length) or its last chunk"
	case errors.As(e.Err, &netErr):
		reason = "the connection failed"
	default:
		reason = e.Err.Error() // net/http's own: "invalid byte in chunk length", …
	}
	return "could not read the request body: " + reason
}

// Unwrap returns the read error.
func (e *BodyError) Unwrap() error { return e.Err }

// ReadBody reads r's body, at most limit bytes. A body over the limit returns the
// *http.MaxBytesError (answer 413), any other failure a *BodyError (answer 400); either
// way the connection is closed soon after the answer, since what remains of the body is
// unknown.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		return b, nil
	}
	closeAfter(w)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, err
	}
	return nil, &BodyError{Err: err}
}
