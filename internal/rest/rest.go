package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// Defaults and limits of the API.
const (
	// MaxBodyBytesDefault is the largest request body accepted when Config.MaxBodyBytes
	// is zero: 1 MiB.
	MaxBodyBytesDefault int64 = 1 << 20
	// ListLimitDefault is how many tasks a listing returns without a limit parameter.
	ListLimitDefault = 100
	// ListLimitMax is the largest limit a listing accepts.
	ListLimitMax = 1000
	// TopicLimitMax is the largest limit GET /topics accepts (a page and the one after
	// it, which says whether there is a next page, within repository.TopicPageMax).
	TopicLimitMax = 500
	// ListSpanDefault is how many sequences a listing of a topic of many tasks walks
	// at most beyond its first window when Config.ListSpan is zero (about 50 ms): a
	// page of a state rare among millions is found a span at a time
	// (repository.Repository.ExcerptsWithin), each answer's next_cursor going on.
	ListSpanDefault int64 = 100_000
	// healthTimeout bounds the database ping of GET /healthz.
	healthTimeout = 5 * time.Second
)

// Config configures the API handler.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Repository runs the queue operations; nil creates one with a random owner name.
	Repository *repository.Repository
	// Guard authenticates every request but GET /healthz and GET /openapi.json (with the
	// bearer token it was given, if any); nil serves without a token. The server's root
	// handler is wrapped by the same Guard's Protect (see package httpguard).
	Guard *httpguard.Guard
	// MaxBodyBytes is the largest request body accepted (413 beyond it). Default 1 MiB.
	MaxBodyBytes int64
	// Logger receives the errors answered with status 500 (at ERROR), the database's
	// failures behind GET /healthz (WARN) and requests whose body could not be read
	// (DEBUG); nil discards them.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics (behind the token like the API).
	Metrics http.Handler
	// ListSpan is how many sequences a listing walks at most beyond its first window
	// (ListSpanDefault when zero).
	ListSpan int64
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("rest: config: Pool is required")
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("rest: config: MaxBodyBytes %d is negative", c.MaxBodyBytes)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	if c.ListSpan < 0 {
		return fmt.Errorf("rest: config: ListSpan %d is negative", c.ListSpan)
	}
	if c.ListSpan == 0 {
		c.ListSpan = ListSpanDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Guard == nil {
		g, err := httpguard.New(httpguard.Config{})
		if err != nil {
			return fmt.Errorf("rest: config: %w", err)
		}
		c.Guard = g
	}
	if c.Repository == nil {
		repo, err := repository.New(repository.Config{})
		if err != nil {
			return fmt.Errorf("rest: config: %w", err)
		}
		c.Repository = repo
	}
	return nil
}

// server serves the API.
type server struct {
	pool    *pgxpool.Pool
	repo    *repository.Repository
	logger  *slog.Logger
	maxBody int64
	span    int64
	guard   *httpguard.Guard
	mux     *http.ServeMux
	// statements is what GET /healthz knows of the API's statements.
	statements statements
}

// endpoint answers a request with a status and a JSON body, or an error that
// statusOf maps to a status.
type endpoint func(s *server, w http.ResponseWriter, r *http.Request) (int, any, error)

// route is one served endpoint; the OpenAPI document describes exactly these.
type route struct {
	method, path string
	public       bool // served without the bearer token
	serve        endpoint
	// takes says what of the request the endpoint reads besides its path: a body, a
	// query string. What it does not read is refused rather than ignored (a parameter
	// that would change nothing, a body whose fields would be dropped).
	takes takes
}

// takes is what an endpoint reads of a request besides its path.
type takes int

const (
	takesNothing takes = iota
	takesBody          // a JSON body (the endpoint checks it)
	takesQuery         // a query string (the endpoint checks its parameters)
)

