package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// Limits of the actions.
const (
	// actionBodyMax is the largest body an action accepts.
	actionBodyMax = 64 << 10
	// bulkMax is the most tasks a bulk action changes at once (purge, which deletes by
	// range in the database, has no limit).
	bulkMax = 10_000
	// bulkChunk is how many tasks one statement of a bulk action changes.
	bulkChunk = 1000
	// cancelledBy names the dashboard as the canceller of the tasks it cancels.
	cancelledBy = "dashboard"
)

// actionFunc performs an action from a decoded JSON body and returns the answer.
type actionFunc func(r *http.Request, body []byte) (any, error)

// action adapts an actionFunc: POST with a JSON body (the guard's Protect already
// refused cross-site requests), answered in JSON, {"error": …} on failure.
func (s *server) action(a actionFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.signedIn(r) {
			httpguard.WriteError(w, http.StatusUnauthorized, "sign in first: "+Prefix+"login")
			return
		}
		if err := repository.ValidateTopic(r.PathValue("topic")); err != nil {
			httpguard.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		// The form's fields are the body's; a query string (a state filter, say, put in
		// the address by hand) would be ignored while the action ran on the body's alone.
		if r.URL.RawQuery != "" {
			httpguard.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s takes no query string: give the form's fields in the body", r.URL.Path))
			return
		}
		body, err := httpguard.ReadBody(w, r, actionBodyMax)
		if err != nil {
			status := httpguard.BodyStatus(err)
			httpguard.WriteError(w, status, httpguard.ErrorText(err, status))
			return
		}
		out, err := a(r, body)
		if err != nil {
			status := statusOf(err)
			stopped := httpguard.Stopped(r, status)
			switch {
			case stopped:
				// the browser went away or the server's read timeout passed, which stopped
				// the work (the statement included): nothing failed here, as for a page
				status = http.StatusServiceUnavailable
				s.cfg.Logger.Info("dashboard action stopped: the browser went away or the read timeout passed",
					slog.String("path", r.URL.Path), slog.Any("error", err))
			case status == http.StatusInternalServerError:
				s.cfg.Logger.Error("dashboard action failed", slog.String("path", r.URL.Path), slog.Any("error", err))
			}
			text := httpguard.ErrorText(err, status) // the log has the whole error
			p := (*partialError)(nil)
			partial := errors.As(err, &p)
			switch {
			case stopped:
				text = errStopped
				if partial {
					text += p.note()
				}
			case partial:
				// what committed before the failure, said whatever the failure
				text = httpguard.ErrorText(p.err, status) + p.note()
			}
			httpguard.WriteError(w, status, text)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// errStopped answers an action the request's end stopped.
const errStopped = "the request was stopped before it ended (the server's read timeout passed): apply again"

// partialError is the failure of a bulk action after some of its statements committed.
type partialError struct {
	err     error
	changed int64
}

func (e *partialError) Error() string { return e.err.Error() + e.note() }
func (e *partialError) Unwrap() error { return e.err }

// note says what was changed before the failure, and what to do.
func (e *partialError) note() string {
	if errors.Is(e.err, repository.ErrWrongState) {
		return fmt.Sprintf(" (after %d changed: tasks changed state meanwhile; apply again)", e.changed)
	}
	return fmt.Sprintf(" (after %d changed)", e.changed)
}

// decode reads a JSON body into v as the REST API does (wire.DecodeObject): no unknown
// field, no field twice, nothing after the object, errors that name the field.
func decode(body []byte, v any) error {
	if err := wire.DecodeObject(body, v); err != nil {
		return badRequest("the body is not the JSON expected: %v", err)
	}
	return nil
}

// settingsBody is the settings form: every field is optional, durations are Go
// durations ("1s", "1h30m", "0s").
type settingsBody struct {
	MaxAttempts   *int32  `json:"max_attempts"`
	BackoffBase   *string `json:"backoff_base"`
	BackoffCap    *string `json:"backoff_cap"`
	BackoffJitter *string `json:"backoff_jitter"`
	QueueCap      *int64  `json:"queue_cap"`
	Retention     *string `json:"retention"`
}

// settings changes the settings the body names (Repository.UpdateSettings, which
// validates them all: nothing is written when one is wrong).
func (s *server) settings(r *http.Request, body []byte) (any, error) {
	var in settingsBody
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	durations := map[string]*time.Duration{}
	for name, text := range map[string]*string{"backoff_base": in.BackoffBase, "backoff_cap": in.BackoffCap,
		"backoff_jitter": in.BackoffJitter, "retention": in.Retention} {
		if text == nil {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(*text))
		if err != nil {
			return nil, badRequest("%s %q is not a duration such as 1s, 5m or 1h30m", name, *text)
		}
		switch {
		case d < 0:
			return nil, badRequest("%s %v is negative", name, d)
		case d%time.Millisecond != 0:
			return nil, badRequest("%s %v is not a whole number of milliseconds", name, d)
		}
		durations[name] = &d
	}
	// The repository's checks, said in the form's names (its own errors name the topic
	// and the setting in words of their own).
	if in.MaxAttempts != nil && *in.MaxAttempts < 1 {
		return nil, badRequest("max_attempts %d is below 1", *in.MaxAttempts)
	}
	if in.QueueCap != nil && *in.QueueCap < 0 {
		return nil, badRequest("queue_cap %d is negative (0: no cap)", *in.QueueCap)
	}
	var bad error
	t, err := s.repo.UpdateSettings(r.Context(), s.pool, r.PathValue("topic"), func(st *repository.TopicSettings) {
		old := *st
		defer func() {
			// a policy that changes may not have retries wait the cap, never the base;
			// refused, the settings are left as they were, which UpdateSettings does not
			// write
			if st.BackoffRefused(old) {
				bad = badRequest("backoff_cap %v is below backoff_base %v: retries would wait the cap, never the base", st.BackoffCap, st.BackoffBase)
				*st = old
			}
		}()
		if in.MaxAttempts != nil {
			st.MaxAttempts = *in.MaxAttempts
		}
		if in.QueueCap != nil {
			st.QueueCap = *in.QueueCap
		}
		for name, into := range map[string]*time.Duration{"backoff_base": &st.BackoffBase, "backoff_cap": &st.BackoffCap,
			"backoff_jitter": &st.BackoffJitter, "retention": &st.Retention} {
			if d := durations[name]; d != nil {
				*into = *d
			}
		}
	})
	if bad != nil {
		return nil, bad
	}
	if err != nil {
		return nil, err
	}
	return formOf(t.TopicSettings), nil
}

// bulkBody is a bulk action on the tasks of a filter (the topic page's).
type bulkBody struct {
	// Action is cancel, reassign, recreate or purge.
	Action string `json:"action"`
	// Result is reassign's result; Mode recreate's mode (reset, append, replace, supersede).
	Result string `json:"result"`
	Mode   string `json:"mode"`
	// The filter, as the topic page's query string has it.
	State      string `json:"state"`
	Identifier string `json:"identifier"`
	Reference  string `json:"reference"`
	From       string `json:"from"`
	To         string `json:"to"`
	// Before, when above 0, is where the search of a finished state (FILTERED,
	// SUCCEEDED) goes on: the tasks below this sequence, as the last answer said
	// (bulkResult.Before).
	Before int64 `json:"before"`
}

// bulkResult says what a bulk action did.
type bulkResult struct {
	Changed int64  `json:"changed"`
	Message string `json:"message"`
	// More is true when the action stopped before the end of its tasks (a purge whose
	// time was up, bulkMax tasks changed, a window of sequences searched): the same
	// action again goes on.
	More bool `json:"more,omitempty"`
	// Before, when above 0, is where the search of a finished state stopped: the same
	// action with this Before searches the older tasks.
	Before int64 `json:"before,omitempty"`
}

// bulk applies an action to every task of a filter: cancel (the READY, SUSPENDED,
// EXPIRED and ACTIVE ones), reassign or recreate (the broken ones, EXPIRED, FAILED and
// SUSPENDED, unless the filter names a state: then any revivable state, EXPIRED to
// SUCCEEDED, but never the one a reassign leads to), up to bulkMax tasks, read page by
// page; or purge (the finished ones, deleted by sequence range in the database: the
// identifier and reference filters do not apply to it). The by-task operations are the
// repository's, all or nothing per chunk, each committed: none begins once
// Config.BulkFor has passed, and the database stops one still running at
// Config.PurgeFor (runChunk); the answer then says what changed and asks for another
// (More), or fails (503) when the first chunk was stopped, since another would meet
// the same. A failure after chunks committed says how many tasks they changed
// (partialError).
func (s *server) bulk(r *http.Request, body []byte) (any, error) {
	var in bulkBody
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.Before < 0 {
		return nil, badRequest("before %d is not a sequence", in.Before)
	}
	f := taskFilter{State: in.State, Identifier: in.Identifier, Reference: in.Reference, From: in.From, To: in.To}
	res, err := s.resolve(r, f)
	if err != nil {
		return nil, err
	}
	start, ctx, topic := time.Now(), r.Context(), r.PathValue("topic")
	if _, err := s.repo.Topic(ctx, s.pool, topic); err != nil {
		return nil, err
	}
	// the by-task statements: none begins after BulkFor, none runs past PurgeFor (the
	// database's statement_timeout, runChunk); the context ends a little later, for a
	// database that no longer answers
	deadline := start.Add(s.cfg.PurgeFor)
	wctx, cancel := context.WithDeadline(ctx, deadline.Add(bulkGrace))
	defer cancel()
	// a time range in which no task was created: nothing to do, once the action is checked
	nothing := bulkResult{Message: "no task was created in that time range: nothing to do"}
	what := in.Action // the action, as its errors name it
	// keep is the states the action applies to when the filter names one; without a
	// state, it applies to those of them that fallback keeps as well
	var (
		keep, fallback func(repository.State) bool
		// done tells a task the action has already been applied to (nil: none), which a
		// search passes over: "apply again" would otherwise find it again and again
		done  func(repository.Excerpt) bool
		apply func(h repository.Handle, seqs []int64) (int, error)
		// exact: the action changes only tasks in the state the filter names, if any
		exact bool
	)
	switch in.Action {
	case "purge":
		if f.Identifier != "" || f.Reference != "" {
			return nil, badRequest("purge deletes by state and time range: clear the identifier and reference filters")
		}
		if res.filter.State != nil && !res.filter.State.Finished() {
			return nil, badRequest("purge deletes finished tasks only (FAILED to REDUNDANT), not %s", *res.filter.State)
		}
		if res.from > res.to {
			return nothing, nil
		}
		// Purge commits every batch it deletes: when its time is up, what it deleted
		// stays, and the answer says so rather than failing the request
		pctx, cancel := context.WithTimeout(ctx, s.cfg.PurgeFor)
		defer cancel()
		n, err := s.repo.Purge(pctx, s.pool, topic, res.from, res.to, res.filter.State)
		if err != nil && pctx.Err() != nil && ctx.Err() == nil {
			return bulkResult{Changed: n, More: true,
				Message: fmt.Sprintf("purged %d finished tasks in %v, and more may remain: purge again to go on", n, s.cfg.PurgeFor)}, nil
		}
		if err != nil {
			return nil, err
		}
		return bulkResult{Changed: n, Message: fmt.Sprintf("purged %d finished tasks", n)}, nil
	case "cancel":
		keep = func(st repository.State) bool {
			return st == repository.Ready || st == repository.Suspended || st == repository.Expired || st == repository.Active
		}
		fallback = keep
		// a cancelled ACTIVE task stays ACTIVE until its handler ends
		done = func(t repository.Excerpt) bool { return t.State == repository.Active && t.Cancelled }
		apply = counted(func(h repository.Handle, seqs []int64) ([]repository.Task, error) {
			return s.repo.Cancel(wctx, h, topic, cancelledBy, seqs...)
		})
	case "reassign":
		result, err := repository.ParseResult(in.Result)
		if err != nil {
			return nil, badRequest("result %q is unknown: want SUCCESS, FAILURE, SUSPENSION or FILTER", in.Result)
		}
		// a task already in the state the result leads to would only have its completion
		// rewritten, at every "apply again"
		keep = func(st repository.State) bool { return st.Revivable() && st != result.State() }
		what += " to " + result.String()
		exact, fallback, apply = true, broken, counted(func(h repository.Handle, seqs []int64) ([]repository.Task, error) {
			if err := s.repo.Hold(wctx, h, what, topic, keep, statesOf(keep), seqs...); err != nil {
				return nil, err
			}
			return s.repo.Reassign(wctx, h, topic, result, seqs...)
		})
	case "recreate":
		mode, err := repository.ParseRecreateMode(in.Mode)
		if err != nil {
			return nil, badRequest("mode %q is unknown: want reset, append, replace or supersede", in.Mode)
		}
		keep, exact, fallback, apply = repository.State.Revivable, true, broken, counted(func(h repository.Handle, seqs []int64) ([]repository.Revival, error) {
			if err := s.repo.Hold(wctx, h, what, topic, keep, statesOf(keep), seqs...); err != nil {
				return nil, err
			}
			return s.repo.Recreate(wctx, h, topic, mode, seqs...)
		})
	default:
		return nil, badRequest("action %q is unknown: want cancel, reassign, recreate or purge", in.Action)
	}
	if st := res.filter.State; st != nil && !keep(*st) {
		// a filter on a state the action never changes would change nothing, answered
		// as a success (purge refuses its own such mistake, as REST's revive does)
		return nil, badRequest("%s applies to tasks %s, not %s: change the state filter", what, statesOf(keep), *st)
	}
	if res.filter.State == nil {
		// without a state, a revival touches the broken tasks only: the finished ones
		// (FILTERED, SUCCEEDED) need the filter to name their state
		applies := keep
		keep = func(st repository.State) bool { return applies(st) && fallback(st) }
	} else if exact {
		// A revival changes the tasks still in the state the filter names, which its
		// statements hold (Repository.Hold) and pass over the others: a task searched
		// as SUSPENDED that succeeded since was reset to READY, and ran again.
		st := *res.filter.State
		keep = func(s repository.State) bool { return s == st }
	}
	if res.from > res.to {
		return nothing, nil
	}
	seqs, before, err := s.matching(r, topic, res, keep, done, in.Before)
	if err != nil {
		return nil, err
	}
	if hook := testHookMatched.Load(); hook != nil {
		(*hook)(s.pool)
	}
	var (
		changed int64
		late    bool // the time was up before the last statement
		unknown int  // how many tasks a statement cancelled as it ran may have changed
		passed  int  // tasks passed over: they left the action's states since the search
	)
	for chunk := range slices.Chunk(seqs, bulkChunk) {
		if changed > 0 && time.Since(start) >= s.cfg.BulkFor {
			late = true
			break
		}
		n, err := s.runChunk(wctx, deadline, apply, chunk)
		// A task that changed state since the search (an ACTIVE task that ended, a
		// READY one leased) makes the statement refuse its whole chunk: the chunk goes
		// again without the tasks refused so, a few times. On a busy topic the search
		// meets such tasks every time, and the action never went through.
		for range passOvers {
			left, ok := withoutRefused(err, chunk, keep)
			if !ok || time.Since(start) >= s.cfg.BulkFor {
				break
			}
			passed += len(chunk) - len(left)
			if chunk = left; len(chunk) == 0 {
				n, err = 0, nil
				break
			}
			n, err = s.runChunk(wctx, deadline, apply, chunk)
		}
		if errors.Is(err, errStatementTimeout) {
			late = true // stopped by the database: its transaction changed nothing
			break
		}
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			late = true // cancelled: the statement changed nothing, unless it was committing
			if repository.Uncertain(err) {
				unknown = len(chunk)
			}
			break
		}
		if err != nil {
			if errors.Is(err, repository.ErrWrongState) || changed > 0 {
				// the statements before this one committed (a queue cap that refuses a
				// later chunk of resets or copies, say)
				err = &partialError{err: err, changed: changed}
			}
			return nil, err
		}
		changed += int64(n)
	}
	if late && changed == 0 {
		// the first statement did not finish in time: "apply again" would meet the same
		// rows, or the same slowness, and answer the same at every try
		outcome := "nothing changed"
		if unknown > 0 {
			outcome = fmt.Sprintf("it was cancelled before its answer came, so its %d tasks may have changed", unknown)
		}
		return nil, fmt.Errorf("%w: %s: the first statement, of %d tasks, did not finish in %v (the time one action has, the search for the tasks included), and %s: another transaction may hold these tasks' rows, or the database is slow; try again later",
			errTooSlow, what, min(len(seqs), bulkChunk), s.cfg.PurgeFor, outcome)
	}
	out := bulkResult{Changed: changed, Message: fmt.Sprintf("%s: %d tasks", in.Action, changed), Before: before}
	if passed > 0 {
		out.Message += fmt.Sprintf(" (%d passed over: they changed state meanwhile)", passed)
	}
	switch {
	case late:
		// the next search starts from the newest again: the tasks left match still
		out.More, out.Before = true, 0
		out.Message += fmt.Sprintf(" in %v, the time one action has: apply again for more", time.Since(start).Round(time.Millisecond))
		if unknown > 0 {
			out.Message += fmt.Sprintf(" (the last statement, of %d tasks, was cancelled before its answer came: they may have changed too)", unknown)
		}
	case len(seqs) == bulkMax:
		out.More = true
		out.Message += fmt.Sprintf(" (at most %d at once: apply again for more)", bulkMax)
	case before > 0:
		out.More = true
		out.Message += fmt.Sprintf(" (the newest %d sequences searched at most at once): older tasks may match, apply again to search before %d, or narrow the time range",
			scanWindow, before)
	}
	return out, nil
}

// testHookMatched, when set (tests), runs between a bulk action's search and its
// statements, given the dashboard's pool (the tests run in parallel, each on its own
// database: a hook acts on its own test's bulk action alone).
var testHookMatched atomic.Pointer[func(*pgxpool.Pool)]

// passOvers is how many times a bulk action's chunk goes again without the tasks its
// statement refused as no longer in a state the action applies to.
const passOvers = 3

// withoutRefused returns chunk without the tasks err (a refusal of the whole chunk,
// nothing written) names as gone or in a state the action does not apply to (keep
// false); ok is false when err is no such refusal, or names a task still in a state the
// action applies to (a change that raced the statement: the chunk is not passed over,
// and the action answers "apply again").
func withoutRefused(err error, chunk []int64, keep func(repository.State) bool) (left []int64, ok bool) {
	var te *repository.TaskError
	if !errors.As(err, &te) || len(te.Problems) == 0 {
		return nil, false
	}
	refused := make(map[int64]bool, len(te.Problems))
	for _, p := range te.Problems {
		gone := errors.Is(p.Err, repository.ErrUnknownTask)
		if !gone && (!errors.Is(p.Err, repository.ErrWrongState) || keep(p.State)) {
			return nil, false
		}
		refused[p.Sequence] = true
	}
	for _, seq := range chunk {
		if !refused[seq] {
			left = append(left, seq)
		}
	}
	return left, true
}

// broken reports whether a task of state st went wrong: EXPIRED, FAILED or SUSPENDED,
// what a bulk revival applies to when the filter names no state.
func broken(st repository.State) bool {
	return st == repository.Expired || st == repository.Failed || st == repository.Suspended
}

// counted adapts a by-task operation to report how many tasks it changed.
func counted[T any](op func(h repository.Handle, seqs []int64) ([]T, error)) func(h repository.Handle, seqs []int64) (int, error) {
	return func(h repository.Handle, seqs []int64) (int, error) {
		out, err := op(h, seqs)
		return len(out), err
	}
}

// bulkGrace is how long after its deadline a bulk action's context ends: the database
// stops the statements itself at the deadline, and answers so.
const bulkGrace = time.Second

// errStatementTimeout marks a chunk the database stopped at the action's deadline.
var errStatementTimeout = errors.New("statement timeout")

// runChunk applies a bulk action to one chunk in a transaction whose statement_timeout
// ends at deadline, so that the database stops a statement still running then (a row
// lock another transaction holds, say) and undoes it: a context's end alone only makes
// pgx drop its connection, and the server would go on with the statement and commit it
// unseen. A chunk the database stopped returns errStatementTimeout.
func (s *server) runChunk(ctx context.Context, deadline time.Time, apply func(repository.Handle, []int64) (int, error), chunk []int64) (int, error) {
	left := time.Until(deadline).Milliseconds()
	if left < 1 {
		return 0, errStatementTimeout
	}
	// READ COMMITTED whatever the database's default, as the repository's own
	// transactions: a task another transaction changed meanwhile is taken as it is then
	// (under REPEATABLE READ the chunk failed with a serialization error)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(left, 10)); err != nil {
		return 0, err
	}
	n, err := apply(tx, chunk)
	if err != nil {
		if repository.SQLState(err) == sqlstateQueryCanceled && ctx.Err() == nil {
			return 0, fmt.Errorf("%w: %w", errStatementTimeout, err)
		}
		return 0, err
	}
	// a COMMIT that fails is not the statement stopped in time: its outcome is the
	// caller's to tell (repository.Uncertain)
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return n, nil
}

// sqlstateQueryCanceled is the SQLSTATE of a statement stopped by statement_timeout.
const sqlstateQueryCanceled = "57014"

// matching reads the sequences of up to bulkMax tasks of the filter whose state keep
// accepts, passing over those done (when not nil) says the action was applied to
// already, a page at a time (keyset). Without a state in the filter it reads each state
// keep accepts in turn, as if the filter named it. An unfinished or broken state
// (ACTIVE to SUSPENDED), an identifier or a reference is read through its own index
// (Repository.Excerpts), oldest first, so that a cancel of "any" state costs what the
// tasks it cancels cost, not a walk through the topic's millions of finished tasks.
//
// A finished state alone (FILTERED, SUCCEEDED) has no index: as on the topic page, it
// is looked for in the scanWindow sequences below the end of the time range (or below
// before, when above 0) at most, newest first. next, when above 0, is where the search
// stopped with older tasks unsearched: the same action with before = next goes on.
func (s *server) matching(r *http.Request, topic string, res resolved, keep func(repository.State) bool,
	done func(repository.Excerpt) bool, before int64) (seqs []int64, next int64, err error) {
	var states []repository.State
	if res.filter.State != nil {
		states = append(states, *res.filter.State)
	} else {
		states = repository.States()
	}
	if len(states) == 1 && !narrow(res.filter) && keep(states[0]) {
		return s.matchingWindow(r, topic, res, before)
	}
	for _, state := range states {
		if !keep(state) {
			continue
		}
		filter := res.filter
		filter.State = &state
		cursor := max(res.from-1, repository.MinSequence)
	pages:
		for len(seqs) < bulkMax {
			page, err := s.repo.Excerpts(r.Context(), s.pool, topic, filter, cursor, bulkChunk, repository.Forward)
			if err != nil {
				return nil, 0, err
			}
			for _, t := range page {
				if t.Sequence > res.to || len(seqs) == bulkMax {
					break pages
				}
				if done != nil && done(t) {
					continue
				}
				seqs = append(seqs, t.Sequence)
			}
			if len(page) < bulkChunk {
				break
			}
			cursor = page[len(page)-1].Sequence
		}
	}
	return seqs, 0, nil
}

// matchingWindow is matching of a finished state alone: up to bulkMax tasks of the
// scanWindow sequences below the end of the range (or below before), newest first.
func (s *server) matchingWindow(r *http.Request, topic string, res resolved, before int64) (seqs []int64, next int64, err error) {
	cursor := res.end()
	if before > 0 {
		cursor = min(cursor, before)
	}
	if cursor == repository.MaxSequence {
		last, err := s.repo.LastSequence(r.Context(), s.pool)
		if err != nil {
			return nil, 0, err
		}
		cursor = last + 1
	}
	bottom := max(res.from-1, 0) // the range's floor
	filter := res.filter
	filter.Floor = max(bottom, cursor-scanWindow)
	floor := filter.Floor
	for len(seqs) < bulkMax {
		size := min(bulkChunk, bulkMax-len(seqs))
		page, err := s.repo.Excerpts(r.Context(), s.pool, topic, filter, cursor, size, repository.Backward)
		if err != nil {
			return nil, 0, err
		}
		for _, t := range page {
			seqs = append(seqs, t.Sequence)
		}
		if len(page) < size {
			break
		}
		cursor = page[len(page)-1].Sequence
	}
	switch {
	case len(seqs) == bulkMax:
		// the window's tasks below the last one taken are not read yet
		return seqs, seqs[len(seqs)-1], nil
	case floor > bottom:
		return seqs, floor + 1, nil
	}
	return seqs, 0, nil
}

// statesOf names the states keep allows, for a refusal's "want".
func statesOf(keep func(repository.State) bool) string {
	var names []string
	for _, st := range repository.States() {
		if keep(st) {
			names = append(names, st.String())
		}
	}
	return strings.Join(names, ", ")
}
