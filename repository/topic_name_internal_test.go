package repository

import (
	"errors"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestTopicDotNames: the names "." and ".." and names with a control character are
// refused when a topic is created, from Go (ErrInvalid, saying why) and from SQL
// (task_topic_create, SQLSTATE 22023), and nothing is written; a topic of such a name
// made before migration 000042 keeps its row and tasks through the upgrade, and a name
// merely holding dots, or other characters beyond ASCII, is accepted.
func TestTopicDotNames(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	before, err := src.Prev(42)
	if err != nil {
		t.Fatalf("the migration before 000042: %v", err)
	}
	pool := pgtest.NewPool(t, "pgtask repository test: topic dot names", nil)
	migrateTo(t, pool, before)
	_, create := stepper(t, pool)
	create("..") // accepted before 000042
	if _, err := pool.Exec(ctx, "SELECT task_push('..', 'kept', 'x')"); err != nil {
		t.Fatalf("push to the topic made before 000042: %v", err)
	}
	migrateTo(t, pool, 0)
	var kept int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = '..' AND identifier = 'kept'").Scan(&kept); err != nil || kept != 1 {
		t.Fatalf("the task of topic \"..\" after the upgrade: %d, %v; want 1", kept, err)
	}

	repo, err := New(Config{Owner: "dot-names"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".", ".."} {
		if err := ValidateNewTopic(name); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "path segment") {
			t.Errorf("ValidateNewTopic(%q): %v, want ErrInvalid", name, err)
		}
		if err := ValidateTopic(name); err != nil {
			t.Errorf("ValidateTopic(%q) (a topic made before 000042): %v, want nil", name, err)
		}
		_, err := repo.CreateTopic(ctx, pool, name)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `topic "`+name+`"`) || !strings.Contains(err.Error(), "path segment") {
			t.Errorf("CreateTopic(%q): %v, want ErrInvalid naming the topic as a path segment", name, err)
		}
		_, err = pool.Exec(ctx, "SELECT task_topic_create($1)", name)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "path segment") {
			t.Errorf("task_topic_create(%q): %v, want SQLSTATE 22023 saying it is a path segment", name, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task_topic WHERE topic IN ('.', '..')").Scan(&n); err != nil || n != 1 {
		t.Errorf("topics named . or ..: %d, %v; want 1 (the one made before 000042)", n, err)
	}
	for _, name := range []string{"tab\there", "esc\x1b[2J", "nl\n", "del\x7f", "csi\u009b"} {
		if _, err := repo.CreateTopic(ctx, pool, name); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "control character") {
			t.Errorf("CreateTopic(%q): %v, want ErrInvalid naming the control character", name, err)
		}
		_, err := pool.Exec(ctx, "SELECT task_topic_create($1)", name)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "control character") {
			t.Errorf("task_topic_create(%q): %v, want SQLSTATE 22023 naming the control character", name, err)
		}
	}
	for _, name := range []string{"...", ".hidden", "a.b", "v1.", "é-ü", "\u00a0nbsp", "emoji-\U0001F600"} {
		if created, err := repo.CreateTopic(ctx, pool, name); err != nil || !created {
			t.Errorf("CreateTopic(%q): %v, %v; want created", name, created, err)
		}
	}
}