var routes = []route{
	{http.MethodGet, "/healthz", true, (*server).health, takesNothing},
	{http.MethodGet, "/openapi.json", true, nil, takesNothing}, // served from the embedded document
	{http.MethodGet, "/topics", false, (*server).listTopics, takesQuery},
	{http.MethodGet, "/topics/{topic}", false, (*server).getTopic, takesNothing},
	{http.MethodPatch, "/topics/{topic}", false, (*server).patchTopic, takesBody},
	{http.MethodPost, "/topics/{topic}/pause", false, (*server).pause, takesNothing},
	{http.MethodPost, "/topics/{topic}/resume", false, (*server).resume, takesNothing},
	{http.MethodPost, "/topics/{topic}/tasks", false, (*server).enqueue, takesBody},
	{http.MethodGet, "/topics/{topic}/tasks", false, (*server).listTasks, takesQuery},
	{http.MethodGet, "/topics/{topic}/tasks/{sequence}", false, (*server).getTask, takesNothing},
	{http.MethodPost, "/topics/{topic}/tasks/{sequence}/cancel", false, (*server).cancel, takesBody},
	{http.MethodPost, "/topics/{topic}/tasks/{sequence}/revive", false, (*server).revive, takesBody},
	{http.MethodGet, "/schedules", false, (*server).listSchedules, takesQuery},
	{http.MethodPost, "/schedules", false, (*server).createSchedule, takesBody},
	{http.MethodGet, "/schedules/{name}", false, (*server).getSchedule, takesNothing},
	{http.MethodPatch, "/schedules/{name}", false, (*server).updateSchedule, takesBody},
	{http.MethodDelete, "/schedules/{name}", false, (*server).deleteSchedule, takesNothing},
	{http.MethodPost, "/schedules/{name}/pause", false, (*server).pauseSchedule, takesNothing},
	{http.MethodPost, "/schedules/{name}/resume", false, (*server).resumeSchedule, takesBody},
	{http.MethodPost, "/schedules/{name}/run", false, (*server).runSchedule, takesNothing},
}

// metricsPath is where Config.Metrics is mounted.
const metricsPath = "/metrics"

// New validates cfg and returns the API handler. Requests and responses are JSON;
// errors are {"error": "…"} with the status saying what kind.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &server{
		pool:    cfg.Pool,
		repo:    cfg.Repository,
		logger:  cfg.Logger,
		maxBody: cfg.MaxBodyBytes,
		span:    cfg.ListSpan,
		guard:   cfg.Guard,
		mux:     http.NewServeMux(),
	}
	for _, rt := range routes {
		var h http.Handler
		if rt.serve == nil {
			h = http.HandlerFunc(serveOpenAPI)
		} else {
			h = s.handle(rt)
		}
		if !rt.public {
			h = s.guard.Authenticate(h)
		}
		s.mux.Handle(rt.method+" "+rt.path, h)
	}
	if cfg.Metrics != nil {
		s.mux.Handle(http.MethodGet+" "+metricsPath, s.guard.Authenticate(cfg.Metrics))
	}
	return s, nil
}

// ServeHTTP routes the request; requests no route matches get a JSON 404 or 405.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.URL.EscapedPath(), "//") {
		// The mux would redirect to the path without the empty segment, which names
		// another resource (GET /topics//tasks is the topic "tasks"): an empty topic
		// or sequence is an error of the caller's.
		writeJSON(w, http.StatusBadRequest, errorJSON{fmt.Sprintf("the path %q has an empty segment: is a topic or a sequence empty?", r.URL.EscapedPath())})
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// The mux's own "not found" or "method not allowed" answer: keep its status and
	// Allow header, answer in JSON.
	rec := &recorder{header: make(http.Header), status: http.StatusOK}
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.header.Get("Allow"))
		writeJSON(w, rec.status, errorJSON{fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, rec.header.Get("Allow"))})
	case http.StatusNotFound:
		writeJSON(w, rec.status, errorJSON{fmt.Sprintf("no endpoint %s %s: see GET /openapi.json", r.Method, r.URL.Path)})
	default: // a redirect to the canonical path
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
	}
}

// recorder captures the mux's answer to a request no route matches.
type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(status int)      { r.status = status }

// errStopped answers a request whose context ended while it ran.
const errStopped = "the request was stopped before it ended: it ran past the server's read timeout, or the client went away"

// handle adapts a route's endpoint: it checks the {topic} of the path when it has one,
// and refuses what the endpoint would not read (rt.takes), then writes the endpoint's
// body as JSON or maps its error to a status.
func (s *server) handle(rt route) http.Handler {
	topic := strings.Contains(rt.path, "{topic}")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			status int
			body   any
			err    error
		)
		if topic {
			err = repository.ValidateTopic(r.PathValue("topic"))
		}
		if err == nil {
			err = s.unread(w, r, rt)
		}
		if err == nil {
			status, body, err = rt.serve(s, w, r)
		}
		var cut bool
		if err != nil {
			status = statusOf(err)
			if cut = httpguard.Stopped(r, status); cut {
				status = http.StatusServiceUnavailable
			}
		}
		if r.URL.Path != "/healthz" {
			s.statements.record(err, status)
		}
		if err != nil {
			var bodyErr *httpguard.BodyError
			switch {
			case cut:
				s.logger.Info("request stopped: the read timeout passed or the client went away",
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
				writeJSON(w, status, errorJSON{errStopped})
				return
			case status == http.StatusInternalServerError:
				s.logger.Error("request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
			case errors.As(err, &bodyErr):
				s.logger.Debug("request body unreadable", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
			}
			writeJSON(w, status, errorJSON{httpguard.ErrorText(err, status)})
			return
		}
		if stream, ok := body.(streamer); ok {
			stream.stream(w, status)
			return
		}
		writeJSON(w, status, body)
	})
}

