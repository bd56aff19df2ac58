// Command limit-chains measures ways of running a limited topic's chain (lease → handle
// → complete) with no-op handlers, as BENCHMARKS.md's "Limits" reports them: the
// question is how many tasks a concurrency limit lets through when handlers take no
// time, and whether cycles that overlap move more than one chain does.
//
//	go run ./bench/prototypes/limit-chains -database-url URL [-limit 64] [-tasks 200000] [-chains N [-striped | -split | -lanes] | -pipeline] [-ceiling [-leaf]]
//
// It registers a topic limited to -limit, pushes -tasks tasks, VACUUMs and CHECKPOINTs,
// then drives the repository directly (no processor) and prints tasks/s:
//
//	-chains N    N chains of limit/N tasks, each cycle one statement: pgtask's own
//	             task_complete_poll (Repository.CompleteAndPoll), which hands the slots
//	             its decisions free over without the topic's lock (migration 000026)
//	-ceiling     the chains' statement is the prototype's instead: one statement that
//	             marks the batch SUCCEEDED and leases as many tasks, with no tally, no
//	             notification, no all-or-nothing check and no count, returning only each
//	             leased task's sequence and attempt. It is not a queue's completion (it
//	             decides nothing but success): what one chain could reach at best.
//	-leaf        with -ceiling: the statement names the topic's own table (its leaf
//	             partition, task_topic.partition) instead of task, so that its kept
//	             plan locks and starts up that table alone, not every bucket's
//	-striped     with -ceiling: chain i of N leases only the tasks whose sequence is i
//	             modulo N, from the highest it leased itself, so that the chains never
//	             meet each other's rows (a poll order pgtask does not have: FIFO per
//	             stripe, not across them)
//	-lanes       each cycle one statement of the prototype's: pgtask's completion
//	             (task_complete, whole rows returned to the client as the processor
//	             gets them), the count of the topic's ACTIVE tasks and a lease of as many
//	             as it completed, as task_hand_over's, but chain i of N leasing only the
//	             tasks whose sequence is i modulo N, from the highest it leased itself
//	             (-striped's lanes with a real completion; -chains 1 is the same
//	             statement over one lane, the baseline to compare with)
//	-pipeline    one chain whose completion and next lease run at once on two
//	             connections, the lease committed once the completion has
//	-split       each cycle is two statements in one transaction, the completion and
//	             then the hand-over (task_hand_over, the lease pgtask's statement runs),
//	             the chains' hand-overs taken in turn from the floor: chains whose
//	             completions overlap and whose leases never meet each other's rows
//
// The prototype's functions live in the schema limit_chains_prototype, created in the
// database at the start and dropped at the end with the topic, its tasks and the owner. Use a benchmark
// database (BENCHMARKS.md, "How the figures are taken"), never one in production.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// prototype is the schema of the lock-free lease: what a limited topic's chain would
// run if a lease that only replaces the tasks its own completion freed skipped the
// advisory lock and the count.
const prototype = `
CREATE SCHEMA limit_chains_prototype;
CREATE FUNCTION limit_chains_prototype.lease(p_topic text, p_owner text, p_size integer, p_from bigint)
RETURNS TABLE (sequence bigint, attempt integer)
LANGUAGE plpgsql VOLATILE SET enable_sort = off SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
        UPDATE public.task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
        WHERE t.topic = p_topic
          AND t.ctid = ANY (ARRAY(SELECT c.ctid FROM public.task c
                                  WHERE hashtext(c.topic) = hashtext(p_topic) AND c.topic = p_topic AND c.state = 1
                                    AND (c.priority, c.sequence) >= (0::smallint, p_from)
                                    AND (c.not_before IS NULL OR c.not_before <= now())
                                  ORDER BY c.priority, c.sequence
                                  LIMIT p_size
                                  FOR UPDATE OF c SKIP LOCKED))
        RETURNING t.sequence, t.attempt;
END
$$;
CREATE FUNCTION limit_chains_prototype.ceiling(p_topic text, p_owner text, p_sequences bigint[],
                                               p_attempts integer[], p_from bigint, p_stripes integer, p_stripe integer)
RETURNS TABLE (sequence bigint, attempt integer)
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off SET enable_sort = off SET enable_bitmapscan = off SET jit = off
AS $$
BEGIN
    RETURN QUERY
        WITH d AS (SELECT * FROM unnest(p_sequences, p_attempts) AS d(sequence, attempt)),
        done AS (
            UPDATE public.task t SET state = 6, descent = GREATEST(t.state, t.descent), output = NULL, completed = now()
            FROM d
            WHERE t.topic = p_topic AND t.sequence = ANY (p_sequences) AND t.sequence = d.sequence
              AND (t.state = 0 AND t.owner = p_owner AND t.attempt = d.attempt) IS TRUE
            RETURNING t.sequence AS s
        )
        UPDATE public.task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
        WHERE t.topic = p_topic
          AND t.ctid = ANY (ARRAY(SELECT c.ctid FROM public.task c
                                  WHERE hashtext(c.topic) = hashtext(p_topic) AND c.topic = p_topic AND c.state = 1
                                    AND (c.priority, c.sequence) >= (0::smallint, p_from)
                                    AND (c.not_before IS NULL OR c.not_before <= now())
                                    AND c.sequence % p_stripes = p_stripe
                                  ORDER BY c.priority, c.sequence
                                  LIMIT (SELECT count(*) FROM done)
                                  FOR UPDATE OF c SKIP LOCKED))
        RETURNING t.sequence, t.attempt;
END
$$;
CREATE FUNCTION limit_chains_prototype.lane(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                            p_concurrency integer, p_from bigint, p_lanes integer, p_lane integer)
RETURNS SETOF public.task
LANGUAGE plpgsql VOLATILE
SET enable_sort = off SET enable_bitmapscan = off SET jit = off
AS $$
DECLARE
    v_done   integer;
    v_room   integer;
    v_chosen tid[];
BEGIN
    RETURN QUERY SELECT * FROM public.task_complete(p_topic, p_owner, p_sequences, p_attempts,
        array_fill(3::smallint, ARRAY[cardinality(p_sequences)]), array_fill(''::text, ARRAY[cardinality(p_sequences)]),
        array_fill(0::bigint, ARRAY[cardinality(p_sequences)]));
    GET DIAGNOSTICS v_done = ROW_COUNT;
    SELECT p_concurrency - count(*) INTO v_room
    FROM (SELECT 1 FROM public.task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
          LIMIT p_concurrency) a;
    v_chosen := ARRAY(SELECT c.ctid FROM public.task c
                      WHERE hashtext(c.topic) = hashtext(p_topic) AND c.topic = p_topic AND c.state = 1
                        AND (c.priority, c.sequence) >= (0::smallint, p_from)
                        AND (c.not_before IS NULL OR c.not_before <= now())
                        AND c.sequence % p_lanes = p_lane
                      ORDER BY c.priority, c.sequence
                      LIMIT greatest(least(v_done, v_room), 0)
                      FOR UPDATE OF c SKIP LOCKED);
    RETURN QUERY
        UPDATE public.task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
        WHERE t.topic = p_topic AND t.ctid = ANY (v_chosen)
        RETURNING t.*;
END
$$;
CREATE FUNCTION limit_chains_prototype.hand_over(p_topic text, p_owner text, p_freed integer, p_concurrency integer,
                                                 p_size integer, p_from bigint)
RETURNS TABLE (sequence bigint, attempt integer)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_chosen tid[];
BEGIN
    SELECT h.p_chosen INTO v_chosen FROM public.task_hand_over(p_topic, p_freed, p_concurrency, p_size, 0::smallint, p_from) h;
    RETURN QUERY
        UPDATE public.task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
        WHERE t.topic = p_topic AND t.ctid = ANY (v_chosen)
        RETURNING t.sequence, t.attempt;
END
$$;
`

