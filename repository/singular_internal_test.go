package repository

import (
	"slices"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestSingularAnyActiveMigration: migration 000043 upgrades a database holding a
// LIFO-polled task of an identifier ACTIVE and another READY: before it, a LIFO poll
// under SINGULAR_BY_IDENTIFIER leased the READY one; after it, nothing until the ACTIVE
// one completes; reverting 000043 brings the old rule back. The tasks are unchanged.
func TestSingularAnyActiveMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	before, err := src.Prev(43)
	if err != nil {
		t.Fatalf("the migration before 000043: %v", err)
	}
	pool := pgtest.NewPool(t, "pgtask repository test: singular any active", nil)
	migrateTo(t, pool, before)
	_, create := stepper(t, pool)
	create("s")
	repo, err := New(Config{Owner: "singular"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
		t.Fatal(err)
	}
	poll := func() []int64 {
		t.Helper()
		tasks, err := repo.Poll(ctx, pool, "s", LIFO, SingularByIdentifier, 10)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, task := range tasks {
			seqs = append(seqs, task.Sequence)
		}
		return seqs
	}
	push := func() int64 {
		t.Helper()
		var seq int64
		if err := pool.QueryRow(ctx, "SELECT task_push('s', 'foo')").Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return seq
	}
	first := push()
	if got := poll(); !slices.Equal(got, []int64{first}) {
		t.Fatalf("first poll = %v, want [%d]", got, first)
	}
	second := push()
	bodies := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT p.oid::regprocedure::text || ': ' || array_to_string(p.proconfig, ',') || ': ' || p.prosrc
			FROM pg_proc p WHERE p.proname IN ('task_poll_candidates', 'task_poll_keyed') ORDER BY 1`)
	}
	functions := bodies()
	rows := taskRows(t, pool)
	migrateTo(t, pool, 43)
	sameRows(t, "tasks after 000043", taskRows(t, pool), rows)
	if got := poll(); len(got) != 0 {
		t.Fatalf("poll after 000043 with foo@%d ACTIVE = %v, want nothing", first, got)
	}
	migrateTo(t, pool, before)
	if got := bodies(); !slices.Equal(got, functions) {
		t.Fatalf("functions after reverting 000043 differ from the previous version's:\n%s\nwant\n%s",
			strings.Join(got, "\n---\n"), strings.Join(functions, "\n---\n"))
	}
	if got := poll(); !slices.Equal(got, []int64{second}) {
		t.Fatalf("poll after 000043 reverted = %v, want [%d] (the rule before it)", got, second)
	}
}