// unread refuses a query string given to a write (POST, PATCH, DELETE) that reads none,
// and a body given to an endpoint that reads none (but an empty JSON object, which some
// clients send with every POST). A read ignores a query string it does not take: a
// health probe's or a cache-buster's changes nothing.
func (s *server) unread(w http.ResponseWriter, r *http.Request, rt route) error {
	if rt.takes != takesQuery && rt.method != http.MethodGet && r.URL.RawQuery != "" {
		if names := slices.Sorted(maps.Keys(r.URL.Query())); len(names) > 0 {
			return badRequest("unknown query parameter %q: %s %s takes none", names[0], rt.method, rt.path)
		}
		return badRequest("%s %s takes no query string", rt.method, rt.path)
	}
	if rt.takes != takesBody && r.Body != nil && r.Body != http.NoBody {
		b, err := s.readBody(w, r)
		if err != nil {
			return err
		}
		if t := bytes.TrimSpace(b); len(t) > 0 && !emptyObject.Match(t) {
			return badRequest("%s %s takes no body", rt.method, rt.path)
		}
	}
	return nil
}

// emptyObject is a JSON object without members.
var emptyObject = regexp.MustCompile(`^\{\s*\}$`)

// streamer is a body an endpoint writes itself, piece by piece.
type streamer interface {
	stream(w http.ResponseWriter, status int)
}

// statusOf maps an error to its status code.
func statusOf(err error) int {
	var (
		tooLarge *http.MaxBytesError
		bodyErr  *httpguard.BodyError
	)
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.As(err, &bodyErr), errors.Is(err, errBadRequest), errors.Is(err, repository.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, repository.ErrUnknownTopic), errors.Is(err, repository.ErrUnknownTask), errors.Is(err, repository.ErrUnknownSchedule):
		return http.StatusNotFound
	case errors.Is(err, repository.ErrWrongState), errors.Is(err, repository.ErrScheduleExists):
		return http.StatusConflict
	case errors.Is(err, repository.ErrQueueFull):
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// writeJSON answers body with status. A body that cannot be encoded (a value
// encoding/json refuses, a time RFC 3339 cannot write) is answered 500 saying why: the
// status written first, it was a 200 with an empty body.
func writeJSON(w http.ResponseWriter, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorJSON{"the answer cannot be written as JSON: " + err.Error()})
	}
	jsonHeaders(w)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// jsonHeaders declares a JSON answer, which browsers must not sniff into another type.
func jsonHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// readBody reads the request body, at most maxBody bytes.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return httpguard.ReadBody(w, r, s.maxBody)
}

// health pings the database. The route is public: its answer says whether the
// database answers, never how it failed (the log does), and names the SQLSTATE of
// failing statements only to a client the guard authorizes.
func (s *server) health(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		s.logger.Warn("health: database unreachable", slog.Any("error", err))
		return http.StatusServiceUnavailable, errorJSON{"database unreachable"}, nil
	}
	if failing := s.statements.failing(); failing != "" {
		if !s.guard.Authorized(r) {
			failing = "database statements failing"
		}
		return http.StatusServiceUnavailable, errorJSON{failing}, nil
	}
	return http.StatusOK, map[string]string{"status": "ok"}, nil
}

// statements tracks whether the API's statements succeed, for GET /healthz: a server
// whose database answers pings but refuses its statements (a full lock table, say) is
// not healthy. The last statement decides: one PostgreSQL refused with an error of its
// own (not one of the client's making) marks the server failing until one succeeds, or
// until statementsFresh passes without another failure (no request may come to clear it).
type statements struct {
	mu       sync.Mutex
	cause    string // the SQLSTATE, while failing
	since    time.Time
	last     time.Time
	failures int64
}

// statementsFresh is how long a failed statement keeps GET /healthz failing.
const statementsFresh = 30 * time.Second

// record notes the outcome of an endpoint: err is its error, nil on success, and status
// what the client was answered.
func (st *statements) record(err error, status int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	code := repository.SQLState(err)
	switch {
	case err == nil, code != "" && status != http.StatusInternalServerError:
		st.failures = 0 // the database answered
		return
	case code == "":
		return // not the database's doing, or no answer from it (Ping tells that)
	}
	if st.failures == 0 {
		st.since = time.Now()
	}
	st.failures++
	st.cause, st.last = code, time.Now()
}

