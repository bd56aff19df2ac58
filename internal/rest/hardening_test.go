package rest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/conntest"
	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/repository"
)

// count returns how many tasks topic mail holds.
func (f *fixture) count() int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = 'mail'").Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestValidation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("t", 10000)
	t.Run("ALongTopicIs400OnEveryRouteWithoutEchoingIt", func(t *testing.T) {
		f := setup(t)
		for _, rt := range []struct{ method, path, body string }{
			{"GET", "/topics/" + long, ""},
			{"POST", "/topics/" + long + "/pause", ""},
			{"POST", "/topics/" + long + "/resume", ""},
			{"POST", "/topics/" + long + "/tasks", `{"identifier":"a"}`},
			{"GET", "/topics/" + long + "/tasks", ""},
			{"GET", "/topics/" + long + "/tasks/1", ""},
			{"POST", "/topics/" + long + "/tasks/1/cancel", ""},
			{"POST", "/topics/" + long + "/tasks/1/revive", `{"mode":"reset"}`},
		} {
			resp := f.call(rt.method, rt.path, rt.body)
			resp.wantError(t, http.StatusBadRequest, "topic is 10000 characters long, at most 250 allowed")
			if strings.Contains(string(resp.body), long[:300]) {
				t.Errorf("%s %.30s…: the error echoes the topic", rt.method, rt.path)
			}
		}
	})
	// A batch within the body's 1 MiB could hold some 50 000 tiny tasks, each answered
	// in full: a batch holds at most rest.BatchMax, beyond which nothing is written.
	t.Run("ABatchOfTooManyTasksIsRefused", func(t *testing.T) {
		f := setup(t)
		batch := func(n int) string {
			tasks := make([]string, n)
			for i := range tasks {
				tasks[i] = fmt.Sprintf(`{"identifier":"t%d"}`, i)
			}
			return `{"tasks":[` + strings.Join(tasks, ",") + `]}`
		}
		f.call("POST", "/topics/mail/tasks", batch(rest.BatchMax+1)).wantError(t, http.StatusBadRequest,
			fmt.Sprintf(`"tasks" holds %d tasks: at most %d per request`, rest.BatchMax+1, rest.BatchMax))
		if n := f.count(); n != 0 {
			t.Fatalf("%d tasks written by a refused batch, want none", n)
		}
		if resp := f.call("POST", "/topics/mail/tasks", batch(rest.BatchMax)); resp.status != http.StatusCreated {
			t.Fatalf("a batch of %d: %d %s, want 201", rest.BatchMax, resp.status, resp.body)
		}
		if n := f.count(); n != rest.BatchMax {
			t.Errorf("%d tasks written by a batch of %d", n, rest.BatchMax)
		}
	})
	t.Run("ATopicThatIsNotUTF8Is400", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics/a%FFb/tasks", "").wantError(t, http.StatusBadRequest, "UTF-8")
	})
	t.Run("InvalidUTF8InAStringIsRefusedNotRewritten", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", "{\"identifier\":\"a\",\"input\":\"x\xffy\"}").wantError(t, http.StatusBadRequest, "not valid UTF-8")
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a\udc00"}`).wantError(t, http.StatusBadRequest, "unpaired")
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
	})
	// The mux answered a path with an empty segment with a redirect to the path without
	// it, which names another resource: GET /topics//tasks went to the topic "tasks".
	t.Run("AnEmptyPathSegmentIs400", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics//tasks", "").wantError(t, http.StatusBadRequest, `the path "/topics//tasks" has an empty segment`)
		f.call("POST", "/topics//tasks", `{"identifier":"a"}`).wantError(t, http.StatusBadRequest, "empty segment")
		f.call("POST", "/topics/mail/tasks//cancel", "").wantError(t, http.StatusBadRequest, "empty segment")
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
		// a slash inside a topic, escaped, is no empty segment
		f.call("GET", "/topics/mail%2F/tasks", "").wantError(t, http.StatusNotFound, "mail/")
	})
	t.Run("ANullWhereAFieldHasNoneIsRefused", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","priority":null}`).
			wantError(t, http.StatusBadRequest, `field "priority": got a JSON null, want an integer from -32768 to 32767`)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","insertion":null}`).wantError(t, http.StatusBadRequest, `field "insertion": got a JSON null`)
		f.call("POST", "/topics/mail/tasks", `{"tasks":[{"identifier":"a"},{"identifier":"b","key":null}]}`).
			wantError(t, http.StatusBadRequest, `tasks[1]: field "key": got a JSON null, want a string`)
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
		// an input of null is a value
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","input":null}`).want(t, http.StatusCreated, nil)
		// a body of null is not an object of no fields (a cancel by "rest", a PATCH
		// changing nothing, both answered 200)
		for _, c := range []struct{ method, path string }{
			{"POST", "/topics/mail/tasks/1/cancel"}, {"PATCH", "/topics/mail"}, {"POST", "/topics/mail/tasks"},
		} {
			f.call(c.method, c.path, ` null `).wantError(t, http.StatusBadRequest, "the body is a JSON null: want a JSON object")
		}
		var got task
		f.call("GET", "/topics/mail/tasks/1", "").want(t, http.StatusOK, &got)
		if got.State != "READY" {
			t.Errorf("task after a cancel with a null body: %+v, want READY", got)
		}
	})
	t.Run("ANULByteIsRefusedNamingTheFieldAndTheTask", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"tasks":[{"identifier":"ok"},{"identifier":"a\u0000b"}]}`).
			wantError(t, http.StatusBadRequest, `tasks[1]: identifier "a\x00b" contains a NUL byte`)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","input":"x\u0000"}`).wantError(t, http.StatusBadRequest, "input contains a NUL byte")
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
		f.call("GET", "/topics/a%00b/tasks", "").wantError(t, http.StatusBadRequest, "topic contains a NUL byte")
	})
	// A query string that does not decode (a bad escape, a semicolon) is refused: url.Query
	// dropped the pair, and the list answered unfiltered, or a page's after, passed
	// back unescaped, answered the first page again, for ever.
	t.Run("AMalformedQueryStringIsRefused", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"tasks":[{"identifier":"50%off"},{"identifier":"x"}]}`).want(t, http.StatusCreated, nil)
		for _, path := range []string{
			"/topics/mail/tasks?identifier=50%off",
			"/topics/mail/tasks?identifier=order;42",
			"/topics/mail/tasks?state=FAILED;",
			"/topics?after=50%off",
			"/schedules?q=zz%",
		} {
			f.call("GET", path, "").wantError(t, http.StatusBadRequest, "malformed query string")
		}
		var page struct {
			Tasks []task `json:"tasks"`
		}
		f.call("GET", "/topics/mail/tasks?identifier=50%25off", "").want(t, http.StatusOK, &page)
		if len(page.Tasks) != 1 || page.Tasks[0].Identifier != "50%off" {
			t.Errorf("the tasks of identifier 50%%off, escaped: %+v; want the one", page.Tasks)
		}
	})
	// What an endpoint does not read is refused, not ignored: a query parameter that would
	// change nothing (insertion=delete on a push, dry_run on a removal), a body whose
	// fields would be dropped (a pause told paused: false).
	t.Run("WhatAnEndpointDoesNotReadIsRefused", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks?insertion=delete", `{"identifier":"x"}`).
			wantError(t, http.StatusBadRequest, `unknown query parameter "insertion": POST /topics/{topic}/tasks takes none`)
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
		f.call("POST", "/schedules", `{"name":"s","topic":"mail","spec":"@hourly"}`).want(t, http.StatusCreated, nil)
		f.call("DELETE", "/schedules/s?dry_run=true", "").wantError(t, http.StatusBadRequest, `unknown query parameter "dry_run"`)
		f.call("GET", "/schedules/s", "").want(t, http.StatusOK, nil)
		f.call("POST", "/topics/mail/pause", `{"paused":false}`).wantError(t, http.StatusBadRequest, "POST /topics/{topic}/pause takes no body")
		f.call("POST", "/schedules/s/run", `{"input":"x"}`).wantError(t, http.StatusBadRequest, "takes no body")
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks after a refused run, want none", n)
		}
		var topic struct {
			Active *bool `json:"active"`
		}
		f.call("GET", "/topics/mail", "").want(t, http.StatusOK, &topic)
		if topic.Active == nil || !*topic.Active {
			t.Errorf("topic active %v after a refused pause, want true", topic.Active)
		}
		// an empty body, or an empty object as some clients send with every POST, is fine
		f.call("POST", "/topics/mail/pause", " { } ").want(t, http.StatusOK, nil)
		f.call("POST", "/topics/mail/resume", "").want(t, http.StatusOK, nil)
		f.call("GET", "/topics/mail/tasks?limit=1", "").want(t, http.StatusOK, nil)
		// a read that takes none ignores a query string: a probe's, a cache-buster's
		f.call("GET", "/healthz?probe=lb", "").want(t, http.StatusOK, nil)
		f.call("GET", "/topics/mail?_=1700000000", "").want(t, http.StatusOK, nil)
	})
	t.Run("AFieldGivenTwiceIsRefused", func(t *testing.T) {
		f := setup(t)
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","identifier":"b"}`).wantError(t, http.StatusBadRequest, `field "identifier" is given twice`)
		f.call("POST", "/topics/mail/tasks", `{"tasks":[{"identifier":"a"},{"identifier":"b","key":"k","key":"l"}]}`).
			wantError(t, http.StatusBadRequest, `tasks[1]: field "key" is given twice`)
		f.call("PATCH", "/topics/mail", `{"max_attempts":3,"max_attempts":5}`).wantError(t, http.StatusBadRequest, `field "max_attempts" is given twice`)
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
		// an input's own fields are its own: stored as sent
		f.call("POST", "/topics/mail/tasks", `{"identifier":"a","input":{"x":1,"x":2}}`).want(t, http.StatusCreated, nil)
	})
	t.Run("ALongCancellerIs400AndChangesNothing", func(t *testing.T) {
		f := setup(t)
		f.enqueue(`{"identifier":"a"}`)
		by := strings.Repeat("b", repository.MaxCancellerLength+1)
		f.call("POST", "/topics/mail/tasks/1/cancel", `{"by":"`+by+`"}`).wantError(t, http.StatusBadRequest, "canceller is 251 characters long")
		var got task
		f.call("GET", "/topics/mail/tasks/1", "").want(t, http.StatusOK, &got)
		if got.State != "READY" {
			t.Errorf("task %s after a refused cancel, want READY", got.State)
		}
	})
	t.Run("ListingFiltersHaveTheTasksLimits", func(t *testing.T) {
		f := setup(t)
		f.call("GET", "/topics/mail/tasks?identifier="+strings.Repeat("i", 501), "").wantError(t, http.StatusBadRequest, "identifier is 501 characters")
		f.call("GET", "/topics/mail/tasks?reference=%FF", "").wantError(t, http.StatusBadRequest, "reference is not valid UTF-8")
		// an empty filter listed every task
		f.enqueue(`{"identifier":"a"}`)
		for _, key := range []string{"identifier", "reference", "state"} {
			f.call("GET", "/topics/mail/tasks?"+key+"=", "").wantError(t, http.StatusBadRequest, `query parameter "`+key+`" is empty`)
		}
	})
}

