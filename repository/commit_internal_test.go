package repository

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestRolledBack: only COMMIT answered ROLLBACK and a deferred constraint's ERROR are a
// certain rollback; every other error of a COMMIT leaves its outcome unknown.
func TestRolledBack(t *testing.T) {
	pgErr := func(severity, code string) error {
		return fmt.Errorf("commit: %w", &pgconn.PgError{Severity: severity, SeverityUnlocalized: severity, Code: code})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"answered ROLLBACK", fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback), true},
		{"deferred unique constraint", pgErr("ERROR", "23505"), true},
		{"deferred foreign key", pgErr("ERROR", "23503"), true},
		{"localized severity only", fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "ERREUR", Code: "23505"}), false},
		{"constraint code, FATAL", pgErr("FATAL", "23505"), false},
		// on a Citus coordinator these can follow the worker's commit
		{"serialization failure", pgErr("ERROR", "40001"), false},
		{"deadlock", pgErr("ERROR", "40P01"), false},
		{"statement completion unknown", pgErr("ERROR", "40003"), false},
		{"query canceled", pgErr("ERROR", "57014"), false},
		{"internal error", pgErr("ERROR", "XX000"), false},
		{"terminated", pgErr("FATAL", "57P01"), false},
		{"connection exception", pgErr("ERROR", "08006"), false},
		{"no server reply", fmt.Errorf("commit: %w", fmt.Errorf("conn closed")), false},
	} {
		if got := rolledBack(tc.err); got != tc.want {
			t.Errorf("%s: rolledBack(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