// failing describes the failure in progress, "" when none.
func (st *statements) failing() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.failures == 0 || time.Since(st.last) > statementsFresh {
		return ""
	}
	return fmt.Sprintf("database statements failing: SQLSTATE %s for %v (%d failures)",
		st.cause, time.Since(st.since).Round(time.Second), st.failures)
}

// listTopics answers a page of topics by name, with their stats: one read of task_topic
// (TopicPage) and one of the page's stats (StatsAll), whatever the number of topics.
func (s *server) listTopics(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	values, err := parseQuery(r)
	if err != nil {
		return 0, nil, err
	}
	q, err := decodePageQuery(values, "topics", repository.MaxTopicLength)
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	topics, err := s.repo.TopicPage(ctx, s.pool, q.search, q.after, q.limit+1)
	if err != nil {
		return 0, nil, err
	}
	topics, next := nextPage(topics, q.limit, func(t repository.Topic) string { return t.Name })
	out := make([]wire.Topic, 0, len(topics))
	if len(topics) > 0 {
		names := make([]string, len(topics))
		for i, t := range topics {
			names[i] = t.Name
		}
		stats, err := s.repo.StatsAll(ctx, s.pool, names...)
		if err != nil {
			return 0, nil, err
		}
		byName := make(map[string]repository.TopicStats, len(stats))
		for _, st := range stats {
			byName[st.Name] = st.Stats
		}
		for _, t := range topics {
			st, ok := byName[t.Name]
			if !ok {
				continue // destroyed between the two reads
			}
			out = append(out, wire.FromTopic(t, &st))
		}
	}
	return http.StatusOK, map[string]any{"topics": out, "next": next}, nil
}

func (s *server) getTopic(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	ctx, topic := r.Context(), r.PathValue("topic")
	t, err := s.repo.Topic(ctx, s.pool, topic)
	if err != nil {
		return 0, nil, err
	}
	stats, err := s.repo.Stats(ctx, s.pool, topic)
	if err != nil {
		return 0, nil, err
	}
	usage, err := s.repo.LimitUsage(ctx, s.pool, topic)
	if err != nil {
		return 0, nil, err
	}
	out := wire.FromTopic(t, &stats)
	out.Usage = wire.FromUsage(usage)
	return http.StatusOK, out, nil
}

