package repository_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// The benchmarks of the hot paths (BENCHMARKS.md). Each runs on its own database cloned
// from the migrated template, like the tests; they run only with -bench:
//
//	go test -run '^$' -bench . -benchtime 3x ./repository/
//
// BenchmarkPollFinished needs PGTASK_BENCH_FINISHED=1 (or a row count, default
// 10 000 000): building the finished rows takes minutes.

// benchFixture is one benchmark's database, repository and topic.
type benchFixture struct {
	b     *testing.B
	ctx   context.Context
	pool  *pgxpool.Pool
	repo  *repository.Repository
	topic string
}

func benchSetup(b *testing.B) *benchFixture {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(b, schema.Hash(), migrate)
	repo, err := repository.New(repository.Config{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
		b.Fatal(err)
	}
	f := &benchFixture{b: b, ctx: ctx, pool: pool, repo: repo, topic: "bench"}
	if _, err := repo.CreateTopic(ctx, pool, f.topic); err != nil {
		b.Fatal(err)
	}
	return f
}

// creations returns n no-op creations with distinct identifiers starting at from.
func creations(from, n int) []repository.Creation {
	cs := make([]repository.Creation, n)
	for i := range cs {
		cs[i] = repository.Creation{Identifier: "t" + strconv.Itoa(from+i)}
	}
	return cs
}

// pushN pushes n READY tasks in statements of at most 5000.
func (f *benchFixture) pushN(n int) {
	f.b.Helper()
	for done := 0; done < n; {
		size := min(5000, n-done)
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations(done, size)...); err != nil {
			f.b.Fatal(err)
		}
		done += size
	}
}

// analyze gives the planner statistics of the benchmark's rows, as autovacuum would.
func (f *benchFixture) analyze() {
	f.b.Helper()
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		f.b.Fatal(err)
	}
}

func (f *benchFixture) poll(size int) []repository.Task { return f.pollUnder(repository.None, size) }

func (f *benchFixture) pollUnder(condition repository.Condition, size int) []repository.Task {
	tasks, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, condition, size)
	if err != nil {
		f.b.Fatal(err)
	}
	if len(tasks) != size {
		f.b.Fatalf("poll leased %d tasks, want %d", len(tasks), size)
	}
	return tasks
}

func (f *benchFixture) complete(tasks []repository.Task) {
	completions := make([]repository.Completion, len(tasks))
	for i, t := range tasks {
		completions[i] = t.Decide(repository.Decision{Result: repository.Success})
	}
	if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, completions...); err != nil {
		f.b.Fatal(err)
	}
}

func reportTasks(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkPush pushes batches of new tasks (APPEND, distinct identifiers) in one
// statement each.
func BenchmarkPush(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			f := benchSetup(b)
			next := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations(next, size)...); err != nil {
					b.Fatal(err)
				}
				next += size
			}
			reportTasks(b, size)
		})
	}
}

// BenchmarkPushReplace pushes batches of 100 with REPLACE, each ending the READY tasks
// of the one before (the same identifiers): on a topic without a queue cap, under a cap
// far above its tasks, and under a cap its tasks fill, which a replacing push passes
// counted net of the READY tasks it ends.
func BenchmarkPushReplace(b *testing.B) {
	const size = 100
	for _, c := range []struct {
		name     string
		queueCap int64
	}{{"cap=none", 0}, {"cap=far", 1_000_000}, {"cap=full", size}} {
		b.Run(c.name, func(b *testing.B) {
			f := benchSetup(b)
			if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.QueueCap = c.queueCap }); err != nil {
				b.Fatal(err)
			}
			batch := creations(0, size)
			push := func() {
				if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Replace, batch...); err != nil {
					b.Fatal(err)
				}
			}
			push()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				push()
			}
			reportTasks(b, size)
		})
	}
}

// BenchmarkPollComplete polls a batch and completes it (SUCCESS), the processor's loop
// without handling, from a backlog pushed beforehand.
func BenchmarkPollComplete(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			f := benchSetup(b)
			f.pushN(b.N * size)
			f.analyze()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.complete(f.poll(size))
			}
			reportTasks(b, size)
		})
	}
}

