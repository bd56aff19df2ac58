package repository_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// emptyTemplate keys a template that no migrator ever touched: databases cloned from it
// start without any pgtask object, as a user's fresh database does.
const emptyTemplate = "pgtask repository migrate test: empty database"

// schemaObjects are the relations the migrations create.
var schemaObjects = []string{"task", "task_topic", "task_owner", "task_sequence", "task_pretty"}

// emptyPool returns a pool on a fresh database without any schema.
func emptyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, emptyTemplate, nil)
}

// schemaPresent lists which of schemaObjects exist (to_regclass is NULL for a missing one).
func schemaPresent(t *testing.T, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	out := make(map[string]bool, len(schemaObjects))
	for _, name := range schemaObjects {
		var exists bool
		if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
			t.Fatalf("to_regclass(%s): %v", name, err)
		}
		out[name] = exists
	}
	return out
}

// partitionCount counts the partitions of task that exist as tables, by their naming scheme.
func partitionCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename ~ '^task_[0-9a-f]{32}$'").Scan(&n)
	if err != nil {
		t.Fatalf("count partitions: %v", err)
	}
	return n
}

func wantVersion(t *testing.T, pool *pgxpool.Pool, want uint) {
	t.Helper()
	version, dirty, err := repository.MigrationVersion(t.Context(), pool)
	if err != nil {
		t.Fatalf("migration version: %v", err)
	}
	if version != want || dirty {
		t.Fatalf("migration version = %d (dirty %v), want %d (clean)", version, dirty, want)
	}
}

// latestVersion is the number of the newest embedded migration.
func latestVersion(t *testing.T) uint {
	t.Helper()
	entries, err := schema.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var latest uint64
	for _, e := range entries {
		number, _, ok := strings.Cut(e.Name(), "_")
		if v, err := strconv.ParseUint(number, 10, 64); ok && err == nil {
			latest = max(latest, v)
		}
	}
	if latest == 0 {
		t.Fatal("no migration files embedded")
	}
	return uint(latest)
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("UpDownUpOnEmptyDatabase", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := emptyPool(t)
		latest := latestVersion(t)

		for name, ok := range schemaPresent(t, pool) {
			if ok {
				t.Fatalf("fresh database already has %s", name)
			}
		}
		wantVersion(t, pool, 0)

		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate up: %v", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if !ok {
				t.Errorf("after migrate up, %s is missing", name)
			}
		}
		wantVersion(t, pool, latest)

		// A topic with tasks: down must remove its partition and rows too.
		repo, err := repository.New(repository.Config{Owner: "migrator"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Initialize(ctx, pool, "topic"); err != nil {
			t.Fatalf("initialize: %v", err)
		}
		if _, err := repo.Push(ctx, pool, "topic", repository.Append, repository.Creation{Identifier: "a"}); err != nil {
			t.Fatalf("push: %v", err)
		}
		if n := partitionCount(t, pool); n != 1 {
			t.Fatalf("partitions after initialize = %d, want 1", n)
		}

		if err := repository.MigrateDown(ctx, pool); err != nil {
			t.Fatalf("migrate down: %v", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if ok {
				t.Errorf("after migrate down, %s still exists", name)
			}
		}
		if n := partitionCount(t, pool); n != 0 {
			t.Errorf("partitions after migrate down = %d, want 0", n)
		}
		wantVersion(t, pool, 0)

		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate up again: %v", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if !ok {
				t.Errorf("after migrate up again, %s is missing", name)
			}
		}
		wantVersion(t, pool, latest)

		// The schema is usable and fresh: the topic is gone and sequences restart at 1.
		if topics, err := repo.Topics(ctx, pool); err != nil || len(topics) != 0 {
			t.Fatalf("topics after down and up = %v, %v; want none", topics, err)
		}
		if _, err := repo.Initialize(ctx, pool, "topic"); err != nil {
			t.Fatalf("initialize after down and up: %v", err)
		}
		tasks, err := repo.Push(ctx, pool, "topic", repository.Append, repository.Creation{Identifier: "a"})
		if err != nil {
			t.Fatalf("push after down and up: %v", err)
		}
		if tasks[0].Sequence != 1 {
			t.Errorf("first sequence after down and up = %d, want 1", tasks[0].Sequence)
		}
	})

	t.Run("ConcurrentCallsOnEmptyDatabaseBothSucceed", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		connString := pgtest.NewDatabase(t, emptyTemplate, nil)
		// Separate pools, as two processes starting at once would have.
		const callers = 2
		pools := make([]*pgxpool.Pool, callers)
		for i := range pools {
			pool, err := pgxpool.New(ctx, connString)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			pools[i] = pool
		}

		start := make(chan struct{})
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i, pool := range pools {
			wg.Go(func() {
				<-start
				errs[i] = repository.Migrate(ctx, pool)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("concurrent migrate %d: %v", i, err)
			}
		}
		wantVersion(t, pools[0], latestVersion(t))
		for name, ok := range schemaPresent(t, pools[0]) {
			if !ok {
				t.Errorf("after concurrent migrations, %s is missing", name)
			}
		}
	})

	t.Run("AlreadyMigratedIsNoOpSuccess", func(t *testing.T) {
		f := setup(t)
		tasks := f.push(repository.Append, "a", "b")
		wantVersion(t, f.pool, latestVersion(t))

		if err := repository.Migrate(f.ctx, f.pool); err != nil {
			t.Fatalf("migrate on a migrated database: %v", err)
		}
		wantVersion(t, f.pool, latestVersion(t))
		// Nothing was touched: the tasks and the topic are still there.
		for _, task := range tasks {
			if got := f.get(task.Sequence); got.Identifier != task.Identifier || got.State != repository.Ready {
				t.Errorf("task %d after no-op migrate = %+v", task.Sequence, got)
			}
		}
		if _, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil {
			t.Errorf("topic after no-op migrate: %v", err)
		}
	})
}