// lease is a leased task, as the prototype's statements return it.
type lease struct {
	sequence int64
	attempt  int32
}

type run struct {
	pool  *pgxpool.Pool
	repo  *repository.Repository
	topic string
	done  atomic.Int64
	// floor is the highest sequence leased: where the next lease starts (the
	// processor's floor does the same).
	floor atomic.Int64
	limit int
	split bool
	lanes bool
	// turn orders the chains' hand-overs (-split)
	turn sync.Mutex
}

func main() {
	url := flag.String("database-url", os.Getenv("DATABASE_URL"), "the benchmark database")
	limit := flag.Int("limit", 64, "the topic's concurrency limit")
	tasks := flag.Int("tasks", 200000, "tasks to push and process")
	chains := flag.Int("chains", 1, "chains of limit/chains tasks each")
	ceiling := flag.Bool("ceiling", false, "the chains run the prototype's one statement: a success-only completion and the lease")
	pipeline := flag.Bool("pipeline", false, "one chain, completion and next lease at once on two connections")
	striped := flag.Bool("striped", false, "with -ceiling: chain i leases the tasks whose sequence is i modulo -chains")
	leaf := flag.Bool("leaf", false, "with -ceiling: the statement names the topic's own table (its leaf partition) instead of task, so that its kept plan locks and starts up one table")
	lanes := flag.Bool("lanes", false, "each cycle the prototype's statement: pgtask's completion, the count, and a lease of as many from chain i's lane (sequence modulo -chains)")
	split := flag.Bool("split", false, "each cycle two statements in one transaction, the completion and then the hand-over, the chains' hand-overs taken in turn from the floor")
	flag.Parse()
	if *chains < 1 || *limit < *chains || *tasks < 1 || (*pipeline && (*chains != 1 || *ceiling)) || (*striped && !*ceiling) || (*split && (*ceiling || *pipeline)) || (*leaf && !*ceiling) || (*lanes && (*ceiling || *split || *pipeline)) {
		fail(errors.New("need 1 <= -chains <= -limit, -tasks >= 1, -pipeline alone, -striped with -ceiling, -split without -ceiling, -leaf with -ceiling, -lanes without -ceiling, -split or -pipeline"))
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *url)
	fail(err)
	defer pool.Close()
	r := &run{pool: pool, topic: fmt.Sprintf("limit-chains-%d", time.Now().UnixNano())}
	r.repo, err = repository.New(repository.Config{})
	fail(err)
	fail(r.setUp(ctx, *limit, *tasks))
	if *leaf {
		fail(r.leafCeiling(ctx))
	}
	defer r.tearDown(context.Background())

	start := time.Now()
	if *pipeline {
		err = r.pipeline(ctx, *limit)
	} else {
		r.limit, r.split, r.lanes = *limit, *split, *lanes
		err = r.chains(ctx, *chains, *limit / *chains, *ceiling, *striped)
	}
	elapsed := time.Since(start)
	fail(err)
	fmt.Printf("limit %d, chains %d, ceiling %v, leaf %v, striped %v, split %v, lanes %v, pipeline %v: %d tasks in %.2f s, %.0f tasks/s\n",
		*limit, *chains, *ceiling, *leaf, *striped, *split, *lanes, *pipeline, r.done.Load(), elapsed.Seconds(), float64(r.done.Load())/elapsed.Seconds())
}