// BenchmarkPoll polls batches alone (they stay ACTIVE) from a backlog pushed beforehand.
func BenchmarkPoll(b *testing.B) { benchmarkPolls(b, repository.None) }

// BenchmarkPollSingular is BenchmarkPoll under SingularByIdentifier (every task its own
// identifier): what the condition's checks cost a poll, its turn under the topic's lock
// (migration 000061) included.
func BenchmarkPollSingular(b *testing.B) { benchmarkPolls(b, repository.SingularByIdentifier) }

func benchmarkPolls(b *testing.B, condition repository.Condition) {
	for _, size := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			f := benchSetup(b)
			f.pushN(b.N * size)
			f.analyze()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.pollUnder(condition, size)
			}
			reportTasks(b, size)
		})
	}
}

// BenchmarkComplete completes batches leased beforehand; only the completions are timed.
func BenchmarkComplete(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			f := benchSetup(b)
			f.pushN(b.N * size)
			f.analyze()
			batches := make([][]repository.Task, b.N)
			for i := range batches {
				batches[i] = f.poll(size)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.complete(batches[i])
			}
			reportTasks(b, size)
		})
	}
}

// finishedRows is how many SUCCEEDED rows BenchmarkPollFinished puts in the topic:
// PGTASK_BENCH_FINISHED=1 means 10 000 000, another number that many; unset skips it.
func finishedRows(b *testing.B) int {
	v := os.Getenv("PGTASK_BENCH_FINISHED")
	if v == "" {
		b.Skip("set PGTASK_BENCH_FINISHED=1 (10 M rows) or a row count to run it: building the rows takes minutes")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("PGTASK_BENCH_FINISHED=%q: want 1 or a positive row count", v)
	}
	if n == 1 {
		n = 10_000_000
	}
	return n
}

// BenchmarkPollFinished is BenchmarkPollComplete (batch 100) with millions of finished
// (SUCCEEDED) rows in the topic, older than the backlog: poll must not slow down with
// them (target: at least 80 % of the throughput without them). Each variant's database
// is built once, on the parent benchmark: the framework calls a sub-benchmark's function
// more than once (b.N = 1 first), and the finished rows take minutes to build.
func BenchmarkPollFinished(b *testing.B) {
	n := finishedRows(b)
	for _, finished := range []int{0, n} {
		f := benchSetup(b)
		if finished > 0 {
			start := time.Now()
			// Straight into the table: pushing and completing them one by one would
			// take far longer. The rows look like completed no-op tasks.
			if _, err := f.pool.Exec(f.ctx, `
				INSERT INTO task (topic, identifier, state, descent, owner, attempt, completed)
				SELECT $1, 'f' || g, 6, 1, 'bench', 1, now()
				FROM generate_series(1, $2::bigint) g`, f.topic, finished); err != nil {
				b.Fatal(err)
			}
			b.Logf("inserted %d finished rows in %v", finished, time.Since(start).Round(time.Second))
		}
		b.Run("finished="+strconv.Itoa(finished), func(b *testing.B) {
			f.b = b
			f.pushN(b.N * 100)
			f.analyze()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.complete(f.poll(100))
			}
			reportTasks(b, 100)
		})
	}
}

