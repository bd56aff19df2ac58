package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// errBadRequest marks errors in the request itself (status 400).
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// invalid turns a repository.Validate… error into a 400 with the same message.
func invalid(err error) error {
	return badRequest("%s", strings.TrimPrefix(err.Error(), repository.ErrInvalid.Error()+": "))
}

// decodeStrict decodes a JSON object into v as wire.DecodeObject does (no unknown
// field, no field twice, nothing after the object, text that is UTF-8), its errors 400s.
func decodeStrict(body []byte, v any) error {
	if err := wire.DecodeObject(body, v); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// taskBody is one task of an enqueue request; the top level has the same fields, so a
// single task needs no wrapping, and "tasks" for a batch.
type taskBody struct {
	Identifier string          `json:"identifier"`
	Input      json.RawMessage `json:"input"`
	Insertion  *string         `json:"insertion"`
	Delay      *string         `json:"delay"`
	DelayMs    *int64          `json:"delay_ms"`
	NotBefore  *string         `json:"not_before"`
	Priority   int16           `json:"priority"`
	Reference  string          `json:"reference"`
	Suspended  bool            `json:"suspended"`
	Key        string          `json:"key"`
	Tasks      []taskBody      `json:"tasks"`
}

// enqueue is a decoded enqueue request.
type enqueue struct {
	insertion repository.Insertion
	creations []repository.Creation
	// single is true for the one-task form (no "tasks" array).
	single bool
}

// BatchMax is the most tasks a batch push may hold. The 1 MiB body alone let through some
// 50 000 tiny tasks, whose answer (every task created, in full) came to some 16 MB and
// took the server some 150 MB to build; a client with more pushes them in several
// requests.
const BatchMax = 10_000

// decodeEnqueue decodes the body of POST /topics/{topic}/tasks: either one task
//
//	{"identifier": "a", "input": …, "insertion": "append", "delay": "10s", …}
//
// or a batch sharing one insertion mode
//
//	{"tasks": [{"identifier": "a", …}, …], "insertion": "replace"}
//
// Every error wraps errBadRequest.
func decodeEnqueue(body []byte) (enqueue, error) {
	var top taskBody
	if err := decodeStrict(body, &top); err != nil {
		return enqueue{}, batchError(body, err)
	}
	out := enqueue{insertion: repository.Append}
	if top.Insertion != nil {
		ins, err := repository.ParseInsertion(*top.Insertion)
		if err != nil {
			return enqueue{}, badRequest("insertion %q is unknown: want append, replace, supersede or delete", *top.Insertion)
		}
		out.insertion = ins
	}
	if top.Tasks == nil {
		c, err := creation(top)
		if err != nil {
			return enqueue{}, err
		}
		out.single = true
		out.creations = []repository.Creation{c}
		return out, nil
	}
	if top.Identifier != "" || top.Input != nil || top.Delay != nil || top.DelayMs != nil || top.NotBefore != nil ||
		top.Priority != 0 || top.Reference != "" || top.Suspended || top.Key != "" {
		return enqueue{}, badRequest(`with "tasks", only "insertion" may stand beside it: put the task fields inside each task`)
	}
	if len(top.Tasks) == 0 {
		return enqueue{}, badRequest(`"tasks" is empty: want at least one task`)
	}
	if len(top.Tasks) > BatchMax {
		return enqueue{}, badRequest(`"tasks" holds %d tasks: at most %d per request`, len(top.Tasks), BatchMax)
	}
	out.creations = make([]repository.Creation, len(top.Tasks))
	for i, t := range top.Tasks {
		if t.Insertion != nil {
			return enqueue{}, badRequest(`tasks[%d]: "insertion" applies to the whole batch: put it beside "tasks"`, i)
		}
		if t.Tasks != nil {
			return enqueue{}, badRequest(`tasks[%d]: "tasks" cannot be nested`, i)
		}
		c, err := creation(t)
		if err != nil {
			return enqueue{}, badRequest("tasks[%d]: %s", i, strings.TrimPrefix(err.Error(), errBadRequest.Error()+": "))
		}
		out.creations[i] = c
	}
	return out, nil
}

// batchError is err, the error of decoding body, naming the task of a batch it is
// about: encoding/json says neither which task has an unknown field nor which one's
// field has the wrong type ("tasks.priority"), and in a batch of a thousand the client
// needs to know.
func batchError(body []byte, err error) error {
	var batch struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if json.Unmarshal(body, &batch) != nil {
		return err
	}
	for i, raw := range batch.Tasks {
		var t taskBody
		if terr := wire.DecodeObject(raw, &t); terr != nil {
			return badRequest("tasks[%d]: %v", i, terr)
		}
	}
	return err
}

// maxDelayMs keeps delay_ms within time.Duration.
const maxDelayMs = math.MaxInt64 / int64(time.Millisecond)

func creation(t taskBody) (repository.Creation, error) {
	if t.Identifier == "" {
		return repository.Creation{}, badRequest(`"identifier" is required`)
	}
	c := repository.Creation{
		Identifier: t.Identifier,
		Reference:  t.Reference,
		Suspended:  t.Suspended,
		Priority:   t.Priority,
		// "key": the task's concurrency key
		ConcurrencyKey: t.Key,
	}
	input, err := inputText(t.Input)
	if err != nil {
		return repository.Creation{}, err
	}
	c.Input = input
	given := 0
	for _, set := range []bool{t.Delay != nil, t.DelayMs != nil, t.NotBefore != nil} {
		if set {
			given++
		}
	}
	if given > 1 {
		return repository.Creation{}, badRequest(`give at most one of "delay", "delay_ms" and "not_before"`)
	}
	switch {
	case t.Delay != nil:
		d, err := time.ParseDuration(*t.Delay)
		if err != nil {
			return repository.Creation{}, badRequest(`"delay" %q is not a duration such as "90s" or "1h30m"`, *t.Delay)
		}
		if d < 0 {
			return repository.Creation{}, badRequest(`"delay" %q is negative`, *t.Delay)
		}
		c.Delay = d
	case t.DelayMs != nil:
		if *t.DelayMs < 0 || *t.DelayMs > maxDelayMs {
			return repository.Creation{}, badRequest(`"delay_ms" %d is out of range 0..%d`, *t.DelayMs, maxDelayMs)
		}
		c.Delay = time.Duration(*t.DelayMs) * time.Millisecond
	case t.NotBefore != nil:
		at, err := time.Parse(time.RFC3339Nano, *t.NotBefore)
		if err != nil {
			return repository.Creation{}, badRequest(`"not_before" %q is not an RFC 3339 time such as "2030-01-02T15:04:05Z"`, *t.NotBefore)
		}
		if at.IsZero() {
			at = time.Unix(0, 0) // the zero time would mean "no not-before"
		}
		c.NotBefore = at
	}
	if err := c.Validate(); err != nil {
		return repository.Creation{}, invalid(err)
	}
	return c, nil
}

// inputText turns the "input" field into the stored text: a JSON string is stored as its
// value, any other JSON value as its compact JSON text, and null or absence as no input.
func inputText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(`"input": %v`, err)
		}
		return s, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", badRequest(`"input": %v`, err)
	}
	return b.String(), nil
}

