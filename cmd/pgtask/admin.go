package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgtask/pgtask/repository"
)

const reviveAbout = `
Brings finished tasks (EXPIRED, FAILED, SUSPENDED, FILTERED or SUCCEEDED) back. Choose
exactly one mode:

  --reset               flip the tasks back to READY, with a fresh attempt budget
  --recreate MODE       mark them RECREATED and push fresh copies (identifier, input,
                        reference, priority) with insertion MODE: append, replace or
                        supersede
  --reassign RESULT     give them the state of RESULT: SUCCESS, FAILURE, SUSPENSION or
                        FILTER (e.g. to acknowledge dead letters)

and either the tasks' SEQUENCEs (all or nothing: one task in another state refuses the
call) or --state S to revive tasks of that state, oldest first, at most --limit of them
(not with --reassign, which takes them all), optionally within --from/--to. A reset or
copies that would take the topic above its queue cap are refused whole, nothing changed.`

// reviveLimitMax is the largest --limit of a reset or recreate by state: one transaction
// that locks the tasks and answers each whole (input, output, errors), which the command
// holds in memory; a mistyped limit of millions held locks for minutes and exhausted the
// memory (the dashboard's bulk actions take 10 000 at once, push's batches 100 000).
const reviveLimitMax = 100_000

func runRevive(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask revive", "--topic T (--reset|--recreate MODE|--reassign RESULT) (SEQUENCE...|--state S) [flags]", reviveAbout)
	url := f.databaseURL()
	topic := f.String("topic", "", "`TOPIC` of the tasks (required)")
	reset := f.Bool("reset", false, "flip the tasks back to READY")
	recreate := f.String("recreate", "", "push fresh copies with insertion `MODE` (append, replace or supersede)")
	reassign := f.String("reassign", "", "give the tasks the state of `RESULT` (SUCCESS, FAILURE, SUSPENSION, FILTER)")
	stateName := f.String("state", "", "revive tasks of this `STATE` instead of listed sequences")
	limit := f.Int("limit", 1000, fmt.Sprintf("with --state: revive at most `N` tasks (at most %d)", reviveLimitMax))
	from, to := f.rangeFlags()
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := f.need("topic"); err != nil {
		return err
	}
	modes := 0
	for _, given := range []bool{*reset, f.given("recreate"), f.given("reassign")} {
		if given {
			modes++
		}
	}
	if modes != 1 {
		return f.usagef("want exactly one of --reset, --recreate MODE and --reassign RESULT")
	}
	var (
		mode   = repository.Reset
		result repository.Result
	)
	switch {
	case f.given("recreate"):
		switch strings.ToUpper(*recreate) {
		case "APPEND":
			mode = repository.RecreateAppend
		case "REPLACE":
			mode = repository.RecreateReplace
		case "SUPERSEDE":
			mode = repository.RecreateSupersede
		default:
			return f.usagef("--recreate: unknown mode %q (want one of APPEND, REPLACE, SUPERSEDE)", *recreate)
		}
	case f.given("reassign"):
		if result, err = repository.ParseResult(*reassign); err != nil {
			return f.usagef("--reassign: %s", stripInvalid(err))
		}
	}
	state, err := f.parseState("state", *stateName)
	if err != nil {
		return err
	}
	if state != nil && !state.Revivable() {
		return f.usagef("--state: %v tasks cannot be revived (want one of EXPIRED, FAILED, SUSPENDED, FILTERED, SUCCEEDED)", *state)
	}
	if (state == nil) == (len(pos) == 0) {
		return f.usagef("give either task SEQUENCEs or --state, not both or neither")
	}
	var seqs []int64
	if state == nil {
		for _, name := range []string{"limit", "from", "to"} {
			if f.given(name) {
				return f.usagef("--%s applies only with --state", name)
			}
		}
		if seqs, err = f.sequences(pos); err != nil {
			return err
		}
	} else {
		if f.given("reassign") && f.given("limit") {
			return f.usagef("--limit does not apply to --reassign, which reassigns every task of the state")
		}
		if f.given("reassign") && result.State() == *state {
			return f.usagef("--reassign %v: %v tasks have that result already", result, *state)
		}
		if *limit < 1 {
			return f.usagef("--limit: %d is below 1", *limit)
		}
		if *limit > reviveLimitMax {
			return f.usagef("--limit: %d is above %d: run it again for the next ones", *limit, reviveLimitMax)
		}
		if err := f.checkRange(*from, *to); err != nil {
			return err
		}
	}

	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()

	if f.given("reassign") {
		if state == nil {
			tasks, err := c.repo.Reassign(ctx, c.pool, *topic, result, seqs...)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "reassigned %d tasks of topic %q to %v (state %v)\n", len(tasks), *topic, result, result.State())
			return nil
		}
		lo, hi, err := f.resolveRange(ctx, c, *from, *to)
		if err != nil {
			return err
		}
		if empty, err := emptyRange(ctx, e, c, *topic, lo, hi); empty || err != nil {
			return err
		}
		n, err := c.repo.ReassignAll(ctx, c.pool, *topic, *state, result, lo, hi)
		if err != nil {
			if n > 0 {
				// 10 000 a transaction: those before the error or the interruption stay
				fmt.Fprintf(e.stdout, "reassigned %d %v tasks of topic %q to %v before stopping\n", n, *state, *topic, result)
			}
			return err
		}
		fmt.Fprintf(e.stdout, "reassigned %d %v tasks of topic %q to %v (state %v)\n", n, *state, *topic, result, result.State())
		return nil
	}

	var revivals []repository.Revival
	if state == nil {
		revivals, err = c.repo.Recreate(ctx, c.pool, *topic, mode, seqs...)
	} else {
		lo, hi, rerr := f.resolveRange(ctx, c, *from, *to)
		if rerr != nil {
			return rerr
		}
		if empty, err := emptyRange(ctx, e, c, *topic, lo, hi); empty || err != nil {
			return err
		}
		revivals, err = c.repo.RecreateState(ctx, c.pool, *topic, *state, mode, lo, hi, *limit)
	}
	if err != nil {
		return err
	}
	verb := "reset"
	if mode != repository.Reset {
		verb = fmt.Sprintf("recreated (%v)", mode)
	}
	fmt.Fprintf(e.stdout, "%s %d tasks of topic %q%s\n", verb, len(revivals), *topic, describeRevivals(revivals, mode))
	if state != nil && len(revivals) == *limit {
		fmt.Fprintf(e.stdout, "more %v tasks may remain: run again to revive the next %d\n", *state, *limit)
	}
	return nil
}

