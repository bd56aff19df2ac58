package rest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is one test's database, with topic "mail" registered, and the API served on it.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	repo  *repository.Repository
	srv   *httptest.Server
	token string
	logs  *logbuf.Buffer
}

// option adjusts the config of a fixture's API.
type option func(*fixture, *rest.Config)

// withToken requires the bearer token token.
func withToken(token string) option {
	return func(f *fixture, c *rest.Config) {
		g, err := httpguard.New(httpguard.Config{Token: token})
		if err != nil {
			f.t.Fatal(err)
		}
		c.Guard, f.token = g, token
	}
}

// setup serves the API on a fresh database; options adjust its config.
func setup(t *testing.T, options ...option) *fixture {
	t.Helper()
	t.Parallel()
	f := &fixture{t: t, ctx: t.Context(), pool: pgtest.NewPool(t, schema.Hash(), repository.Migrate), logs: &logbuf.Buffer{}}
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f.repo = repo
	if _, err := repo.CreateTopic(f.ctx, f.pool, "mail"); err != nil {
		t.Fatal(err)
	}
	// One attempt: a failure is final, as the revival tests want (a new topic retries).
	if _, err := repo.UpdateSettings(f.ctx, f.pool, "mail", func(s *repository.TopicSettings) { s.MaxAttempts = 1 }); err != nil {
		t.Fatal(err)
	}
	cfg := rest.Config{Pool: f.pool, Repository: repo, Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
	for _, o := range options {
		o(f, &cfg)
	}
	h, err := rest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// call sends a request with the fixture's token (if any); body "" sends none.
func (f *fixture) call(method, path, body string) response {
	f.t.Helper()
	header := http.Header{}
	if f.token != "" {
		header.Set("Authorization", "Bearer "+f.token)
	}
	return f.send(method, path, body, header)
}

func (f *fixture) send(method, path, body string, header http.Header) response {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(f.ctx, method, f.srv.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header = header
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// want fails unless the response has the status; it decodes the body into v (if not nil).
func (r response) want(t *testing.T, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
	}
}

// wantError fails unless the response is a JSON error with the status whose message
// contains every fragment.
func (r response) wantError(t *testing.T, status int, fragments ...string) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	r.want(t, status, &e)
	if e.Error == "" {
		t.Fatalf("error body %s has no error text", r.body)
	}
	for _, frag := range fragments {
		if !strings.Contains(e.Error, frag) {
			t.Errorf("error %q does not mention %q", e.Error, frag)
		}
	}
}

// task mirrors the API's task JSON.
type task struct {
	Topic      string     `json:"topic"`
	Sequence   int64      `json:"sequence"`
	Identifier string     `json:"identifier"`
	State      string     `json:"state"`
	Descent    string     `json:"descent"`
	Owner      *string    `json:"owner"`
	Created    time.Time  `json:"created"`
	Completed  *time.Time `json:"completed"`
	Input      *string    `json:"input"`
	Output     *string    `json:"output"`
	Reference  *string    `json:"reference"`
	Priority   int16      `json:"priority"`
	NotBefore  *time.Time `json:"not_before"`
	Attempt    int32      `json:"attempt"`
	Returned   int32      `json:"returned"`
	Errors     []string   `json:"errors"`
	Cancelled  bool       `json:"cancelled"`
}

type taskList struct {
	Tasks      []task `json:"tasks"`
	NextCursor *int64 `json:"next_cursor"`
}

func (f *fixture) enqueue(body string) []task {
	f.t.Helper()
	var out taskList
	f.call("POST", "/topics/mail/tasks", body).want(f.t, http.StatusCreated, &out)
	return out.Tasks
}

// finish leases every READY task of mail and completes them with d.
func (f *fixture) finish(d repository.Decision) {
	f.t.Helper()
	tasks, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 100)
	if err != nil {
		f.t.Fatal(err)
	}
	completions := make([]repository.Completion, len(tasks))
	for i, t := range tasks {
		completions[i] = t.Decide(d)
	}
	if _, err := f.repo.Complete(f.ctx, f.pool, "mail", completions...); err != nil {
		f.t.Fatal(err)
	}
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	t.Run("CreatesOneTaskAndNamesItInLocation", func(t *testing.T) {
		f := setup(t)
		var out taskList
		resp := f.call("POST", "/topics/mail/tasks", `{"identifier":"a","input":{"to": "bob"}}`)
		resp.want(t, http.StatusCreated, &out)
		if len(out.Tasks) != 1 {
			t.Fatalf("tasks %+v, want one", out.Tasks)
		}
		got := out.Tasks[0]
		if got.Sequence != 1 || got.State != "READY" || got.Identifier != "a" || str(got.Input) != `{"to":"bob"}` {
			t.Errorf("task %+v, want sequence 1 READY a with compact JSON input", got)
		}
		if loc := resp.header.Get("Location"); loc != "/topics/mail/tasks/1" {
			t.Errorf("Location %q, want /topics/mail/tasks/1", loc)
		}
	})
	t.Run("StoresAStringInputAsItsText", func(t *testing.T) {
		f := setup(t)
		if got := f.enqueue(`{"identifier":"a","input":"plain text"}`); str(got[0].Input) != "plain text" {
			t.Errorf("input %q, want plain text", str(got[0].Input))
		}
	})
	t.Run("CreatesABatchInRequestOrder", func(t *testing.T) {
		f := setup(t)
		got := f.enqueue(`{"tasks":[{"identifier":"a"},{"identifier":"b","priority":-1},{"identifier":"c","suspended":true}]}`)
		if len(got) != 3 || got[0].Identifier != "a" || got[1].Identifier != "b" || got[2].Identifier != "c" ||
			got[0].Sequence >= got[1].Sequence || got[1].Sequence >= got[2].Sequence {
			t.Fatalf("batch %+v, want a, b, c with ascending sequences", got)
		}
		if got[1].Priority != -1 || got[2].State != "SUSPENDED" {
			t.Errorf("batch %+v, want b at priority -1 and c SUSPENDED", got)
		}
	})
	t.Run("DelaysByDurationMillisecondsOrTime", func(t *testing.T) {
		f := setup(t)
		before := time.Now()
		got := f.enqueue(`{"tasks":[{"identifier":"a","delay":"1h"},{"identifier":"b","delay_ms":60000},{"identifier":"c","not_before":"2031-02-03T04:05:06Z"}]}`)
		if got[0].NotBefore == nil || got[0].NotBefore.Before(before.Add(59*time.Minute)) {
			t.Errorf("delay 1h: not_before %v, want about an hour from now", got[0].NotBefore)
		}
		if got[1].NotBefore == nil || got[1].NotBefore.Before(before.Add(59*time.Second)) || got[1].NotBefore.After(before.Add(10*time.Minute)) {
			t.Errorf("delay_ms 60000: not_before %v, want about a minute from now", got[1].NotBefore)
		}
		if want := time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC); got[2].NotBefore == nil || !got[2].NotBefore.Equal(want) {
			t.Errorf("not_before %v, want %v", got[2].NotBefore, want)
		}
	})
	t.Run("KeepsReferenceAndPriority", func(t *testing.T) {
		f := setup(t)
		got := f.enqueue(`{"identifier":"a","reference":"order-7","priority":5}`)
		if str(got[0].Reference) != "order-7" || got[0].Priority != 5 {
			t.Errorf("task %+v, want reference order-7 and priority 5", got[0])
		}
	})
	t.Run("ReplaceMakesTheOlderTaskRedundant", func(t *testing.T) {
		f := setup(t)
		old := f.enqueue(`{"identifier":"a"}`)[0]
		f.enqueue(`{"identifier":"a","insertion":"REPLACE"}`)
		var got task
		f.call("GET", fmt.Sprintf("/topics/mail/tasks/%d", old.Sequence), "").want(t, http.StatusOK, &got)
		if got.State != "REDUNDANT" {
			t.Errorf("older task is %s, want REDUNDANT", got.State)
		}
	})
	t.Run("DeleteKeepsOnlyTheLastTaskOfAnIdentifier", func(t *testing.T) {
		f := setup(t)
		got := f.enqueue(`{"tasks":[{"identifier":"a","input":"1"},{"identifier":"a","input":"2"}],"insertion":"delete"}`)
		if len(got) != 1 || str(got[0].Input) != "2" {
			t.Errorf("tasks %+v, want only the last", got)
		}
	})
	t.Run("RejectsMalformedJSON", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"identifier": "a",`).wantError(t, http.StatusBadRequest, "malformed JSON")
	})
	t.Run("RejectsAnUnknownFieldByName", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","priorty":1}`).wantError(t, http.StatusBadRequest, `"priorty"`)
	})
	t.Run("RejectsAnUnknownInsertion", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","insertion":"prepend"}`).wantError(t, http.StatusBadRequest, "prepend")
	})
	t.Run("RejectsABadDuration", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","delay":"soon"}`).wantError(t, http.StatusBadRequest, "delay", "soon")
	})
	t.Run("RejectsAMissingIdentifierNamingTheTask", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"tasks":[{"identifier":"a"},{"input":"x"}]}`).wantError(t, http.StatusBadRequest, "tasks[1]", "identifier")
	})
	t.Run("RejectsAnIdentifierTheRepositoryRefuses", func(t *testing.T) {
		f := setup(t)
		long := strings.Repeat("x", repository.MaxIdentifierLength+1)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"`+long+`"}`).wantError(t, http.StatusBadRequest, "identifier")
	})
	t.Run("RejectsAnEmptyBody", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", "").wantError(t, http.StatusBadRequest, "empty")
	})
	t.Run("AnswersNotFoundForAnUnknownTopic", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/nope/tasks", `{"identifier":"a"}`).wantError(t, http.StatusNotFound, "unknown topic")
	})
	t.Run("RefusesABodyOverTheLimit", func(t *testing.T) {
		f := setup(t, func(_ *fixture, c *rest.Config) { c.MaxBodyBytes = 100 })
		body := `{"identifier":"a","input":"` + strings.Repeat("x", 200) + `"}`
		f.call("POST", "/topics/mail/tasks", body).wantError(t, http.StatusRequestEntityTooLarge, "100 bytes")
	})
	t.Run("RefusesABodyOverTheDefaultMebibyte", func(t *testing.T) {
		f := setup(t)
		body := `{"identifier":"a","input":"` + strings.Repeat("x", 1<<20) + `"}`
		f.call("POST", "/topics/mail/tasks", body).wantError(t, http.StatusRequestEntityTooLarge)
	})
	t.Run("AnswersTooManyRequestsAtTheQueueCapWritingNothing", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, "mail", repository.TopicSettings{MaxAttempts: 1, QueueCap: 1}); err != nil {
			t.Fatal(err)
		}
		f.call("POST", "/topics/mail/tasks", `{"tasks":[{"identifier":"a"},{"identifier":"b"}]}`).wantError(t, http.StatusTooManyRequests, "cap")
		var page taskList
		f.call("GET", "/topics/mail/tasks", "").want(t, http.StatusOK, &page)
		if len(page.Tasks) != 0 {
			t.Errorf("tasks after a refused push: %+v, want none", page.Tasks)
		}
	})
}

