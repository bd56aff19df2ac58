package httpguard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

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

// InternalText describes a server-side failure (a 500) to a client: what failed and, for
// an error of PostgreSQL's, its message and SQLSTATE, but never what a failure to connect
// or a broken connection says (the server's address, the database and user names): the
// server logs the whole error itself.
func InternalText(err error) string {
	var (
		pgErr      *pgconn.PgError
		connectErr *pgconn.ConnectError
	)
	switch {
	case errors.As(err, &connectErr):
		text := "the database is unavailable: could not connect"
		if code := repository.SQLState(err); code != "" {
			text += " (SQLSTATE " + code + ")"
		}
		return text
	case errors.As(err, &pgErr):
		// The repository's context (which operation, which topic) and PostgreSQL's
		// message, as err.Error() has them: "page topic "t": ERROR: … (SQLSTATE 42P01)".
		return err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "the request was cancelled or timed out before the database answered"
	}
	return "internal error: the database did not answer (the server's log says more)"
}
