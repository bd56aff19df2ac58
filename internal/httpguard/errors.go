package httpguard

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/repository"
)

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