// revive is a decoded revive request: exactly one of mode and result is set; state,
// when set, is the state the task must still be in.
type revive struct {
	mode   *repository.RecreateMode
	result *repository.Result
	state  *repository.State
}

// decodeRevive decodes {"mode": "reset|append|replace|supersede"} (recreate) or
// {"result": "SUCCESS|FAILURE|SUSPENSION|FILTER"} (reassign), either with an optional
// "state" (EXPIRED..SUCCEEDED): the state the client saw the task in.
func decodeRevive(body []byte) (revive, error) {
	var in struct {
		Mode   *string `json:"mode"`
		Result *string `json:"result"`
		State  *string `json:"state"`
	}
	if err := decodeStrict(body, &in); err != nil {
		return revive{}, err
	}
	var state *repository.State
	if in.State != nil {
		st, err := repository.ParseState(*in.State)
		if err != nil || !st.Revivable() {
			return revive{}, badRequest(`"state" %q is not a state a task is revived from: want expired, failed, suspended, filtered or succeeded`, *in.State)
		}
		state = &st
	}
	rv, err := decodeReviveAction(in.Mode, in.Result)
	rv.state = state
	return rv, err
}

// decodeReviveAction decodes a revive request's mode or result.
func decodeReviveAction(mode, result *string) (revive, error) {
	switch {
	case mode != nil && result != nil:
		return revive{}, badRequest(`give either "mode" (recreate) or "result" (reassign), not both`)
	case mode != nil:
		m, err := repository.ParseRecreateMode(*mode)
		if err != nil {
			return revive{}, badRequest(`"mode" %q is unknown: want reset, append, replace or supersede`, *mode)
		}
		return revive{mode: &m}, nil
	case result != nil:
		r, err := repository.ParseResult(*result)
		if err != nil {
			return revive{}, badRequest(`"result" %q is unknown: want success, failure, suspension or filter`, *result)
		}
		return revive{result: &r}, nil
	}
	return revive{}, badRequest(`give "mode" (reset, append, replace, supersede) or "result" (success, failure, suspension, filter)`)
}