func TestBoundedListing(t *testing.T) {
	f := setup(t)
	big := strings.Repeat("é", repository.ExcerptLength+500)
	if _, err := f.repo.Push(f.ctx, f.pool, "mail", repository.Append,
		repository.Creation{Identifier: "big", Input: big}, repository.Creation{Identifier: "small", Input: "s"}); err != nil {
		t.Fatal(err)
	}
	type listing struct {
		Tasks []struct {
			task
			Truncated []string `json:"truncated"`
		} `json:"tasks"`
		NextCursor *int64 `json:"next_cursor"`
	}
	var page listing
	f.call("GET", "/topics/mail/tasks?limit=1", "").want(t, http.StatusOK, &page)
	if len(page.Tasks) != 1 || page.NextCursor == nil || *page.NextCursor != 1 {
		t.Fatalf("page %+v, want task 1 and a next cursor", page)
	}
	got := page.Tasks[0]
	if n := utf8.RuneCountInString(str(got.Input)); n != repository.ExcerptLength || fmt.Sprint(got.Truncated) != "[input]" {
		t.Errorf("listed input of %d characters, truncated %v; want %d and [input]", n, got.Truncated, repository.ExcerptLength)
	}
	var whole task
	f.call("GET", "/topics/mail/tasks/1", "").want(t, http.StatusOK, &whole)
	if str(whole.Input) != big {
		t.Errorf("the task's own URL serves %d bytes of input, want all %d", len(str(whole.Input)), len(big))
	}
	page = listing{}
	f.call("GET", "/topics/mail/tasks?cursor=1", "").want(t, http.StatusOK, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].Truncated != nil || str(page.Tasks[0].Input) != "s" || page.NextCursor != nil {
		t.Errorf("second page %+v, want the small task whole and no cursor", page)
	}
}