func TestGetTask(t *testing.T) {
	t.Parallel()
	t.Run("ReturnsEveryFieldWithStatesByName", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a","input":"in","reference":"r"}`)
		f.finish(repository.Fail(errors.New("boom")))
		var got task
		resp := f.call("GET", "/topics/mail/tasks/1", "")
		resp.want(t, http.StatusOK, &got)
		if got.Topic != "mail" || got.State != "FAILED" || got.Descent != "READY" || str(got.Owner) != "test" ||
			str(got.Output) != "boom" || got.Completed == nil || got.Attempt != 1 || len(got.Errors) != 1 || str(got.Reference) != "r" {
			t.Errorf("task %+v", got)
		}
		var fields map[string]any
		resp.want(t, http.StatusOK, &fields)
		for _, name := range []string{"topic", "sequence", "identifier", "state", "descent", "owner", "created", "completed",
			"input", "output", "reference", "priority", "not_before", "attempt", "returned", "errors", "cancelled"} {
			if _, ok := fields[name]; !ok {
				t.Errorf("field %q missing from %s", name, resp.body)
			}
		}
	})
	t.Run("AnswersNotFoundForAnUnknownTask", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics/mail/tasks/42", "").wantError(t, http.StatusNotFound, "unknown task")
	})
	// A time before the year 0, which no RFC 3339 string can write (stored from SQL
	// before migration 000059), failed the encoding: the answer was a 200 with an empty
	// body. It is answered as the first instant RFC 3339 can write, as a time after the
	// year 9999 is as the last.
	t.Run("AnswersATimeBeforeTheYear0AsTheFirstItCanWrite", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		if _, err := f.pool.Exec(f.ctx, "UPDATE task SET not_before = '0100-01-01 00:00:00+00 BC' WHERE topic = 'mail'"); err != nil {
			t.Fatal(err)
		}
		var got task
		f.call("GET", "/topics/mail/tasks/1", "").want(t, http.StatusOK, &got)
		if got.NotBefore == nil || !got.NotBefore.Equal(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("not_before %v, want 0000-01-01T00:00:00Z", got.NotBefore)
		}
	})
	t.Run("AnswersNotFoundNamingAnUnknownTopic", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics/nope/tasks/1", "").wantError(t, http.StatusNotFound, "unknown topic")
	})
	t.Run("RejectsASequenceThatIsNotAPositiveInteger", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics/mail/tasks/first", "").wantError(t, http.StatusBadRequest, "first")
		f.call("GET", "/topics/mail/tasks/0", "").wantError(t, http.StatusBadRequest, "positive")
	})
	t.Run("ServesTopicsWhoseNameNeedsEscaping", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, "a/b c"); err != nil {
			t.Fatal(err)
		}
		var out taskList
		resp := f.call("POST", "/topics/a%2Fb%20c/tasks", `{"identifier":"x"}`)
		resp.want(t, http.StatusCreated, &out)
		if out.Tasks[0].Topic != "a/b c" {
			t.Fatalf("topic %q, want a/b c", out.Tasks[0].Topic)
		}
		var got task
		f.call("GET", resp.header.Get("Location"), "").want(t, http.StatusOK, &got)
		if got.Identifier != "x" {
			t.Errorf("task at Location %+v, want x", got)
		}
	})
}