// cancelByDefault names the canceller when the request does not.
const cancelByDefault = "rest"

// decodeCancel decodes the optional body {"by": "who"} of a cancel; an empty body is fine.
func decodeCancel(body []byte) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return cancelByDefault, nil
	}
	var in struct {
		By string `json:"by"`
	}
	if err := decodeStrict(body, &in); err != nil {
		return "", err
	}
	if in.By == "" {
		return cancelByDefault, nil
	}
	if err := repository.ValidateCanceller(in.By); err != nil {
		return "", invalid(err)
	}
	return in.By, nil
}

// list is a decoded task listing query.
type list struct {
	filter    repository.TaskFilter
	cursor    int64
	limit     int
	direction repository.Direction
}

// decodeList decodes the query of GET /topics/{topic}/tasks: state, identifier,
// reference, cursor, limit and direction, each at most once; others are refused.
// pageQuery is a decoded query of a listing by name (GET /topics, GET /schedules).
type pageQuery struct {
	search, after string
	limit         int
}

// parseQuery reads r's query string, refusing one that does not decode: url.Query drops
// a pair with a bad escape ("50%off") or a semicolon, and the list answered as if the
// filter, or the page's after, had not been given (a client passing a name back
// unescaped paged the first page for ever).
func parseQuery(r *http.Request) (url.Values, error) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("malformed query string: %v (escape %%, ; and & in a value as %%25, %%3B and %%26)", err)
	}
	return values, nil
}

// decodePageQuery decodes the query of a listing by name (GET /topics, GET /schedules):
// q (a part of the name), after (the previous page's next) and limit (1..TopicLimitMax,
// default ListLimitDefault); q and after are at most maxLength characters, the longest
// name of what is listed.
func decodePageQuery(q url.Values, what string, maxLength int) (pageQuery, error) {
	out := pageQuery{limit: ListLimitDefault}
	for key, values := range q {
		switch key {
		case "q", "after", "limit":
		default:
			return pageQuery{}, badRequest("unknown query parameter %q: GET /%s takes q, after or limit", key, what)
		}
		if len(values) > 1 {
			return pageQuery{}, badRequest("query parameter %q is given %d times", key, len(values))
		}
		// an empty after (a next of null pasted in) would start again from the first
		// page; an empty q is every one, as a search box left empty says
		if key != "q" && values[0] == "" {
			return pageQuery{}, badRequest("query parameter %q is empty: leave it out for its default", key)
		}
	}
	out.search, out.after = q.Get("q"), q.Get("after")
	for name, v := range map[string]string{"q": out.search, "after": out.after} {
		if n := utf8.RuneCountInString(v); n > maxLength {
			return pageQuery{}, badRequest("%s is %d characters long, at most %d allowed", name, n, maxLength)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > TopicLimitMax {
			return pageQuery{}, badRequest("limit %q is out of range 1..%d", v, TopicLimitMax)
		}
		out.limit = n
	}
	return out, nil
}

func decodeList(q url.Values) (list, error) {
	out := list{limit: ListLimitDefault, direction: repository.Forward}
	for key, values := range q {
		switch key {
		case "state", "identifier", "reference", "cursor", "limit", "direction":
		default:
			return list{}, badRequest("unknown query parameter %q: want state, identifier, reference, cursor, limit or direction", key)
		}
		if len(values) > 1 {
			return list{}, badRequest("query parameter %q is given %d times", key, len(values))
		}
		// An empty filter would list every task (an identifier left empty by the
		// caller's code, say), not none; an empty cursor (a next_cursor of null pasted
		// in) would start again from the first page, and a client looping over pages
		// would never end.
		if values[0] == "" {
			if key == "state" || key == "identifier" || key == "reference" {
				return list{}, badRequest("query parameter %q is empty: leave it out to list tasks whatever their %s", key, key)
			}
			return list{}, badRequest("query parameter %q is empty: leave it out for its default", key)
		}
	}
	if v := q.Get("direction"); v != "" {
		switch strings.ToLower(v) {
		case "forward":
		case "backward":
			out.direction = repository.Backward
		default:
			return list{}, badRequest("direction %q is unknown: want forward or backward", v)
		}
	}
	out.cursor = repository.MinSequence
	if out.direction == repository.Backward {
		out.cursor = repository.MaxSequence
	}
	if v := q.Get("cursor"); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 0 {
			return list{}, badRequest("cursor %q is not a sequence (a non-negative integer)", v)
		}
		out.cursor = c
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListLimitMax {
			return list{}, badRequest("limit %q is out of range 1..%d", v, ListLimitMax)
		}
		out.limit = n
	}
	if v := q.Get("state"); v != "" {
		s, err := repository.ParseState(v)
		if err != nil {
			return list{}, badRequest("state %q is unknown: want one of %s", v, stateNames())
		}
		out.filter.State = &s
	}
	out.filter.Identifier = q.Get("identifier")
	out.filter.Reference = q.Get("reference")
	if err := repository.ValidateFilter(out.filter); err != nil {
		return list{}, invalid(err)
	}
	return out, nil
}