// TestDatabaseDown serves the API on a pool whose server does not answer: the answers
// say so without the connection's details, which only the log gets.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	port := conntest.ClosedPort(t)
	pool, err := pgxpool.New(t.Context(), "postgres://secretuser@127.0.0.1:"+port+"/secretdb?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &logbuf.Buffer{}
	h, err := rest.New(rest.Config{Pool: pool, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, ctx: t.Context(), srv: srv}
	secrets := []string{"secretuser", "secretdb", "127.0.0.1", port, "refused"}
	for _, rt := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/healthz", "", http.StatusServiceUnavailable},
		{"GET", "/topics", "", http.StatusInternalServerError},
		{"POST", "/topics/mail/tasks", `{"identifier":"a"}`, http.StatusInternalServerError},
		{"GET", "/topics/mail/tasks/1", "", http.StatusInternalServerError},
	} {
		resp := f.call(rt.method, rt.path, rt.body)
		resp.wantError(t, rt.status)
		for _, s := range secrets {
			if strings.Contains(string(resp.body), s) {
				t.Errorf("%s %s answers %s, which reveals %q", rt.method, rt.path, resp.body, s)
			}
		}
	}
	if !strings.Contains(logs.String(), "secretdb") {
		t.Errorf("the log lacks the connection's details:\n%s", logs)
	}
}

