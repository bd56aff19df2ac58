package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/repository"
)

// Sizes of what a page shows.
const (
	// topicsPerPage is how many topics the overview lists per page.
	topicsPerPage = 50
	// schedulesPerPage is how many schedules the schedules page lists at once.
	schedulesPerPage = 100
	// tasksPerPage is how many tasks the topic page lists per page.
	tasksPerPage = 50
	// timelineSize is how many tasks of an identifier the task page shows, the latest.
	timelineSize = 50
	// textShown is how many bytes of an input, output or error the task page shows
	// before it offers the whole text.
	textShown = 16 << 10
	// errorsShown is how many of a task's errors (the last ones) its page shows.
	errorsShown = 20
	// ownersShown is how many owners the processes page lists.
	ownersShown = 500
)

// pageFunc serves a page: it returns the template to render and its view, or an error.
type pageFunc func(r *http.Request) (name string, view any, err error)

// page adapts a pageFunc: it sends a visitor who is not signed in to the login form,
// and renders errors as a page whose status says what kind.
func (s *server) page(p pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.signedIn(r) {
			http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		name, view, err := p(r)
		if err != nil {
			status := statusOf(err)
			if httpguard.Stopped(r, status) {
				// the browser went away (a refresh in flight when the visitor left the
				// page) or the server's read timeout passed: nothing failed here
				s.cfg.Logger.Info("dashboard page stopped: the browser went away or the read timeout passed",
					slog.String("path", r.URL.Path), slog.Any("error", err))
				s.render(w, r, http.StatusServiceUnavailable, "error", errorView{Status: http.StatusServiceUnavailable,
					Message: "the request was stopped before it ended: reload the page"})
				return
			}
			if status == http.StatusInternalServerError {
				s.cfg.Logger.Error("dashboard page failed", slog.String("path", r.URL.Path), slog.Any("error", err))
			}
			message := err.Error()
			if status == http.StatusInternalServerError {
				message = httpguard.InternalText(err) // the log has the whole error
			}
			s.render(w, r, status, "error", errorView{Status: status, Message: message})
			return
		}
		s.render(w, r, http.StatusOK, name, view)
	})
}

// errBadRequest marks errors of the visitor's input.
var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// errTooSlow marks an action that changed nothing in the time it has.
var errTooSlow = errors.New("out of time")

// statusOf maps an error to the status of its page or answer.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, repository.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, repository.ErrUnknownTopic), errors.Is(err, repository.ErrUnknownTask):
		return http.StatusNotFound
	case errors.Is(err, repository.ErrWrongState):
		return http.StatusConflict
	case errors.Is(err, repository.ErrQueueFull):
		return http.StatusTooManyRequests
	case errors.Is(err, errTooSlow):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// layout is what every page's frame shows.
type layout struct {
	Title     string
	Nav       string // "overview", "processes", "schedules" or "" for none
	RefreshMs int64
	SignedIn  bool // a token is configured and the visitor is signed in: offer to sign out
	View      any
}