func stateNames() string {
	var names []string
	for _, s := range repository.States() {
		names = append(names, s.String())
	}
	return strings.Join(names, ", ")
}

// parseSequence parses the {sequence} path segment.
func parseSequence(v string) (int64, error) {
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s <= 0 {
		return 0, badRequest("sequence %q is not a positive integer", v)
	}
	return s, nil
}

// settingsBody is the body of PATCH /topics/{topic}: the settings to change, each
// optional. A limit is a whole number of at least 1, or null for none.
type settingsBody struct {
	MaxAttempts     *int32          `json:"max_attempts"`
	BackoffBaseMs   *int64          `json:"backoff_base_ms"`
	BackoffCapMs    *int64          `json:"backoff_cap_ms"`
	BackoffJitterMs *int64          `json:"backoff_jitter_ms"`
	QueueCap        *int64          `json:"queue_cap"`
	RetentionMs     *int64          `json:"retention_ms"`
	Concurrency     nullable[int32] `json:"concurrency" null:"none"`
	KeyConcurrency  nullable[int32] `json:"key_concurrency" null:"none"`
	Rate            nullable[int32] `json:"rate" null:"none"`
	RatePeriodMs    nullable[int64] `json:"rate_period_ms" null:"none"`
	RateBurst       nullable[int32] `json:"rate_burst" null:"none"`
	Fair            *bool           `json:"fair"`
}

// nullable is a field that may be absent (keep), null (none) or a value.
type nullable[T any] struct {
	given bool
	value *T
}

func (n *nullable[T]) UnmarshalJSON(b []byte) error {
	n.given = true
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &n.value)
}