func (r *run) setUp(ctx context.Context, limit, tasks int) error {
	if _, err := r.pool.Exec(ctx, prototype); err != nil {
		return fmt.Errorf("install the prototype (is the schema left from an interrupted run? DROP SCHEMA limit_chains_prototype CASCADE): %w", err)
	}
	if _, err := r.repo.RegisterOwner(ctx, r.pool); err != nil {
		return err
	}
	if _, err := r.repo.CreateTopic(ctx, r.pool, r.topic); err != nil {
		return err
	}
	change := func(s *repository.TopicSettings) { s.Concurrency = int32(limit) }
	if _, err := r.repo.UpdateSettings(ctx, r.pool, r.topic, change); err != nil {
		return err
	}
	for i := 0; i < tasks; i += 1000 {
		cs := make([]repository.Creation, min(1000, tasks-i))
		for j := range cs {
			cs[j] = repository.Creation{Identifier: fmt.Sprint(i + j)}
		}
		if _, err := r.repo.Push(ctx, r.pool, r.topic, repository.Append, cs...); err != nil {
			return err
		}
	}
	for _, sql := range []string{"VACUUM", "CHECKPOINT"} {
		if _, err := r.pool.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// leafCeiling replaces the ceiling function by one whose statements name the topic's
// table (task_topic.partition) rather than task: the same statements, without the
// partitions of every other bucket in their kept plans.
func (r *run) leafCeiling(ctx context.Context) error {
	var table string
	if err := r.pool.QueryRow(ctx, "SELECT quote_ident(partition) FROM task_topic WHERE topic = $1", r.topic).Scan(&table); err != nil {
		return err
	}
	start := strings.Index(prototype, "CREATE FUNCTION limit_chains_prototype.ceiling(")
	end := strings.Index(prototype[start:], "$$;\n") + start + 4
	fn := strings.ReplaceAll(prototype[start:end], "public.task ", "public."+table+" ")
	fn = strings.Replace(fn, "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
	_, err := r.pool.Exec(ctx, fn)
	return err
}

func (r *run) tearDown(ctx context.Context) {
	_, err := r.pool.Exec(ctx, "DROP SCHEMA limit_chains_prototype CASCADE")
	fail(err)
	_, err = r.repo.Destroy(ctx, r.pool, r.topic)
	fail(err)
	_, err = r.repo.DeregisterOwner(ctx, r.pool)
	fail(err)
}

// chains runs n chains of size tasks until no task is left (with striped, until none
// is left in the chain's stripe).
func (r *run) chains(ctx context.Context, n, size int, ceiling, striped bool) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			leased, err := r.repo.PollFrom(ctx, r.pool, r.topic, repository.FIFO, repository.None, size, repository.Position{})
			if err != nil {
				errs[i] = err
				return
			}
			cur := r.leases(leased)
			stripes, stripe, from := 1, 0, &r.floor
			if striped || r.lanes {
				stripes, stripe, from = n, i, new(atomic.Int64)
			}
			for len(cur) > 0 && err == nil {
				if ceiling {
					cur, err = r.ceiling(ctx, cur, stripes, stripe, from)
					continue
				}
				if r.lanes {
					cur, err = r.lane(ctx, cur, stripes, stripe, from)
					continue
				}
				if r.split {
					r.done.Add(int64(len(cur)))
					cur, err = r.splitCycle(ctx, cur, size)
					continue
				}
				_, leased, err = r.repo.CompleteAndPoll(ctx, r.pool, r.topic, r.completions(cur), repository.FIFO,
					repository.None, size, repository.Position{Sequence: r.floor.Load()})
				r.done.Add(int64(len(cur)))
				cur = r.leases(leased)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pipeline runs one chain whose completion and next lease overlap: the lease runs in a
// transaction of its own meanwhile and commits after the completion has.
func (r *run) pipeline(ctx context.Context, limit int) error {
	leased, err := r.repo.PollFrom(ctx, r.pool, r.topic, repository.FIFO, repository.None, limit, repository.Position{})
	if err != nil {
		return err
	}
	cur := r.leases(leased)
	for len(cur) > 0 {
		tx, err := r.pool.Begin(ctx)
		if err != nil {
			return err
		}
		var next []lease
		var leaseErr error
		leasing := make(chan struct{})
		go func() {
			defer close(leasing)
			next, leaseErr = r.lease(ctx, tx, len(cur))
		}()
		_, err = r.repo.Complete(ctx, r.pool, r.topic, r.completions(cur)...)
		<-leasing
		if err = errors.Join(err, leaseErr); err != nil {
			return errors.Join(err, tx.Rollback(ctx))
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		r.done.Add(int64(len(cur)))
		cur = next
	}
	return nil
}

// splitCycle completes cur and hands its slots over in one transaction of two
// statements, the hand-over taken in turn with the other chains from the floor, which
// the previous hand-over raised past the rows it leased.
func (r *run) splitCycle(ctx context.Context, cur []lease, size int) ([]lease, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := r.repo.Complete(ctx, tx, r.topic, r.completions(cur)...); err != nil {
		return nil, err
	}
	r.turn.Lock()
	rows, _ := tx.Query(ctx, "SELECT sequence, attempt FROM limit_chains_prototype.hand_over($1, $2, $3, $4, $5, $6)",
		r.topic, r.repo.Owner(), len(cur), r.limit, size, r.floor.Load())
	next, err := r.scan(rows)
	r.turn.Unlock()
	if err != nil {
		return nil, err
	}
	return next, tx.Commit(ctx)
}

func (r *run) lease(ctx context.Context, tx pgx.Tx, n int) ([]lease, error) {
	rows, _ := tx.Query(ctx, "SELECT sequence, attempt FROM limit_chains_prototype.lease($1, $2, $3, $4)",
		r.topic, r.repo.Owner(), n, r.floor.Load())
	return r.scan(rows)
}

// ceiling completes cur and leases as many of stripe (sequence modulo stripes) from
// the position from, which it raises to the highest sequence it leased.
func (r *run) ceiling(ctx context.Context, cur []lease, stripes, stripe int, from *atomic.Int64) ([]lease, error) {
	sequences, attempts := make([]int64, len(cur)), make([]int32, len(cur))
	for i, l := range cur {
		sequences[i], attempts[i] = l.sequence, l.attempt
	}
	rows, _ := r.pool.Query(ctx, "SELECT sequence, attempt FROM limit_chains_prototype.ceiling($1, $2, $3, $4, $5, $6, $7)",
		r.topic, r.repo.Owner(), sequences, attempts, from.Load(), stripes, stripe)
	next, err := r.scan(rows)
	for _, l := range next {
		raise(from, l.sequence)
	}
	if err == nil {
		r.done.Add(int64(len(cur)))
	}
	return next, err
}

// lane completes cur with pgtask's completion and leases as many of its lane (sequence
// modulo lanes) from the position from, which it raises to the highest sequence it
// leased; whole rows come back, as the processor gets them.
func (r *run) lane(ctx context.Context, cur []lease, lanes, lane int, from *atomic.Int64) ([]lease, error) {
	sequences, attempts := make([]int64, len(cur)), make([]int32, len(cur))
	for i, l := range cur {
		sequences[i], attempts[i] = l.sequence, l.attempt
	}
	rows, _ := r.pool.Query(ctx, "SELECT * FROM limit_chains_prototype.lane($1, $2, $3, $4, $5, $6, $7, $8)",
		r.topic, r.repo.Owner(), sequences, attempts, r.limit, from.Load(), lanes, lane)
	var next []lease
	n := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return nil, err
		}
		n++
		if state := vals[3].(int16); state == int16(repository.Active) {
			next = append(next, lease{sequence: vals[1].(int64), attempt: vals[13].(int32)})
			raise(from, vals[1].(int64))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if n-len(next) != len(cur) {
		return nil, fmt.Errorf("lane: %d of %d tasks completed", n-len(next), len(cur))
	}
	r.done.Add(int64(len(cur)))
	return next, nil
}

func (r *run) scan(rows pgx.Rows) ([]lease, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lease, error) {
		var l lease
		err := row.Scan(&l.sequence, &l.attempt)
		return l, err
	})
	for _, l := range out {
		r.raiseFloor(l.sequence)
	}
	return out, err
}

func (r *run) leases(tasks []repository.Task) []lease {
	out := make([]lease, len(tasks))
	for i, t := range tasks {
		out[i] = lease{sequence: t.Sequence, attempt: t.Attempt}
		r.raiseFloor(t.Sequence)
	}
	return out
}

func (r *run) raiseFloor(sequence int64) { raise(&r.floor, sequence) }

// raise sets floor to sequence if that is higher.
func raise(floor *atomic.Int64, sequence int64) {
	for {
		f := floor.Load()
		if sequence <= f || floor.CompareAndSwap(f, sequence) {
			return
		}
	}
}

func (r *run) completions(cur []lease) []repository.Completion {
	out := make([]repository.Completion, len(cur))
	for i, l := range cur {
		out[i] = repository.Completion{Sequence: l.sequence, Attempt: l.attempt, Decision: repository.Succeed("")}
	}
	return out
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "limit-chains:", err)
		os.Exit(1)
	}
}
