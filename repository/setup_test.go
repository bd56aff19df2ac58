package repository_test

import (
	"context"
	"flag"
	"runtime"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestMain runs the tests 6 at a time on plain PostgreSQL (or GOMAXPROCS, when more)
// unless -parallel says otherwise: most of them wait on the database (lock timeouts, a
// schedule's next second, an owner's silence) rather than use the CPU, and two at a time
// (GOMAXPROCS on the 2-core CI machines) took 8 to 13 minutes under -race, 6 about 6.
// On a Citus cluster (three servers on the same cores) they keep the default: 4 at a
// time took longer. So does a fuzz run, whose workers -parallel counts (a process each).
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	value := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	fuzzing := value("test.fuzz") != "" || value("test.fuzzworker") == "true"
	if !given && !fuzzing && !pgtest.OnCitus() {
		if err := flag.Set("test.parallel", strconv.Itoa(max(6, runtime.GOMAXPROCS(0)))); err != nil {
			panic(err)
		}
	}
	pgtest.Main(m)
}

// migrate prepares the template of the tests' databases: the migrations, and on a Citus
// cluster (pgtest.OnCitus, the specification tests' run in .ci/run) the distribution.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := repository.Migrate(ctx, pool); err != nil || !pgtest.OnCitus() {
		return err
	}
	_, err := repository.DistributeCitus(ctx, pool, repository.CitusOptions{})
	return err
}

// fixture is one test's database with a registered owner and topic "topic".
type fixture struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	repo  *repository.Repository
	topic string
}

// setup gives the test its own migrated database, a repository registered as owner
// "owner-1" and a topic "topic" with one attempt per task (createTopic).
func setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	return fixtureOn(t, pgtest.NewPool(t, schema.Hash(), migrate))
}

// fixtureOn is setup's fixture on a pool of the caller's (its own fresh database).
func fixtureOn(t *testing.T, pool *pgxpool.Pool) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: t.Context(), pool: pool, topic: "topic"}
	f.repo = f.newRepo("owner-1")
	f.createTopic(f.topic)
	return f
}

// createTopic creates a topic whose tasks get one attempt: a FAILURE is final and an
// expiry leaves the task EXPIRED, as the state transitions these tests check want (a
// topic's default retries a failure 25 times: TestTopicDefaults).
func (f *fixture) createTopic(topic string) {
	f.t.Helper()
	if _, err := f.repo.CreateTopic(f.ctx, f.pool, topic); err != nil {
		f.t.Fatalf("create topic %q: %v", topic, err)
	}
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, topic, func(s *repository.TopicSettings) { s.MaxAttempts = 1 }); err != nil {
		f.t.Fatalf("configure topic %q: %v", topic, err)
	}
}

// fullTopic creates a topic (createTopic) whose queue cap of 1 is reached: it holds one
// READY task, of identifier filler.
func (f *fixture) fullTopic(topic, filler string) {
	f.t.Helper()
	f.createTopic(topic)
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, topic, func(s *repository.TopicSettings) { s.QueueCap = 1 }); err != nil {
		f.t.Fatalf("cap topic %q: %v", topic, err)
	}
	if _, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, repository.Creation{Identifier: filler}); err != nil {
		f.t.Fatalf("fill topic %q: %v", topic, err)
	}
}

// exec runs each statement on the fixture's pool, failing the test at the first error.
func (f *fixture) exec(statements ...string) {
	f.t.Helper()
	for _, q := range statements {
		if _, err := f.pool.Exec(f.ctx, q); err != nil {
			f.t.Fatalf("%s: %v", q, err)
		}
	}
}

// newRepo returns a registered repository with the given owner name.
func (f *fixture) newRepo(owner string) *repository.Repository {
	f.t.Helper()
	repo, err := repository.New(repository.Config{Owner: owner})
	if err != nil {
		f.t.Fatalf("new repository: %v", err)
	}
	if _, err := repo.RegisterOwner(f.ctx, f.pool); err != nil {
		f.t.Fatalf("register %s: %v", owner, err)
	}
	return repo
}

// push pushes identifiers with default creations and fails the test on error.
func (f *fixture) push(insertion repository.Insertion, identifiers ...string) []repository.Task {
	f.t.Helper()
	creations := make([]repository.Creation, len(identifiers))
	for i, id := range identifiers {
		creations[i] = repository.Creation{Identifier: id, Input: "input-" + id}
	}
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, insertion, creations...)
	if err != nil {
		f.t.Fatalf("push %v: %v", identifiers, err)
	}
	return tasks
}

// poll polls with the given order/condition/size and fails the test on error.
func (f *fixture) poll(order repository.Order, condition repository.Condition, size int) []repository.Task {
	f.t.Helper()
	tasks, err := f.repo.Poll(f.ctx, f.pool, f.topic, order, condition, size)
	if err != nil {
		f.t.Fatalf("poll: %v", err)
	}
	return tasks
}

// complete completes tasks with the same decision and fails the test on error.
func (f *fixture) complete(d repository.Decision, tasks ...repository.Task) []repository.Task {
	f.t.Helper()
	completions := make([]repository.Completion, len(tasks))
	for i, task := range tasks {
		completions[i] = task.Decide(d)
	}
	done, err := f.repo.Complete(f.ctx, f.pool, f.topic, completions...)
	if err != nil {
		f.t.Fatalf("complete: %v", err)
	}
	return done
}

// get reads one task and fails the test on error.
func (f *fixture) get(sequence int64) repository.Task {
	f.t.Helper()
	task, err := f.repo.Get(f.ctx, f.pool, f.topic, sequence)
	if err != nil {
		f.t.Fatalf("get %d: %v", sequence, err)
	}
	return task
}

// sequences lists the tasks' sequences.
func sequences(tasks []repository.Task) []int64 {
	out := make([]int64, len(tasks))
	for i, t := range tasks {
		out[i] = t.Sequence
	}
	return out
}

// TestTheTestsDatabase: the tests' databases are distributed on a Citus cluster when
// pgtest.OnCitus (so that the specification tests run there really test Citus), plain
// otherwise.
func TestTheTestsDatabase(t *testing.T) {
	f := setup(t)
	var distributed bool
	if err := f.pool.QueryRow(f.ctx, "SELECT to_regprocedure('task_distributed()') IS NOT NULL").Scan(&distributed); err != nil {
		t.Fatal(err)
	}
	if distributed != pgtest.OnCitus() {
		t.Fatalf("the test's database is distributed: %v; want %v", distributed, pgtest.OnCitus())
	}
	if !distributed {
		return
	}
	var workers int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(DISTINCT (nodename, nodeport)) FROM citus_shards WHERE table_name = 'task'::regclass`).Scan(&workers); err != nil || workers != 2 {
		t.Fatalf("task's shards are on %d nodes (%v), want the 2 workers", workers, err)
	}
}