func (s *server) render(w http.ResponseWriter, r *http.Request, status int, name string, view any) {
	var buf bytes.Buffer
	l := layout{Title: titleOf(view), Nav: name, RefreshMs: s.cfg.Refresh.Milliseconds(), SignedIn: s.sessions != nil && s.signedIn(r), View: view}
	if err := s.pages.execute(&buf, name, l); err != nil {
		s.cfg.Logger.Error("dashboard render failed", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	secureHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// titled views give their page a title.
type titled interface{ title() string }

func titleOf(view any) string {
	if t, ok := view.(titled); ok {
		return t.title() + " · pgtask"
	}
	return "pgtask"
}

type errorView struct {
	Status  int
	Message string
}

func (v errorView) title() string { return http.StatusText(v.Status) }

type loginView struct {
	Next, Error string
}

func (loginView) title() string { return "Sign in" }

// topicRow is a topic with its stats, a row of the overview.
type topicRow struct {
	repository.Topic
	Stats repository.TopicStats
}

// Due counts the READY tasks that can be polled now: at least that many when the READY
// count stopped at its cap (Stats.Capped.Ready).
func (t topicRow) Due() int64 { return t.Stats.Ready - t.Stats.Delayed }

// DueUnknown tells that both the READY and the delayed counts stopped at their cap, so
// that their difference says nothing of the due tasks.
func (t topicRow) DueUnknown() bool { return t.Stats.Capped.Ready && t.Stats.Capped.Delayed }

type overviewView struct {
	Search string
	Topics []topicRow
	// After is the name the page starts after ("" for the first); Next the name the next
	// page starts after ("" when none).
	After, Next string
	// Rates is the chart of every topic.
	Rates rates
}

func (overviewView) title() string { return "Overview" }

// chartWindow is how far back the charts reach.
const chartWindow = 5 * time.Minute

// rates is a chart's data: what was pushed and completed in each second of the last
// chartWindow (Repository.Tallies: the tallies of that window, never the tasks).
type rates []repository.Tally

// JSON is the chart's data as app.js reads it: the first second (Unix time) and one
// array per series, a count per second.
func (r rates) JSON() string {
	out := struct {
		Start     int64   `json:"start"`
		Pushed    []int64 `json:"pushed"`
		Succeeded []int64 `json:"succeeded"`
		Failed    []int64 `json:"failed"`
		Retried   []int64 `json:"retried"`
		Filtered  []int64 `json:"filtered"`
		Suspended []int64 `json:"suspended"`
	}{}
	if len(r) > 0 {
		out.Start = r[0].Second.Unix()
	}
	for _, y := range r {
		out.Pushed = append(out.Pushed, y.Pushed)
		out.Succeeded = append(out.Succeeded, y.Succeeded)
		out.Failed = append(out.Failed, y.Failed)
		out.Retried = append(out.Retried, y.Retried)
		out.Filtered = append(out.Filtered, y.Filtered)
		out.Suspended = append(out.Suspended, y.Suspended)
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// rates reads the chart of topic, or of every topic when topic is "" (through the
// server's chartCache).
func (s *server) rates(r *http.Request, topic string) (rates, error) {
	if topic != "" {
		return s.repo.Tallies(r.Context(), s.pool, topic, chartWindow)
	}
	return s.chart.tallies(r.Context(), func(ctx context.Context, window time.Duration) ([]repository.Tally, error) {
		return s.repo.Tallies(ctx, s.pool, "", window)
	})
}

// overview lists a page of topics, searched by name, with their stats: one read of
// task_topic (TopicPage) and one of the page's stats (StatsAll), whatever the number of
// topics and tasks.
func (s *server) overview(r *http.Request) (string, any, error) {
	var v overviewView
	var err error
	if v.Search, v.After, err = listingQuery(r); err != nil {
		return "", nil, err
	}
	topics, err := s.repo.TopicPage(r.Context(), s.pool, v.Search, v.After, topicsPerPage+1)
	if err != nil {
		return "", nil, err
	}
	topics, v.Next = nextPage(topics, topicsPerPage, func(t repository.Topic) string { return t.Name })
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	var stats []repository.TopicStatus
	if len(names) > 0 {
		if stats, err = s.repo.StatsAll(r.Context(), s.pool, names...); err != nil {
			return "", nil, err
		}
	}
	byName := make(map[string]repository.TopicStats, len(stats))
	for _, st := range stats {
		byName[st.Name] = st.Stats
	}
	for _, t := range topics {
		row := topicRow{Topic: t, Stats: byName[t.Name]}
		v.Topics = append(v.Topics, row)
	}
	if v.Rates, err = s.rates(r, ""); err != nil {
		return "", nil, err
	}
	return "overview", v, nil
}

// taskFilter is the topic page's filter of its tasks, as the query string gives it.
type taskFilter struct {
	State, Identifier, Reference string
	// From and To bound the creation time (datetime-local text, UTC).
	From, To string
}

// filter reads the filter's query parameters.
func readFilter(q url.Values) taskFilter {
	return taskFilter{State: q.Get("state"), Identifier: q.Get("identifier"), Reference: q.Get("reference"),
		From: q.Get("from"), To: q.Get("to")}
}

// Query is the filter as a query string (without the cursor).
func (f taskFilter) Query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"state": f.State, "identifier": f.Identifier, "reference": f.Reference, "from": f.From, "to": f.To} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// timeLayout is how the time range is written in the form (an <input type=datetime-local>).
const timeLayout = "2006-01-02T15:04"

// resolved is a filter turned into repository arguments: the task filter and the range of
// sequences its time range covers.
type resolved struct {
	filter   repository.TaskFilter
	from, to int64
}

// end is the exclusive cursor a newest-first read of the range starts from: just past
// its last sequence, or MaxSequence when the range is open.
func (res resolved) end() int64 {
	if res.to < repository.MaxSequence {
		return res.to + 1
	}
	return repository.MaxSequence
}

// resolve checks the filter and finds the sequences of its time range (Repository.Resolve).
func (s *server) resolve(r *http.Request, f taskFilter) (resolved, error) {
	out := resolved{filter: repository.TaskFilter{Identifier: f.Identifier, Reference: f.Reference},
		from: repository.MinSequence, to: repository.MaxSequence}
	if f.State != "" {
		st, err := repository.ParseState(f.State)
		if err != nil {
			return resolved{}, badRequest("state %q is unknown", f.State)
		}
		out.filter.State = &st
	}
	if err := repository.ValidateFilter(out.filter); err != nil {
		return resolved{}, err
	}
	if from, err := time.ParseInLocation(timeLayout, f.From, time.UTC); err == nil {
		if to, err := time.ParseInLocation(timeLayout, f.To, time.UTC); err == nil && from.After(to) {
			return resolved{}, badRequest("from %s is after to %s", f.From, f.To)
		}
	}
	for _, b := range []struct {
		name, text string
		preceding  bool
		into       *int64
	}{{"from", f.From, false, &out.from}, {"to", f.To, true, &out.to}} {
		if b.text == "" {
			continue
		}
		at, err := time.ParseInLocation(timeLayout, b.text, time.UTC)
		if err != nil {
			return resolved{}, badRequest("%s %q is not a time like 2030-01-02T15:04 (UTC)", b.name, b.text)
		}
		if b.preceding {
			at = at.Add(time.Minute - time.Nanosecond) // the whole minute
		}
		seq, err := s.repo.Resolve(r.Context(), s.pool, at, b.preceding)
		if err != nil {
			return resolved{}, err
		}
		*b.into = seq
	}
	return out, nil
}

type topicView struct {
	topicRow
	Filter taskFilter
	States []string
	Tasks  []repository.Excerpt
	// NewerURL and OlderURL are the pages before and after this one ("" for none).
	NewerURL string
	OlderURL string
	// Searched, when not empty, says how far back a page filtered by a finished state
	// read, which was not to the end (OlderURL searches on).
	Searched string
	Settings settingsForm
	// Rates is the topic's chart.
	Rates rates
	// Limits say the topic's limits with their use now, one entry each; none without.
	Limits []string
}

func (v topicView) title() string { return v.Name }

// URL is the topic page's path.
func (v topicView) URL() string { return topicURL(v.Name) }

// limits says a limited topic's limits with their use now (Repository.LimitUsage).
func (s *server) limits(r *http.Request, t repository.Topic) ([]string, error) {
	u, err := s.repo.LimitUsage(r.Context(), s.pool, t.Name)
	if err != nil {
		return nil, err
	}
	var out []string
	if t.Concurrency > 0 {
		out = append(out, fmt.Sprintf("concurrency %d: %d ACTIVE", t.Concurrency, u.Active))
	}
	if t.KeyConcurrency > 0 {
		out = append(out, fmt.Sprintf("per concurrency key %d: %d keys at the limit", t.KeyConcurrency, u.KeysAtLimit))
	}
	if t.KeyConcurrency > 0 || t.Fair {
		fair := ""
		if t.Fair {
			fair = "fair: "
		}
		out = append(out, fmt.Sprintf("%s%d keys with READY tasks (counted up to 10 000), taken in turn", fair, u.KeysWaiting))
	}
	if t.Rate > 0 {
		out = append(out, fmt.Sprintf("rate %d per %v, burst %d: %.1f starts allowed now", t.Rate, t.RatePeriod, t.RateBurst, u.Tokens))
	}
	return out, nil
}

// settingsForm shows a topic's settings as the form edits them.
type settingsForm struct {
	MaxAttempts              int32
	BackoffBase, BackoffCap  string
	BackoffJitter, Retention string
	QueueCap                 int64
}

func formOf(t repository.TopicSettings) settingsForm {
	return settingsForm{MaxAttempts: t.MaxAttempts, BackoffBase: t.BackoffBase.String(), BackoffCap: t.BackoffCap.String(),
		BackoffJitter: t.BackoffJitter.String(), Retention: t.Retention.String(), QueueCap: t.QueueCap}
}

func topicURL(topic string) string { return Prefix + "topics/" + url.PathEscape(topic) }

func taskURL(topic string, sequence int64) string {
	return topicURL(topic) + "/tasks/" + strconv.FormatInt(sequence, 10)
}

// topic shows a topic: its stats and settings, and a page of its tasks by the filter,
// newest first, read by keyset (after or before a sequence) with Repository.Excerpts.
func (s *server) topic(r *http.Request) (string, any, error) {
	ctx, name := r.Context(), r.PathValue("topic")
	t, err := s.repo.Topic(ctx, s.pool, name)
	if err != nil {
		return "", nil, err
	}
	stats, err := s.repo.Stats(ctx, s.pool, name)
	if err != nil {
		return "", nil, err
	}
	q := r.URL.Query()
	v := topicView{topicRow: topicRow{Topic: t, Stats: stats}, Filter: readFilter(q), Settings: formOf(t.TopicSettings)}
	if t.Limited() {
		if v.Limits, err = s.limits(r, t); err != nil {
			return "", nil, err
		}
	}
	if v.Rates, err = s.rates(r, name); err != nil {
		return "", nil, err
	}
	for _, st := range repository.States() {
		v.States = append(v.States, st.String())
	}
	res, err := s.resolve(r, v.Filter)
	if err != nil {
		return "", nil, err
	}
	// Keyset paging, newest first: a page starts at the end of the time range, before=N
	// reads the older tasks before N, after=N the newer ones after N (both exclusive).
	cursor, direction, paged := res.end(), repository.Backward, false
	if text := q.Get("after"); text != "" {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n < 0 {
			return "", nil, badRequest("after %q is not a sequence", text)
		}
		cursor, direction, paged = max(n, res.from-1, repository.MinSequence), repository.Forward, true
	} else if text := q.Get("before"); text != "" {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n < 0 {
			return "", nil, badRequest("before %q is not a sequence", text)
		}
		cursor, paged = min(n, cursor), true
	}
	if narrow(res.filter) {
		return s.narrowPage(r, v, res, cursor, paged && direction == repository.Backward)
	}
	// A finished state that may be rare among millions of others (FILTERED among
	// SUCCEEDED) has no index of its own: a page reads the scanWindow sequences below its
	// cursor at most, and offers to search further back when they hold too few.
	wide := res.filter.State != nil
	if wide {
		if direction == repository.Forward { // newer pages start again from the newest
			cursor, direction, paged = res.end(), repository.Backward, false
		}
		if cursor == repository.MaxSequence {
			last, err := s.repo.LastSequence(ctx, s.pool)
			if err != nil {
				return "", nil, err
			}
			cursor = last + 1
		}
		res.filter.Floor = max(res.from-1, cursor-scanWindow, 0)
	}
	tasks, err := s.repo.Excerpts(ctx, s.pool, name, res.filter, cursor, tasksPerPage+1, direction)
	if err != nil {
		return "", nil, err
	}
	more := len(tasks) > tasksPerPage
	if more {
		tasks = tasks[:tasksPerPage]
	}
	kept := tasks[:0] // the time range ends the pages
	for _, task := range tasks {
		if task.Sequence >= res.from && task.Sequence <= res.to {
			kept = append(kept, task)
		} else {
			more = false
		}
	}
	tasks = kept
	if direction == repository.Forward { // shown newest first
		for i, j := 0, len(tasks)-1; i < j; i, j = i+1, j-1 {
			tasks[i], tasks[j] = tasks[j], tasks[i]
		}
	}
	v.Tasks = tasks
	if len(tasks) > 0 {
		newer, older := paged, more
		if direction == repository.Forward {
			newer, older = more, true
		}
		if newer {
			q := v.Filter.Query()
			q.Set("after", strconv.FormatInt(tasks[0].Sequence, 10))
			v.NewerURL = v.URL() + "?" + q.Encode()
		}
		if older {
			q := v.Filter.Query()
			q.Set("before", strconv.FormatInt(tasks[len(tasks)-1].Sequence, 10))
			v.OlderURL = v.URL() + "?" + q.Encode()
		}
	}
	if wide && !more && res.filter.Floor > max(res.from-1, 0) {
		// the window ended before the range did: the older tasks are not searched yet
		v.Searched = fmt.Sprintf("Searched the %d sequences before %d.", cursor-1-res.filter.Floor, cursor)
		q := v.Filter.Query()
		q.Set("before", strconv.FormatInt(res.filter.Floor+1, 10))
		v.OlderURL = v.URL() + "?" + q.Encode()
	}
	return "topic", v, nil
}

// scanWindow is how many sequences a topic page filtered by a finished state reads at
// most: about 50 ms with the topic's rows all in the window.
const scanWindow = 100_000

// narrow reports whether a filter picks few of many tasks, which the topic page then
// reads through the filter's own index (Repository.Latest): an unfinished or broken state,
// an identifier, a reference.
func narrow(f repository.TaskFilter) bool {
	return f.Identifier != "" || f.Reference != "" || f.State != nil && *f.State <= repository.Suspended
}

// narrowPage is the topic page of a narrow filter: the tasks read with Repository.Latest,
// newest first, older pages by keyset (before), whatever the number of the topic's other
// tasks; a link to newer tasks goes back to the newest.
func (s *server) narrowPage(r *http.Request, v topicView, res resolved, before int64, paged bool) (string, any, error) {
	if r.URL.Query().Get("after") != "" {
		before, paged = res.end(), false
	}
	tasks, err := s.repo.Latest(r.Context(), s.pool, v.Name, res.filter, before, tasksPerPage+1)
	if err != nil {
		return "", nil, err
	}
	more := len(tasks) > tasksPerPage
	if more {
		tasks = tasks[:tasksPerPage]
	}
	for _, task := range tasks {
		if task.Sequence < res.from { // the time range ends the pages
			more = false
			break
		}
		v.Tasks = append(v.Tasks, task)
	}
	if paged {
		v.NewerURL = v.URL() + "?" + v.Filter.Query().Encode()
	}
	if more {
		q := v.Filter.Query()
		q.Set("before", strconv.FormatInt(v.Tasks[len(v.Tasks)-1].Sequence, 10))
		v.OlderURL = v.URL() + "?" + q.Encode()
	}
	return "topic", v, nil
}

// text is an input, output or error as the task page shows it.
type text struct {
	Text   string
	JSON   bool // pretty-printed JSON
	Cut    bool // only the start is shown
	Length int
}

// showText prepares a text of whole bytes read whole or (when shorter) only its start:
// pretty-printed when it is JSON (or, read in part, the start of JSON), cut beyond
// textShown unless full. html/template escapes it when it is rendered.
func showText(s string, whole int64, full bool) text {
	out := text{Text: s, Length: int(whole), Cut: int64(len(s)) < whole}
	switch {
	case len(s) == 0 || s[0] != '{' && s[0] != '[':
	case !out.Cut && json.Valid([]byte(s)):
		var b bytes.Buffer
		if json.Indent(&b, []byte(s), "", "  ") == nil {
			out.Text, out.JSON = b.String(), true
		}
	case out.Cut && jsonStart(s):
		out.Text, out.JSON = indentStart(s), true
	}
	if !full && len(out.Text) > textShown {
		cut := textShown
		for cut > 0 && !utf8Start(out.Text[cut]) {
			cut--
		}
		out.Text, out.Cut = out.Text[:cut], true
	}
	return out
}

// jsonStart reports whether s is the start of a JSON text: its tokens are JSON's until
// s ends.
func jsonStart(s string) bool {
	dec := json.NewDecoder(strings.NewReader(s))
	for {
		if _, err := dec.Token(); err != nil {
			return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		}
	}
}

// indentStart indents the start of a JSON text (jsonStart) as json.Indent indents a
// whole one, with two spaces.
func indentStart(s string) string {
	var b strings.Builder
	depth, inString, escaped := 0, false, false
	newline := func() {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat("  ", depth))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inString {
			b.WriteByte(c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			b.WriteByte(c)
		case '{', '[':
			b.WriteByte(c)
			j := i + 1
			for j < len(s) && strings.IndexByte(" \t\n\r", s[j]) >= 0 {
				j++
			}
			if j < len(s) && (s[j] == '}' || s[j] == ']') { // empty: {} or []
				b.WriteByte(s[j])
				i = j
				continue
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			b.WriteByte(c)
		case ',':
			b.WriteByte(c)
			newline()
		case ':':
			b.WriteString(": ")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// reason is why polls skip a READY task, with the task it waits for when there is one.
type reason struct {
	Text string
	Link string
}

type taskView struct {
	Task          repository.Task
	Input, Output text
	Errors        []text
	ErrorsLeftOut bool // earlier errors than these may not be shown
	OwnerAlive    bool
	OwnerKnown    bool
	Paused        bool
	Timeline      []repository.Excerpt
	TimelineMore  bool
	Skipped       []reason
	FullURL       string
	// Full is true when the texts are shown whole (full=1): the page is then not
	// refreshed live, each refresh reading megabytes of them again
	Full bool
	Now  time.Time
}

func (v taskView) title() string {
	return fmt.Sprintf("%s #%d", v.Task.Topic, v.Task.Sequence)
}

// TopicURL is the path of the task's topic page.
func (v taskView) TopicURL() string { return topicURL(v.Task.Topic) }

// task shows one task: its columns, texts, errors, owner, the timeline of its
// identifier and, for a READY task, why polls skip it. Its texts are read cut to
// textShown characters in the database (Repository.GetExcerpt), so that the page and
// each of its live refreshes cost that much whatever their size; full=1 reads and shows
// them whole (Repository.Get), once: that page is not refreshed live.
func (s *server) task(r *http.Request) (string, any, error) {
	ctx, topic := r.Context(), r.PathValue("topic")
	seq, err := strconv.ParseInt(r.PathValue("sequence"), 10, 64)
	if err != nil || seq < 1 {
		return "", nil, badRequest("sequence %q is not a positive integer", r.PathValue("sequence"))
	}
	t, err := s.repo.Topic(ctx, s.pool, topic)
	if err != nil {
		return "", nil, err
	}
	full := r.URL.Query().Get("full") == "1"
	var ex repository.Excerpt
	if full {
		ex.Task, err = s.repo.Get(ctx, s.pool, topic, seq)
		ex.InputBytes, ex.OutputBytes = int64(len(ex.Input)), int64(len(ex.Output))
	} else {
		ex, err = s.repo.GetExcerpt(ctx, s.pool, topic, seq, textShown, errorsShown)
	}
	if err != nil {
		return "", nil, err
	}
	task := ex.Task
	v := taskView{Task: task, Input: showText(task.Input, ex.InputBytes, full), Output: showText(task.Output, ex.OutputBytes, full),
		Paused: !t.Active, FullURL: taskURL(topic, seq) + "?full=1", Full: full, Now: time.Now()}
	// the last errorsShown errors (a task retried a thousand times would make a page of
	// a thousand texts, read again at each refresh); full=1 shows them all
	v.ErrorsLeftOut = !full && ex.ErrorsCut && len(task.Errors) == errorsShown
	for _, e := range task.Errors {
		whole := int64(len(e))
		if ex.ErrorsCut && utf8.RuneCountInString(e) == textShown {
			whole++ // cut in the database (or exactly that long): offer to see it all
		}
		v.Errors = append(v.Errors, showText(e, whole, full))
	}
	if task.Owner != "" {
		live, err := s.repo.OwnerLive(ctx, s.pool, task.Owner, s.cfg.OwnerTimeout)
		if err != nil {
			return "", nil, err
		}
		v.OwnerKnown, v.OwnerAlive = true, live
	}
	timeline, err := s.repo.Timeline(ctx, s.pool, topic, task.Identifier, repository.MaxSequence, timelineSize+1)
	if err != nil {
		return "", nil, err
	}
	if len(timeline) > timelineSize {
		timeline, v.TimelineMore = timeline[:timelineSize], true
	}
	for i, j := 0, len(timeline)-1; i < j; i, j = i+1, j-1 {
		timeline[i], timeline[j] = timeline[j], timeline[i]
	}
	v.Timeline = timeline
	if task.State == repository.Ready {
		v.Skipped = skipReasons(task, !t.Active, timeline, v.Now)
		// the topic's limits, and the due tasks ahead (the delay and the pause are above)
		why, err := s.repo.Waiting(ctx, s.pool, topic, seq)
		if err != nil {
			return "", nil, err
		}
		for _, w := range why {
			if w.Kind != "paused" && w.Kind != "delayed" && w.Kind != "none" {
				v.Skipped = append(v.Skipped, reason{Text: w.Text})
			}
		}
	}
	return "task", v, nil
}

// skipReasons says why polls may skip a READY task: its not-before time, a paused topic,
// or another task of its identifier that a poll condition waits for (repository.Condition).
// The condition is the processor's choice, so each is named with the condition it applies
// to.
func skipReasons(task repository.Task, paused bool, timeline []repository.Excerpt, now time.Time) []reason {
	var out []reason
	if !task.NotBefore.IsZero() && task.NotBefore.After(now) {
		out = append(out, reason{Text: fmt.Sprintf("not before %s (in %s)", task.NotBefore.UTC().Format(time.RFC3339),
			task.NotBefore.Sub(now).Round(time.Second))})
	}
	if paused {
		out = append(out, reason{Text: "the topic is paused: no processor polls it until it is resumed"})
	}
	for _, o := range timeline {
		if o.Sequence == task.Sequence {
			continue
		}
		link := taskURL(o.Topic, o.Sequence)
		switch {
		case o.State == repository.Active:
			out = append(out, reason{Text: fmt.Sprintf("with a SINGULAR condition, it waits for task #%d of its identifier (ACTIVE) to finish", o.Sequence), Link: link})
		case o.State == repository.Ready && o.Sequence < task.Sequence:
			out = append(out, reason{Text: fmt.Sprintf("with a SINGULAR condition (FIFO), it waits for the older task #%d of its identifier (READY)", o.Sequence), Link: link})
		case o.State == repository.Expired || o.State == repository.Failed:
			out = append(out, reason{Text: fmt.Sprintf("with …_SUSPEND_ON_FAILURE or …_SUSPEND_UNTIL_SUCCESS, task #%d of its identifier (%s) holds it back", o.Sequence, o.State), Link: link})
		case o.State == repository.Suspended:
			out = append(out, reason{Text: fmt.Sprintf("with …_SUSPEND_UNTIL_SUCCESS, task #%d of its identifier (SUSPENDED) holds it back", o.Sequence), Link: link})
		}
	}
	return out
}

type processesView struct {
	Owners  []repository.OwnerStatus
	Timeout time.Duration
	Now     time.Time
	// More is true when more owners are registered than listed (the dead ones, which
	// heart-beat last, left out first)
	More bool
}

func (processesView) title() string { return "Processes" }

type schedulesView struct {
	Schedules []repository.Schedule
	Now       time.Time
	// Search is the text searched in names and topics, After the page's position (the
	// name before its first), Next the next page's ("" when none follows).
	Search, After, Next string
}

func (schedulesView) title() string { return "Schedules" }

// schedules lists a page of schedules by name, searched by name or topic (SchedulePage:
// one read of task_schedule's primary key, whatever their number), with their next fire
// times; each can be paused or resumed (POST /schedules/{name}/pause or /resume of the
// API).
func (s *server) schedules(r *http.Request) (string, any, error) {
	v := schedulesView{Now: time.Now()}
	var err error
	if v.Search, v.After, err = listingQuery(r); err != nil {
		return "", nil, err
	}
	list, err := s.repo.SchedulePage(r.Context(), s.pool, v.Search, v.After, schedulesPerPage+1)
	if err != nil {
		return "", nil, err
	}
	v.Schedules, v.Next = nextPage(list, schedulesPerPage, func(sc repository.Schedule) string { return sc.Name })
	return "schedules", v, nil
}

// listingQuery reads the search and the position of a listing by name (the overview's
// topics, the schedules), each at most 250 characters, the longest name
// (MaxTopicLength, MaxScheduleNameLength).
func listingQuery(r *http.Request) (search, after string, err error) {
	q := r.URL.Query()
	search, after = strings.TrimSpace(q.Get("q")), q.Get("after")
	if utf8.RuneCountInString(search) > 250 || utf8.RuneCountInString(after) > 250 {
		return "", "", badRequest("search and after are at most 250 characters")
	}
	return search, after, nil
}

// nextPage cuts a listing read with one item more than size (whether more follow) to
// size items, and returns the next page's position, the name of its last item ("" on
// the last page).
func nextPage[T any](items []T, size int, name func(T) string) ([]T, string) {
	if len(items) <= size {
		return items, ""
	}
	items = items[:size]
	return items, name(items[size-1])
}

// processes lists the owners, live and dead, with their leases.
func (s *server) processes(r *http.Request) (string, any, error) {
	owners, err := s.repo.Owners(r.Context(), s.pool, s.cfg.OwnerTimeout, ownersShown+1)
	if err != nil {
		return "", nil, err
	}
	v := processesView{Owners: owners, Timeout: s.cfg.OwnerTimeout, Now: time.Now()}
	if len(owners) > ownersShown {
		v.Owners, v.More = owners[:ownersShown], true
	}
	return "processes", v, nil
}

// pages holds the parsed templates, one set per page (each with the layout).
type pages struct {
	sets map[string]*template.Template
}

var pageNames = []string{"overview", "topic", "task", "processes", "schedules", "login", "error"}

func parsePages() (*pages, error) {
	p := &pages{sets: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/push.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse template %s: %w", name, err)
		}
		p.sets[name] = t
	}
	return p, nil
}

func (p *pages) execute(w *bytes.Buffer, name string, l layout) error {
	return p.sets[name].Execute(w, l)
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"statusText": http.StatusText,
	"path":       url.PathEscape,
	"taskURL":    taskURL,
	"topicURL":   topicURL,
	"stateClass": func(s repository.State) string {
		return "st-" + strings.ToLower(s.String())
	},
	"age": func(d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		return d.Round(time.Second).String()
	},
	"since": func(now, t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"num": func(n int64) string {
		s := strconv.FormatInt(n, 10)
		for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
			s = s[:i] + "\u202f" + s[i:]
		}
		return s
	},
	"bytes": func(n int) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"schedulesPage": func(search, after string) string { return listingURL(Prefix+"schedules", search, after) },
	"overviewPage":  func(search, after string) string { return listingURL("/", search, after) },
}

// listingURL is the address of a listing by name (the overview's topics, the schedules)
// at page after ("" the first), searched for search.
func listingURL(path, search, after string) string {
	q := url.Values{}
	if search != "" {
		q.Set("q", search)
	}
	if after != "" {
		q.Set("after", after)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