// describeRevivals lists the first revivals: old -> new sequence, or just the sequence
// for a reset.
func describeRevivals(revivals []repository.Revival, mode repository.RecreateMode) string {
	if len(revivals) == 0 {
		return ""
	}
	const show = 20
	parts := make([]string, 0, min(len(revivals), show)+1)
	for i, r := range revivals {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(revivals)-show))
			break
		}
		if mode == repository.Reset {
			parts = append(parts, fmt.Sprint(r.Old.Sequence))
		} else {
			parts = append(parts, fmt.Sprintf("%d->%d", r.Old.Sequence, r.New.Sequence))
		}
	}
	return ": " + strings.Join(parts, ", ")
}

func runCancel(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask cancel", "--topic T SEQUENCE... [flags]", `
Cancels tasks, all or nothing: READY, SUSPENDED and EXPIRED tasks become REDUNDANT at once,
with an output naming who cancelled them; an ACTIVE task's handler is told to stop (within
a second, in whichever process runs it) and the task ends FAILED "cancelled", never retried.`)
	url := f.databaseURL()
	topic := f.String("topic", "", "`TOPIC` of the tasks (required)")
	pos, err := f.args(args, 1, -1, "task SEQUENCE")
	if err != nil {
		return err
	}
	if err := f.need("topic"); err != nil {
		return err
	}
	seqs, err := f.sequences(pos)
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	tasks, err := c.repo.Cancel(ctx, c.pool, *topic, "pgtask cancel by "+whoami(e), seqs...)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if t.State == repository.Active {
			fmt.Fprintf(e.stdout, "task %d: ACTIVE: its handler is told to stop; it will end FAILED\n", t.Sequence)
		} else {
			fmt.Fprintf(e.stdout, "task %d: cancelled (now %v)\n", t.Sequence, t.State)
		}
	}
	return nil
}

func runPurge(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask purge", "--topic T [--state S] [--from F --to T] | --topic T --all | --retention", `
Deletes finished tasks (FAILED, SUSPENDED, FILTERED, SUCCEEDED, RECREATED, REDUNDANT) of a
topic, or only those of --state, optionally within --from/--to (a flag given empty is an
error, never "all"). ACTIVE, READY and EXPIRED tasks are never purged. --all instead
deletes EVERY task of the topic, whatever its state (10 000 per transaction, or by
TRUNCATE of its table when dedicated). --retention (without --topic) deletes, in every
topic that has a retention setting, the finished tasks completed longer ago than it:
running processors do so once a minute already; this is for deployments without one, or
to catch up at once.`)
	url := f.databaseURL()
	topic := f.String("topic", "", "`TOPIC` to purge (required unless --retention)")
	stateName := f.String("state", "", "only tasks of this finished `STATE`")
	all := f.Bool("all", false, "delete every task of the topic, unfinished ones included")
	retention := f.Bool("retention", false, "delete finished tasks older than their topic's retention, in every topic")
	from, to := f.rangeFlags()
	if err := f.noArgs(args); err != nil {
		return err
	}
	if *retention {
		for _, name := range []string{"topic", "state", "all", "from", "to"} {
			if f.given(name) {
				return f.usagef("--retention applies every topic's own retention: it does not combine with --%s", name)
			}
		}
		return purgeRetention(ctx, e, f, *url)
	}
	if err := f.need("topic"); err != nil {
		return err
	}
	state, err := f.parseState("state", *stateName)
	if err != nil {
		return err
	}
	if *all && (state != nil || *from != "" || *to != "") {
		return f.usagef("--all deletes every task: it does not combine with --state, --from or --to")
	}
	if state != nil && !state.Finished() {
		return f.usagef("--state: %v tasks cannot be purged (want one of FAILED, SUSPENDED, FILTERED, SUCCEEDED, RECREATED, REDUNDANT)", *state)
	}
	if err := f.checkRange(*from, *to); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	var n int64
	if *all {
		n, err = c.repo.PurgeAll(ctx, c.pool, *topic)
	} else {
		lo, hi, rerr := f.resolveRange(ctx, c, *from, *to)
		if rerr != nil {
			return rerr
		}
		if _, err := c.repo.Topic(ctx, c.pool, *topic); err != nil {
			return err
		}
		if empty, err := emptyRange(ctx, e, c, *topic, lo, hi); empty || err != nil {
			return err
		}
		n, err = c.repo.Purge(ctx, c.pool, *topic, lo, hi, state)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "purged %d tasks from topic %q\n", n, *topic)
	return nil
}

// retentionBatch is how many tasks one statement of "purge --retention" deletes, so that
// no single transaction grows large.
const retentionBatch = 10000

func purgeRetention(ctx context.Context, e *env, f *flags, url string) error {
	c, err := f.connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close()
	var total int64
	for {
		n, err := c.repo.PurgeRetention(ctx, c.pool, retentionBatch)
		if errors.Is(err, repository.ErrRetentionUnderWay) {
			// a processor's pass, on a distributed database: its turn is short (a
			// processor stops its passes after a few seconds), this one goes on after it
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (%d tasks purged before it)", ctx.Err(), total)
			case <-time.After(time.Second):
			}
			continue
		}
		if err != nil {
			if total > 0 {
				return fmt.Errorf("%w (%d tasks purged before it)", err, total)
			}
			return err
		}
		total += n
		if n < retentionBatch {
			break
		}
	}
	fmt.Fprintf(e.stdout, "purged %d tasks past their topic's retention\n", total)
	return nil
}

// expireTimeoutDefault is generous compared with the processor's own expiry (5 s): an
// operator running expire by hand should not take leases from a slow but live process.
const expireTimeoutDefault = time.Minute

func runExpire(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask expire", "[--timeout D] [flags]", `
Takes back the leases of processes that stopped heart-beating more than --timeout ago:
their ACTIVE tasks become EXPIRED, or READY again when the topic's retry policy grants
another attempt. Running processors do this by themselves; use it when none runs.`)
	url := f.databaseURL()
	timeout := f.duration("timeout", expireTimeoutDefault, "an owner silent this `DURATION` is dead")
	if err := f.noArgs(args); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	expiries, err := c.repo.Expire(ctx, c.pool, *timeout)
	if err != nil {
		return err
	}
	if len(expiries) == 0 {
		fmt.Fprintln(e.stdout, "no leases to take back")
		return nil
	}
	for _, x := range expiries {
		fmt.Fprintf(e.stdout, "topic %q: %d leases taken back, %d of them READY again for a retry\n", x.Topic, x.Expired, x.Retried)
	}
	return nil
}