func TestListTasks(t *testing.T) {
	t.Parallel()
	// list returns the sequences and the next cursor of the listing at path.
	list := func(t *testing.T, f *fixture, path string) ([]int64, *int64) {
		t.Helper()
		var out taskList
		f.call("GET", path, "").want(t, http.StatusOK, &out)
		seqs := make([]int64, len(out.Tasks))
		for i, tk := range out.Tasks {
			seqs[i] = tk.Sequence
		}
		return seqs, out.NextCursor
	}
	five := `{"tasks":[{"identifier":"a","reference":"r1"},{"identifier":"b"},{"identifier":"c","reference":"r1"},{"identifier":"a"},{"identifier":"e","suspended":true}]}`
	t.Run("PagesForwardWithACursor", func(t *testing.T) {
		f := setup(t)
		f.enqueue(five)
		seqs, next := list(t, f, "/topics/mail/tasks?limit=2")
		if fmt.Sprint(seqs) != "[1 2]" || next == nil || *next != 2 {
			t.Fatalf("page 1: %v next %v", seqs, next)
		}
		seqs, next = list(t, f, "/topics/mail/tasks?limit=2&cursor=2")
		if fmt.Sprint(seqs) != "[3 4]" || next == nil || *next != 4 {
			t.Fatalf("page 2: %v next %v", seqs, next)
		}
		seqs, next = list(t, f, "/topics/mail/tasks?limit=2&cursor=4")
		if fmt.Sprint(seqs) != "[5]" || next != nil {
			t.Fatalf("page 3: %v next %v, want [5] and no next cursor", seqs, next)
		}
	})
	t.Run("PagesBackwardFromTheNewest", func(t *testing.T) {
		f := setup(t)
		f.enqueue(five)
		seqs, next := list(t, f, "/topics/mail/tasks?direction=backward&limit=3")
		if fmt.Sprint(seqs) != "[5 4 3]" || next == nil || *next != 3 {
			t.Fatalf("page 1: %v next %v", seqs, next)
		}
		seqs, next = list(t, f, "/topics/mail/tasks?direction=backward&limit=3&cursor=3")
		if fmt.Sprint(seqs) != "[2 1]" || next != nil {
			t.Fatalf("page 2: %v next %v", seqs, next)
		}
	})
	t.Run("FiltersByStateIdentifierAndReference", func(t *testing.T) {
		f := setup(t)
		f.enqueue(five)
		for path, want := range map[string]string{
			"/topics/mail/tasks?state=suspended":            "[5]",
			"/topics/mail/tasks?identifier=a":               "[1 4]",
			"/topics/mail/tasks?reference=r1":               "[1 3]",
			"/topics/mail/tasks?state=READY&identifier=a":   "[1 4]",
			"/topics/mail/tasks?state=FAILED&identifier=a":  "[]",
			"/topics/mail/tasks?identifier=c&reference=r1":  "[3]",
			"/topics/mail/tasks?identifier=zzz&state=READY": "[]",
		} {
			if seqs, _ := list(t, f, path); fmt.Sprint(seqs) != want {
				t.Errorf("GET %s: %v, want %s", path, seqs, want)
			}
		}
	})
	t.Run("RejectsBadParameters", func(t *testing.T) {
		f := setup(t)
		for query, fragment := range map[string]string{
			"stat=READY":               `"stat"`,
			"state=DONE":               "DONE",
			"limit=0":                  "limit",
			"limit=1001":               "limit",
			"cursor=-1":                "cursor",
			"direction=sideways":       "sideways",
			"state=READY&state=FAILED": "2 times",
			// empty: a next_cursor of null pasted in would start again from the first page
			"cursor=":         `query parameter "cursor" is empty`,
			"limit=":          `query parameter "limit" is empty`,
			"direction=":      `query parameter "direction" is empty`,
			"limit=2&cursor=": `"cursor" is empty`,
		} {
			f.call("GET", "/topics/mail/tasks?"+query, "").wantError(t, http.StatusBadRequest, fragment)
		}
	})
	t.Run("AnswersNotFoundForAnUnknownTopic", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics/nope/tasks", "").wantError(t, http.StatusNotFound, "unknown topic")
	})
	// A state rare among a topic's many tasks is searched a span at a time: a page
	// that reached the span short says where to go on, and the pages, followed to a
	// next_cursor of null, give each of its tasks once. Without the span, one page read
	// the topic whole.
	t.Run("ARareStateIsSearchedASpanAtATime", func(t *testing.T) {
		f := setup(t, func(_ *fixture, c *rest.Config) { c.ListSpan = 2_000 })
		var rare []int64
		err := f.pool.QueryRow(f.ctx, `
			WITH pushed AS (
				INSERT INTO task (topic, identifier, state, completed)
				SELECT 'mail', 'x' || g, CASE WHEN g IN (3, 20990) THEN $1::smallint ELSE $2::smallint END, now()
				FROM generate_series(1, 21000) g
				RETURNING sequence, state)
			SELECT array_agg(sequence ORDER BY sequence) FROM pushed WHERE state = $1::smallint`,
			int16(repository.Filtered), int16(repository.Succeeded)).Scan(&rare)
		if err != nil {
			t.Fatal(err)
		}
		for _, direction := range []string{"forward", "backward"} {
			var got []int64
			calls, short := 0, 0
			path := "/topics/mail/tasks?state=FILTERED&limit=10&direction=" + direction
			for next := (*int64)(nil); calls < 100; calls++ {
				p := path
				if next != nil {
					p += "&cursor=" + strconv.FormatInt(*next, 10)
				}
				var seqs []int64
				seqs, next = list(t, f, p)
				got = append(got, seqs...)
				if next == nil {
					break
				}
				if len(seqs) < 10 {
					short++
				}
			}
			want := slices.Clone(rare)
			if direction == "backward" {
				slices.Reverse(want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: the pages gave %v, want %v", direction, got, want)
			}
			if short == 0 || calls >= 100 {
				t.Errorf("%s: %d short pages with a next cursor in %d calls, want the walk cut at the span", direction, short, calls+1)
			}
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("MakesAReadyTaskRedundantSayingWhoCancelled", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		var got task
		f.call("POST", "/topics/mail/tasks/1/cancel", `{"by":"alice"}`).want(t, http.StatusOK, &got)
		if got.State != "REDUNDANT" || str(got.Output) != "cancelled by alice" {
			t.Errorf("task %+v, want REDUNDANT cancelled by alice", got)
		}
	})
	t.Run("AcceptsAnEmptyBody", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		var got task
		f.call("POST", "/topics/mail/tasks/1/cancel", "").want(t, http.StatusOK, &got)
		if got.State != "REDUNDANT" || str(got.Output) != "cancelled by rest" {
			t.Errorf("task %+v, want REDUNDANT cancelled by rest", got)
		}
	})
	t.Run("FlagsAnActiveTask", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		if _, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 1); err != nil {
			t.Fatal(err)
		}
		var got task
		f.call("POST", "/topics/mail/tasks/1/cancel", "").want(t, http.StatusOK, &got)
		if got.State != "ACTIVE" || !got.Cancelled {
			t.Errorf("task %+v, want ACTIVE and cancelled", got)
		}
	})
	t.Run("AnswersConflictForAFinishedTask", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.finish(repository.Succeed("ok"))
		f.call("POST", "/topics/mail/tasks/1/cancel", "").wantError(t, http.StatusConflict, "SUCCEEDED")
	})
	t.Run("AnswersNotFoundForAnUnknownTaskOrTopic", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks/9/cancel", "").wantError(t, http.StatusNotFound, "unknown task")
		f.call("POST", "/topics/nope/tasks/1/cancel", "").wantError(t, http.StatusNotFound, "unknown topic")
	})
	t.Run("RejectsAnUnknownField", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.call("POST", "/topics/mail/tasks/1/cancel", `{"who":"alice"}`).wantError(t, http.StatusBadRequest, `"who"`)
	})
}

