package httpguard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/pgtask/pgtask/repository"
)

// ErrorText is the message a client is answered with for err under status: for a body
// over its limit, the limit; for a 500, InternalText; else the error's own text, without
// the "bad request: " that the servers' own 400s start with (the status says so).
func ErrorText(err error, status int) string {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Sprintf("request body too large: at most %d bytes accepted", tooLarge.Limit)
	}
	if status == http.StatusInternalServerError {
		return InternalText(err)
	}
	return strings.TrimPrefix(err.Error(), "bad request: ")
}

// BodyStatus is the status that answers an error of ReadBody: 413 for a body over its
// limit, 400 for any other.
func BodyStatus(err error) int {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// InternalText describes a server-side failure (a 500) to a client:
// repository.ClientText, which names what failed but never the database's address, name
// or user. The server logs the whole error itself.
func InternalText(err error) string {
	text := repository.ClientText(err)
	if text == repository.ClientTextUnknown {
		text += " (the server's log says more)"
	}
	return text
}

// Stopped reports whether a request's failure answered with status was the request's
// own end: a failure with no other meaning (a 500; a body cut short stays a 400) while
// its context had ended, because the client went away or the server's read timeout
// passed, which stopped the work, the database statement included. The servers answer
// it 503 and log it as no failure of theirs.
func Stopped(r *http.Request, status int) bool {
	return status == http.StatusInternalServerError && r.Context().Err() != nil
}