// patchTopic changes the settings given in the body and keeps the others, at once for
// every process (a limit holds from the next poll).
func (s *server) patchTopic(w http.ResponseWriter, r *http.Request) (int, any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	change, err := decodeSettings(body)
	if err != nil {
		return 0, nil, err
	}
	// a change refused by change leaves the settings as they were, which UpdateSettings
	// does not write
	var bad error
	t, err := s.repo.UpdateSettings(r.Context(), s.pool, r.PathValue("topic"), func(ts *repository.TopicSettings) { bad = change(ts) })
	if bad != nil {
		return 0, nil, bad
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromTopic(t, nil), nil
}

func (s *server) pause(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.setActive(r, false)
}
func (s *server) resume(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.setActive(r, true)
}

func (s *server) setActive(r *http.Request, active bool) (int, any, error) {
	ctx, topic := r.Context(), r.PathValue("topic")
	if err := s.repo.SetActive(ctx, s.pool, topic, active); err != nil {
		return 0, nil, err
	}
	t, err := s.repo.Topic(ctx, s.pool, topic)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromTopic(t, nil), nil
}

// taskPath is the URL path of a task.
func taskPath(topic string, sequence int64) string {
	return "/topics/" + url.PathEscape(topic) + "/tasks/" + strconv.FormatInt(sequence, 10)
}

func (s *server) enqueue(w http.ResponseWriter, r *http.Request) (int, any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	req, err := decodeEnqueue(body)
	if err != nil {
		return 0, nil, err
	}
	topic := r.PathValue("topic")
	tasks, err := s.repo.Push(r.Context(), s.pool, topic, req.insertion, req.creations...)
	if err != nil {
		return 0, nil, err
	}
	if req.single && len(tasks) == 1 {
		w.Header().Set("Location", taskPath(topic, tasks[0].Sequence))
	}
	return http.StatusCreated, map[string]any{"tasks": wire.FromTasks(tasks)}, nil
}

func (s *server) listTasks(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	values, err := parseQuery(r)
	if err != nil {
		return 0, nil, err
	}
	q, err := decodeList(values)
	if err != nil {
		return 0, nil, err
	}
	// One more than asked tells whether another page follows. Excerpts cuts long texts
	// in the database, so the page's size does not grow with the tasks'. A walk that
	// stopped at the span gives a short page, or an empty one, with the cursor it
	// reached.
	tasks, more, err := s.repo.ExcerptsWithin(r.Context(), s.pool, r.PathValue("topic"), q.filter, q.cursor, q.limit+1, q.direction, s.span)
	if err != nil {
		return 0, nil, err
	}
	page := taskPage{tasks: tasks}
	if len(tasks) > q.limit {
		page.tasks = tasks[:q.limit]
		page.next = &page.tasks[q.limit-1].Sequence
	} else if more != 0 {
		page.next = &more
	}
	return http.StatusOK, page, nil
}

// taskPage is a listing's answer, {"tasks": [...], "next_cursor": N or null}, written
// one task at a time.
type taskPage struct {
	tasks []repository.Excerpt
	next  *int64
}

func (p taskPage) stream(w http.ResponseWriter, status int) {
	jsonHeaders(w)
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"tasks":[`)
	enc := json.NewEncoder(w)
	for i, t := range p.tasks {
		if i > 0 {
			_, _ = io.WriteString(w, ",")
		}
		_ = enc.Encode(wire.FromExcerpt(t))
	}
	next := "null"
	if p.next != nil {
		next = strconv.FormatInt(*p.next, 10)
	}
	_, _ = io.WriteString(w, `],"next_cursor":`+next+"}\n")
}

func (s *server) getTask(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	ctx, topic := r.Context(), r.PathValue("topic")
	seq, err := parseSequence(r.PathValue("sequence"))
	if err != nil {
		return 0, nil, err
	}
	t, err := s.repo.Get(ctx, s.pool, topic, seq)
	if errors.Is(err, repository.ErrUnknownTask) {
		// Say which is unknown: the topic or only the task.
		if _, terr := s.repo.Topic(ctx, s.pool, topic); terr != nil {
			return 0, nil, terr
		}
	}
	if err != nil {
		return 0, nil, err
	}
	out := wire.FromTask(t)
	if t.State == repository.Ready {
		why, err := s.repo.Waiting(ctx, s.pool, topic, seq)
		if err != nil {
			return 0, nil, err
		}
		out.Waiting = wire.WaitingTexts(why)
	}
	return http.StatusOK, out, nil
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request) (int, any, error) {
	seq, err := parseSequence(r.PathValue("sequence"))
	if err != nil {
		return 0, nil, err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	by, err := decodeCancel(body)
	if err != nil {
		return 0, nil, err
	}
	tasks, err := s.repo.Cancel(r.Context(), s.pool, r.PathValue("topic"), by, seq)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromTask(tasks[0]), nil
}

func (s *server) revive(w http.ResponseWriter, r *http.Request) (int, any, error) {
	ctx, topic := r.Context(), r.PathValue("topic")
	seq, err := parseSequence(r.PathValue("sequence"))
	if err != nil {
		return 0, nil, err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	req, err := decodeRevive(body)
	if err != nil {
		return 0, nil, err
	}
	var out revivalJSON
	err = repository.Atomically(ctx, s.pool, func(tx pgx.Tx) error {
		// The state the client saw, held until the revival commits: a task released and
		// finished since (a SUSPENDED one that succeeded) is not run again.
		if req.state != nil {
			want := *req.state
			if err := s.repo.Hold(ctx, tx, "revive", topic, func(st repository.State) bool { return st == want }, want.String(), seq); err != nil {
				return err
			}
		}
		out, err = s.reviveIn(ctx, tx, topic, req, seq)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// reviveIn revives task seq of topic as req says, in h.
func (s *server) reviveIn(ctx context.Context, h repository.Handle, topic string, req revive, seq int64) (revivalJSON, error) {
	if req.result != nil {
		tasks, err := s.repo.Reassign(ctx, h, topic, *req.result, seq)
		if err != nil {
			return revivalJSON{}, err
		}
		return revivalJSON{Task: wire.FromTask(tasks[0])}, nil
	}
	revivals, err := s.repo.Recreate(ctx, h, topic, *req.mode, seq)
	if err != nil {
		return revivalJSON{}, err
	}
	out := revivalJSON{Task: wire.FromTask(revivals[0].Old)}
	if revivals[0].New.Sequence != revivals[0].Old.Sequence {
		c := wire.FromTask(revivals[0].New)
		out.Copy = &c
	}
	return out, nil
}

// revivalJSON answers a revive: the task as now stored and, for recreate modes other
// than reset, the fresh copy that was pushed.
type revivalJSON struct {
	Task wire.Task  `json:"task"`
	Copy *wire.Task `json:"copy,omitempty"`
}