func TestHealthSaysMoreToTheAuthorized(t *testing.T) {
	f := setup(t, withToken("s3cret"))
	f.failTopicRows()
	f.call("GET", "/topics/mail", "").wantError(t, http.StatusInternalServerError, "SQLSTATE 53200")
	public := f.send("GET", "/healthz", "", http.Header{})
	public.wantError(t, http.StatusServiceUnavailable, "database statements failing")
	if strings.Contains(string(public.body), "53200") {
		t.Errorf("public /healthz names the SQLSTATE: %s", public.body)
	}
	f.call("GET", "/healthz", "").wantError(t, http.StatusServiceUnavailable, "SQLSTATE 53200")
}

// raw sends text on a fresh connection to the fixture's server, half-closing it if
// asked, and returns the answer.
func (f *fixture) raw(text string, halfClose bool) string {
	f.t.Helper()
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		f.t.Fatal(err)
	}
	conn := conntest.Dial(f.t, u.Host, text)
	if halfClose {
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			f.t.Fatal(err)
		}
	}
	return conntest.ReadUntilClosed(f.t, conn, 30*time.Second)
}

func TestUnreadableBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, request string
		halfClose     bool
	}{
		{"Truncated", "POST /topics/mail/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"identifier\": \"a\"}", true},
		{"BadChunkSize", "POST /topics/mail/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", false},
		{"TruncatedCancel", "POST /topics/mail/tasks/1/cancel HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"by\"", true},
	} {
		t.Run(tc.name+"Is400LoggedAtDebug", func(t *testing.T) {
			f := setup(t, func(fx *fixture, c *rest.Config) {
				c.Logger = slog.New(slog.NewTextHandler(fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			answer := f.raw(tc.request, tc.halfClose)
			if !strings.HasPrefix(answer, "HTTP/1.1 400") || !strings.Contains(answer, "could not read the request body") {
				t.Errorf("answer %q, want 400 saying the body could not be read", answer)
			}
			logs := f.logs.String()
			if !strings.Contains(logs, "level=DEBUG") || strings.Contains(logs, "level=ERROR") {
				t.Errorf("logs %q, want the failure at DEBUG only", logs)
			}
			if n := f.count(); n != 0 {
				t.Errorf("%d tasks written, want none", n)
			}
		})
	}
}

// TestATimeAfter9999IsWritten: a not-before after the year 9999, which SQL could store
// before migration 000034 (or a hand-written row), is answered as the last instant RFC
// 3339 writes; the listing answered {"tasks":[,]} and the task an empty body, both 200.
func TestATimeAfter9999IsWritten(t *testing.T) {
	f := setup(t)
	f.enqueue(`{"identifier":"near"}`)
	f.exec(`INSERT INTO task (topic, identifier, state, not_before) VALUES ('mail', 'far', 1, '11026-01-01 00:00:00+00')`)
	var page struct {
		Tasks []task `json:"tasks"`
	}
	f.call("GET", "/topics/mail/tasks", "").want(t, http.StatusOK, &page)
	if len(page.Tasks) != 2 || page.Tasks[1].Identifier != "far" || page.Tasks[1].NotBefore == nil ||
		!page.Tasks[1].NotBefore.Equal(time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)) {
		t.Fatalf("listing %+v, want the far task's not-before at the end of 9999", page.Tasks)
	}
	var got task
	f.call("GET", "/topics/mail/tasks/"+strconv.FormatInt(page.Tasks[1].Sequence, 10), "").want(t, http.StatusOK, &got)
	if got.NotBefore == nil || got.NotBefore.Year() != 9999 {
		t.Fatalf("task %+v, want its not-before at the end of 9999", got)
	}
}

// A request whose context ends while its statement waits (the read timeout passed, or
// the client went away) answers 503 saying so and logs no error: nothing failed on the
// server's side.
func TestRequestStopped(t *testing.T) {
	f := setup(t)
	logs := &logbuf.Buffer{}
	h, err := rest.New(rest.Config{Pool: f.pool, Repository: f.repo, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// the topic's listing waits for this lock
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, "LOCK TABLE task_topic IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	defer cancel()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/topics/mail", nil))
	r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	var body struct{ Error string }
	r.want(t, http.StatusServiceUnavailable, &body)
	if !strings.Contains(body.Error, "stopped before it ended") {
		t.Fatalf("error %q", body.Error)
	}
	got := logs.String()
	if strings.Contains(got, "level=ERROR") || !strings.Contains(got, "request stopped") {
		t.Fatalf("logs:\n%s", got)
	}

	// Served as pgtask serve serves it, the read timeout stops the request: net/http lifts
	// its read deadline once a GET's headers are read, and the statement waited on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpguard.NewServer(h, httpguard.Timeouts{Read: 300 * time.Millisecond, Write: 10 * time.Second}, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	client := &http.Client{Timeout: 8 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/topics/mail")
	if err != nil {
		t.Fatalf("GET through the server: %v (the read timeout did not stop it)", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d through the server, want 503", resp.StatusCode)
	}
}