func TestRevive(t *testing.T) {
	t.Parallel()
	type revival struct {
		Task task  `json:"task"`
		Copy *task `json:"copy"`
	}
	t.Run("ResetPutsTheSameTaskBackToReady", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.finish(repository.Fail(errors.New("boom")))
		var got revival
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset"}`).want(t, http.StatusOK, &got)
		if got.Task.Sequence != 1 || got.Task.State != "READY" || got.Copy != nil {
			t.Errorf("revival %+v, want task 1 READY and no copy", got)
		}
	})
	t.Run("AppendMarksTheTaskRecreatedAndPushesACopy", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a","input":"x"}`)
		f.finish(repository.Fail(errors.New("boom")))
		var got revival
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"append"}`).want(t, http.StatusOK, &got)
		if got.Task.State != "RECREATED" || got.Copy == nil || got.Copy.Sequence == 1 || got.Copy.State != "READY" || str(got.Copy.Input) != "x" {
			t.Errorf("revival %+v, want task RECREATED and a READY copy with the input", got)
		}
	})
	t.Run("ResultReassignsTheTask", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.finish(repository.Fail(errors.New("boom")))
		var got revival
		f.call("POST", "/topics/mail/tasks/1/revive", `{"result":"success"}`).want(t, http.StatusOK, &got)
		if got.Task.State != "SUCCEEDED" || got.Copy != nil {
			t.Errorf("revival %+v, want SUCCEEDED", got)
		}
	})
	t.Run("AnswersConflictForAnUnfinishedTask", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset"}`).wantError(t, http.StatusConflict, "READY")
		f.call("POST", "/topics/mail/tasks/1/revive", `{"result":"failure"}`).wantError(t, http.StatusConflict, "READY")
	})
	t.Run("AnswersNotFoundForAnUnknownTask", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks/3/revive", `{"mode":"supersede"}`).wantError(t, http.StatusNotFound, "unknown task")
	})
	t.Run("AnswersTooManyRequestsAtTheQueueCapWritingNothing", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.finish(repository.Fail(errors.New("boom")))
		if _, err := f.repo.Configure(f.ctx, f.pool, "mail", repository.TopicSettings{MaxAttempts: 1, QueueCap: 1}); err != nil {
			t.Fatal(err)
		}
		f.enqueue(`{"identifier":"b"}`)
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset"}`).wantError(t, http.StatusTooManyRequests, "reset in topic", "cap of 1")
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"append"}`).wantError(t, http.StatusTooManyRequests, "recreate in topic", "cap of 1")
		var got task
		f.call("GET", "/topics/mail/tasks/1", "").want(t, http.StatusOK, &got)
		if got.State != "FAILED" {
			t.Errorf("task 1 is %s after the refused revivals, want FAILED", got.State)
		}
	})
	// With the state the client saw, the revival is made only while the task is still
	// in it: a SUSPENDED task released and finished since the page showed it was reset
	// and ran again.
	t.Run("OnlyFromTheStateGiven", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		f.finish(repository.Succeed("done"))
		for _, body := range []string{`{"mode":"reset","state":"suspended"}`, `{"mode":"append","state":"SUSPENDED"}`, `{"result":"failure","state":"SUSPENDED"}`} {
			f.call("POST", "/topics/mail/tasks/1/revive", body).wantError(t, http.StatusConflict, "SUCCEEDED", "SUSPENDED")
		}
		var got task
		f.call("GET", "/topics/mail/tasks/1", "").want(t, http.StatusOK, &got)
		if got.State != "SUCCEEDED" {
			t.Errorf("task 1 is %s after revivals refused for the state, want SUCCEEDED", got.State)
		}
		var rev revival
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset","state":"succeeded"}`).want(t, http.StatusOK, &rev)
		if rev.Task.State != "READY" {
			t.Errorf("revival from the state the task is in: %+v, want READY", rev)
		}
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset","state":"READY"}`).wantError(t, http.StatusBadRequest, `"state" "READY"`)
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset","state":"done"}`).wantError(t, http.StatusBadRequest, `"state" "done"`)
	})
	t.Run("RejectsAmbiguousMissingOrUnknownModes", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"reset","result":"success"}`).wantError(t, http.StatusBadRequest, "not both")
		f.call("POST", "/topics/mail/tasks/1/revive", `{}`).wantError(t, http.StatusBadRequest, "mode")
		f.call("POST", "/topics/mail/tasks/1/revive", `{"mode":"again"}`).wantError(t, http.StatusBadRequest, "again")
		f.call("POST", "/topics/mail/tasks/1/revive", `{"result":"maybe"}`).wantError(t, http.StatusBadRequest, "maybe")
	})
}

// topic mirrors the API's topic JSON.
type topic struct {
	Name     string `json:"name"`
	Active   bool   `json:"active"`
	Settings struct {
		MaxAttempts   int32 `json:"max_attempts"`
		BackoffBaseMs int64 `json:"backoff_base_ms"`
		QueueCap      int64 `json:"queue_cap"`
	} `json:"settings"`
	Stats *struct {
		Active, Ready, Delayed, Expired, Failed, Suspended int64
		OldestReadyMs                                      int64 `json:"oldest_ready_ms"`
	} `json:"stats"`
}

func TestTopics(t *testing.T) {
	t.Parallel()
	t.Run("ListsTopicsWithSettingsAndStats", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, "audit"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Configure(f.ctx, f.pool, "mail", repository.TopicSettings{MaxAttempts: 3, BackoffBase: 2 * time.Second, BackoffCap: time.Minute, QueueCap: 50}); err != nil {
			t.Fatal(err)
		}
		f.enqueue(`{"tasks":[{"identifier":"a"},{"identifier":"b","delay":"1h"},{"identifier":"c","suspended":true}]}`)
		var out struct {
			Topics []topic `json:"topics"`
		}
		f.call("GET", "/topics", "").want(t, http.StatusOK, &out)
		if len(out.Topics) != 2 || out.Topics[0].Name != "audit" || out.Topics[1].Name != "mail" {
			t.Fatalf("topics %+v, want audit and mail", out.Topics)
		}
		mail := out.Topics[1]
		if mail.Settings.MaxAttempts != 3 || mail.Settings.BackoffBaseMs != 2000 || mail.Settings.QueueCap != 50 || !mail.Active {
			t.Errorf("mail settings %+v", mail)
		}
		if s := mail.Stats; s == nil || s.Ready != 2 || s.Delayed != 1 || s.Suspended != 1 || s.Active != 0 {
			t.Errorf("mail stats %+v, want 2 ready (1 delayed), 1 suspended", s)
		}
	})
	// GET /topics answers a page of topics (q, after, limit; the next page's after in
	// next), read with one statement for the names and one for their stats: with 10 000
	// topics, all of them at once took seconds.
	t.Run("ListsTopicsByPage", func(t *testing.T) {
		f := setup(t)
		for _, name := range []string{"audit", "billing", "mail-archive", "zeta"} {
			if _, err := f.repo.CreateTopic(f.ctx, f.pool, name); err != nil {
				t.Fatal(err)
			}
		}
		type page struct {
			Topics []topic `json:"topics"`
			Next   *string `json:"next"`
		}
		names := func(p page) []string {
			var out []string
			for _, t := range p.Topics {
				out = append(out, t.Name)
			}
			return out
		}
		var first, second, last, search page
		f.call("GET", "/topics?limit=2", "").want(t, http.StatusOK, &first)
		if got := names(first); !slices.Equal(got, []string{"audit", "billing"}) || first.Next == nil || *first.Next != "billing" {
			t.Fatalf("first page %v next %v, want audit, billing and next billing", got, first.Next)
		}
		f.call("GET", "/topics?limit=2&after=billing", "").want(t, http.StatusOK, &second)
		if got := names(second); !slices.Equal(got, []string{"mail", "mail-archive"}) || second.Next == nil {
			t.Fatalf("second page %v next %v, want mail, mail-archive and a next", got, second.Next)
		}
		f.call("GET", "/topics?limit=2&after=mail-archive", "").want(t, http.StatusOK, &last)
		if got := names(last); !slices.Equal(got, []string{"zeta"}) || last.Next != nil || last.Topics[0].Stats == nil {
			t.Fatalf("last page %v next %v, want zeta with its stats and no next", got, last.Next)
		}
		f.call("GET", "/topics?q=mail", "").want(t, http.StatusOK, &search)
		if got := names(search); !slices.Equal(got, []string{"mail", "mail-archive"}) {
			t.Fatalf("search mail %v, want mail and mail-archive", got)
		}
		f.call("GET", "/topics?limit=501", "").wantError(t, http.StatusBadRequest, `limit "501" is out of range 1..500`)
		f.call("GET", "/topics?page=2", "").wantError(t, http.StatusBadRequest, `unknown query parameter "page"`)
		f.call("GET", "/topics?limit=2&after=", "").wantError(t, http.StatusBadRequest, `query parameter "after" is empty`)
		f.call("GET", "/topics?limit=", "").wantError(t, http.StatusBadRequest, `query parameter "limit" is empty`)
		f.call("GET", "/topics?q=", "").want(t, http.StatusOK, &search) // a search box left empty: every topic
		if got := names(search); len(got) != 5 {
			t.Errorf("search for nothing %v, want every topic", got)
		}
	})
	t.Run("GetsOneTopic", func(t *testing.T) {
		f := setup(t)
		var got topic
		f.call("GET", "/topics/mail", "").want(t, http.StatusOK, &got)
		if got.Name != "mail" || got.Stats == nil || got.Settings.MaxAttempts != 1 {
			t.Errorf("topic %+v", got)
		}
		f.call("GET", "/topics/nope", "").wantError(t, http.StatusNotFound, "unknown topic")
	})
	t.Run("PauseAndResumePersistTheActivation", func(t *testing.T) {
		f := setup(t)
		var got topic
		f.call("POST", "/topics/mail/pause", "").want(t, http.StatusOK, &got)
		if got.Active {
			t.Errorf("after pause: %+v, want inactive", got)
		}
		if stored, err := f.repo.Topic(f.ctx, f.pool, "mail"); err != nil || stored.Active {
			t.Errorf("stored after pause: %+v %v", stored, err)
		}
		f.call("POST", "/topics/mail/resume", "").want(t, http.StatusOK, &got)
		if !got.Active {
			t.Errorf("after resume: %+v, want active", got)
		}
	})
	t.Run("PauseAnswersNotFoundForAnUnknownTopic", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/nope/pause", "").wantError(t, http.StatusNotFound, "unknown topic")
		f.call("POST", "/topics/nope/resume", "").wantError(t, http.StatusNotFound, "unknown topic")
	})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	withToken := withToken("s3cret")
	t.Run("RefusesAMissingToken", func(t *testing.T) {
		f := setup(t, withToken)
		resp := f.send("GET", "/topics", "", http.Header{})
		resp.wantError(t, http.StatusUnauthorized, "missing bearer token")
		if !strings.HasPrefix(resp.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("WWW-Authenticate %q, want a Bearer challenge", resp.header.Get("WWW-Authenticate"))
		}
	})
	t.Run("RefusesAWrongToken", func(t *testing.T) {
		f := setup(t, withToken)
		for _, auth := range []string{"Bearer s3cre", "Bearer s3cret2", "Basic czNjcmV0", "s3cret"} {
			f.send("POST", "/topics/mail/tasks", `{"identifier":"a"}`, http.Header{"Authorization": {auth}}).
				wantError(t, http.StatusUnauthorized, "bearer token")
		}
		if tasks, _ := f.repo.Page(f.ctx, f.pool, "mail", repository.TaskFilter{}, 0, 10, repository.Forward); len(tasks) != 0 {
			t.Errorf("an unauthenticated push wrote %d tasks", len(tasks))
		}
	})
	t.Run("AcceptsTheRightTokenWhateverTheSchemeCase", func(t *testing.T) {
		f := setup(t, withToken)
		f.send("GET", "/topics", "", http.Header{"Authorization": {"bearer s3cret"}}).want(t, http.StatusOK, nil)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a"}`).want(t, http.StatusCreated, nil)
	})
	t.Run("LeavesHealthAndTheOpenAPIDocumentOpen", func(t *testing.T) {
		f := setup(t, withToken)
		f.send("GET", "/healthz", "", http.Header{}).want(t, http.StatusOK, nil)
		f.send("GET", "/openapi.json", "", http.Header{}).want(t, http.StatusOK, nil)
	})
	t.Run("GuardsMetrics", func(t *testing.T) {
		f := setup(t, withToken, func(_ *fixture, c *rest.Config) {
			c.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "pgtask_up 1\n") })
		})
		f.send("GET", "/metrics", "", http.Header{}).wantError(t, http.StatusUnauthorized)
		if resp := f.call("GET", "/metrics", ""); resp.status != http.StatusOK || string(resp.body) != "pgtask_up 1\n" {
			t.Errorf("GET /metrics with the token: %d %q", resp.status, resp.body)
		}
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	t.Run("AnswersOKWhileTheDatabaseAnswers", func(t *testing.T) {
		f := setup(t)
		var got map[string]string
		f.call("GET", "/healthz", "").want(t, http.StatusOK, &got)
		if got["status"] != "ok" {
			t.Errorf("health %v", got)
		}
	})
	t.Run("AnswersUnavailableWithoutTheDatabase", func(t *testing.T) {
		f := setup(t)
		f.pool.Close()
		f.call("GET", "/healthz", "").wantError(t, http.StatusServiceUnavailable, "database unreachable")
	})
	t.Run("AnswersUnavailableWhileStatementsFail", func(t *testing.T) {
		f := setup(t)
		f.failTopicRows()
		f.call("GET", "/topics/mail", "").wantError(t, http.StatusInternalServerError)
		f.call("GET", "/healthz", "").wantError(t, http.StatusServiceUnavailable, "database statements failing: SQLSTATE 53200")
		// A client's mistake is not the database's.
		f.call("GET", "/topics/mail/tasks/nonsense", "").wantError(t, http.StatusBadRequest)
		f.call("GET", "/healthz", "").wantError(t, http.StatusServiceUnavailable, "SQLSTATE 53200")

		f.exec("DROP FUNCTION task_topic_rows(text)", "ALTER FUNCTION task_topic_rows_real(text) RENAME TO task_topic_rows")
		f.call("GET", "/topics/mail", "").want(t, http.StatusOK, nil)
		f.call("GET", "/healthz", "").want(t, http.StatusOK, nil)
	})
}