// BenchmarkPollLimited is what a poll costs under each kind of limit (issue 20): polls
// of 100 from a backlog of tasks spread evenly over `keys` concurrency keys, each
// completed before the next (outside the timing), so that one op is one poll. The
// variants: no limit; a concurrency limit of 100 (the advisory lock and the count of
// ACTIVE tasks); fair (the keys take turns: one task per key per turn); a per-key limit
// of 1 with 100 keys or more (polled key by key as fair, and each key's ACTIVE counted).
// With snapshot=held, a REPEATABLE READ transaction opened before the first poll stays
// open throughout, so the index entries of the tasks leased cannot be passed over
// without reading their rows (a long-held snapshot, docs/processor.md).
func BenchmarkPollLimited(b *testing.B) {
	const size = 100
	for _, v := range []struct {
		name   string
		change func(*repository.TopicSettings)
	}{
		{"none", func(*repository.TopicSettings) {}},
		{"concurrency", func(s *repository.TopicSettings) { s.Concurrency = size }},
		{"fair", func(s *repository.TopicSettings) { s.Fair = true }},
		{"keylimit", func(s *repository.TopicSettings) { s.KeyConcurrency = 1 }},
	} {
		for _, run := range []struct {
			keys int
			held bool
		}{{10, false}, {1000, false}, {10, true}, {1000, true}} {
			keys := run.keys
			if v.name == "keylimit" && keys < size {
				continue // fewer keys than a poll's size: the limit, not the poll, would bound it
			}
			name := v.name + "/keys=" + strconv.Itoa(keys)
			if run.held {
				name += "/snapshot=held"
			}
			b.Run(name, func(b *testing.B) {
				f := benchSetup(b)
				if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, v.change); err != nil {
					b.Fatal(err)
				}
				for done := 0; done < b.N*size; {
					cs := creations(done, min(5000, b.N*size-done))
					for i := range cs {
						cs[i].ConcurrencyKey = "k" + strconv.Itoa((done+i)%keys)
					}
					if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, cs...); err != nil {
						b.Fatal(err)
					}
					done += len(cs)
				}
				f.analyze()
				if run.held {
					tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
					if err != nil {
						b.Fatal(err)
					}
					defer tx.Rollback(f.ctx)
					if _, err := tx.Exec(f.ctx, "SELECT 1"); err != nil { // takes the snapshot
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					tasks := f.poll(size)
					b.StopTimer()
					f.complete(tasks)
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*size), "µs/task")
			})
		}
	}
}

// BenchmarkPageAmongManyOthers times a page of 51 excerpts of a topic of 60 finished
// tasks (small21) whose shared table also holds BENCH_LISTING_OTHERS (default 1 000 000)
// newer tasks of another topic (big), and pages of big itself: newest first (the
// dashboard's topic page) and oldest first (the CLI's and the REST API's default).
func BenchmarkPageAmongManyOthers(b *testing.B) {
	others := 1_000_000
	if v := os.Getenv("BENCH_LISTING_OTHERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_LISTING_OTHERS=%q: want a positive number", v)
		}
		others = n
	}
	f := benchSetup(b)
	for _, topic := range []string{"big", "small21"} {
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, topic); err != nil {
			b.Fatal(err)
		}
	}
	var same bool
	if err := f.pool.QueryRow(f.ctx, `SELECT count(DISTINCT partition) = 1 FROM task_topic WHERE topic IN ('big', 'small21')`).Scan(&same); err != nil || !same {
		b.Fatalf("big and small21 do not share a table (%v)", err)
	}
	for _, fill := range []struct {
		topic string
		n     int
	}{{"small21", 60}, {"big", others}} { // small21's first: older
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, completed)
			SELECT $1, 'x' || g, 6, now() FROM generate_series(1, $2) g`, fill.topic, fill.n); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := f.pool.Exec(f.ctx, `VACUUM ANALYZE task`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		topic     string
		direction repository.Direction
	}{
		{"small/newest", "small21", repository.Backward},
		{"small/oldest", "small21", repository.Forward},
		{"big/newest", "big", repository.Backward},
		{"big/oldest", "big", repository.Forward},
	} {
		b.Run(c.name, func(b *testing.B) {
			cursor := repository.MinSequence
			if c.direction == repository.Backward {
				cursor = repository.MaxSequence
			}
			for b.Loop() {
				page, err := f.repo.Excerpts(f.ctx, f.pool, c.topic, repository.TaskFilter{}, cursor, 51, c.direction)
				if err != nil || len(page) == 0 {
					b.Fatalf("%d tasks, %v", len(page), err)
				}
			}
		})
	}
}