// decodeSettings decodes the body of PATCH /topics/{topic} into a change of settings,
// which fails (wrapping errBadRequest) on a limit below 1, a rate without its period, or
// a period or burst without a rate. Other checks are the repository's.
func decodeSettings(body []byte) (func(*repository.TopicSettings) error, error) {
	var b settingsBody
	if err := decodeStrict(body, &b); err != nil {
		return nil, err
	}
	limit := func(name string, n nullable[int32]) error {
		if n.value != nil && *n.value < 1 {
			return badRequest("%q %d is below 1 (null: no limit; pause a topic to run none of its tasks)", name, *n.value)
		}
		return nil
	}
	for _, l := range []struct {
		name string
		v    nullable[int32]
	}{{"concurrency", b.Concurrency}, {"key_concurrency", b.KeyConcurrency}, {"rate", b.Rate}, {"rate_burst", b.RateBurst}} {
		if err := limit(l.name, l.v); err != nil {
			return nil, err
		}
	}
	for _, d := range []struct {
		name string
		v    *int64
	}{{"backoff_base_ms", b.BackoffBaseMs}, {"backoff_cap_ms", b.BackoffCapMs}, {"backoff_jitter_ms", b.BackoffJitterMs},
		{"retention_ms", b.RetentionMs}, {"rate_period_ms", b.RatePeriodMs.value}} {
		if d.v != nil && (*d.v < 0 || *d.v > maxDurationMs) {
			return nil, badRequest("%q %d is out of range (0 to %d ms)", d.name, *d.v, maxDurationMs)
		}
	}
	if b.MaxAttempts != nil && *b.MaxAttempts < 1 {
		return nil, badRequest(`"max_attempts" %d is below 1`, *b.MaxAttempts)
	}
	if b.QueueCap != nil && *b.QueueCap < 0 {
		return nil, badRequest(`"queue_cap" %d is negative (0: no cap)`, *b.QueueCap)
	}
	if b.RatePeriodMs.given && b.RatePeriodMs.value == nil && !(b.Rate.given && b.Rate.value == nil) {
		return nil, badRequest(`"rate_period_ms" is null: a rate needs its period (give "rate": null to remove the rate limit)`)
	}
	if b.RatePeriodMs.value != nil && *b.RatePeriodMs.value < 1 {
		return nil, badRequest(`"rate_period_ms" %d is below 1`, *b.RatePeriodMs.value)
	}
	if b.Rate.value != nil && b.RatePeriodMs.value == nil {
		return nil, badRequest(`"rate" needs "rate_period_ms", its period`)
	}
	if b.Rate.given && b.Rate.value == nil && (b.RatePeriodMs.value != nil || b.RateBurst.value != nil) {
		return nil, badRequest(`"rate" is null (no rate limit): "rate_period_ms" and "rate_burst" cannot be given with it`)
	}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return func(s *repository.TopicSettings) error {
		// checked before anything changes: the caller writes what the function leaves
		if !b.Rate.given && (b.RatePeriodMs.given || b.RateBurst.given) && s.Rate == 0 {
			return badRequest(`the topic has no rate limit: give "rate" with "rate_period_ms" or "rate_burst"`)
		}
		old := *s
		if b.MaxAttempts != nil {
			s.MaxAttempts = *b.MaxAttempts
		}
		for _, d := range []struct {
			v  *int64
			to *time.Duration
		}{{b.BackoffBaseMs, &s.BackoffBase}, {b.BackoffCapMs, &s.BackoffCap}, {b.BackoffJitterMs, &s.BackoffJitter}, {b.RetentionMs, &s.Retention}} {
			if d.v != nil {
				*d.to = ms(*d.v)
			}
		}
		if b.QueueCap != nil {
			s.QueueCap = *b.QueueCap
		}
		if b.Concurrency.given {
			s.Concurrency = deref(b.Concurrency.value)
		}
		if b.KeyConcurrency.given {
			s.KeyConcurrency = deref(b.KeyConcurrency.value)
		}
		if b.Rate.given {
			s.Rate, s.RatePeriod, s.RateBurst = deref(b.Rate.value), ms(deref(b.RatePeriodMs.value)), deref(b.RateBurst.value)
		} else if b.RatePeriodMs.given || b.RateBurst.given {
			if b.RatePeriodMs.value != nil {
				s.RatePeriod = ms(*b.RatePeriodMs.value)
			}
			if b.RateBurst.given { // null: the default burst, the rate
				s.RateBurst = deref(b.RateBurst.value)
			}
		}
		if b.Fair != nil {
			s.Fair = *b.Fair
		}
		// the repository's rule (TopicSettings.checkBackoff), said in the API's names: a
		// policy that changes may not have retries wait the cap, never the base
		if s.BackoffRefused(old) {
			err := badRequest(`"backoff_cap_ms" %d is below "backoff_base_ms" %d: retries would wait the cap, never the base`,
				s.BackoffCap.Milliseconds(), s.BackoffBase.Milliseconds())
			*s = old // the caller writes what the function leaves: nothing
			return err
		}
		return nil
	}, nil
}

// maxDurationMs is the longest duration in milliseconds a time.Duration holds.
const maxDurationMs = int64(math.MaxInt64 / time.Millisecond)

// deref is the value p points to, or zero for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// nextPage cuts a listing read with one item more than limit (whether more follow) to
// limit items, and returns the next page's position, the name of its last item (nil on
// the last page).
func nextPage[T any](items []T, limit int, name func(T) string) ([]T, *string) {
	if len(items) <= limit {
		return items, nil
	}
	items = items[:limit]
	next := name(items[limit-1])
	return items, &next
}