// exec runs statements on the fixture's database.
func (f *fixture) exec(statements ...string) {
	f.t.Helper()
	for _, stmt := range statements {
		if _, err := f.pool.Exec(f.ctx, stmt); err != nil {
			f.t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// failTopicRows makes the database answer pings but refuse a statement the API runs:
// the topic statistics raise what a full lock table raises (SQLSTATE 53200).
func (f *fixture) failTopicRows() {
	f.t.Helper()
	f.exec("ALTER FUNCTION task_topic_rows(text) RENAME TO task_topic_rows_real",
		`CREATE FUNCTION task_topic_rows(text) RETURNS bigint LANGUAGE plpgsql AS
		 $$ BEGIN RAISE EXCEPTION 'out of shared memory' USING ERRCODE = '53200'; END $$`)
}

func TestRouting(t *testing.T) {
	t.Parallel()
	t.Run("AnswersUnknownPathsWithJSONNotFound", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/tasks", "").wantError(t, http.StatusNotFound, "no endpoint")
	})
	t.Run("AnswersWrongMethodsWithJSONMethodNotAllowed", func(t *testing.T) {
		f := setup(t)
		resp := f.call("DELETE", "/topics/mail/tasks/1", "")
		resp.wantError(t, http.StatusMethodNotAllowed, "DELETE")
		if allow := resp.header.Get("Allow"); !strings.Contains(allow, "GET") {
			t.Errorf("Allow %q, want GET", allow)
		}
	})
	t.Run("ServesMetricsOnlyWhenConfigured", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/metrics", "").wantError(t, http.StatusNotFound)
	})
	t.Run("AnswersInternalErrorsWithTheTextAndLogsThem", func(t *testing.T) {
		f := setup(t)
		// Break the database under the API: the task table is gone.
		if _, err := f.pool.Exec(f.ctx, "DROP TABLE task CASCADE"); err != nil {
			t.Fatal(err)
		}
		f.call("GET", "/topics", "").wantError(t, http.StatusInternalServerError, "stats")
		if logs := f.logs.String(); !strings.Contains(logs, "request failed") || !strings.Contains(logs, "/topics") {
			t.Errorf("logs %q, want the failed request", logs)
		}
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	t.Run("RequiresAPool", func(t *testing.T) {
		t.Parallel()
		if _, err := rest.New(rest.Config{}); err == nil {
			t.Error("New without a pool succeeded")
		}
	})
	t.Run("RefusesANegativeBodyLimit", func(t *testing.T) {
		t.Parallel()
		if _, err := rest.New(rest.Config{Pool: &pgxpool.Pool{}, MaxBodyBytes: -1}); err == nil {
			t.Error("New with MaxBodyBytes -1 succeeded")
		}
	})
}
