package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/dashboard"
	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/repository"
)

// refresh is how often the pages of the tests refresh their live parts.
const refresh = 300 * time.Millisecond

func TestOverview(t *testing.T) {
	f := setup(t, "")
	for i := range 60 {
		f.createTopic(fmt.Sprintf("bulk-%02d", i))
	}
	f.push("mail", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b", Delay: time.Hour})
	if err := f.repo.SetActive(f.ctx, f.pool, "bulk-00", false); err != nil {
		t.Fatal(err)
	}
	t.Run("ListsAPageOfTopicsWithTheirCounts", func(t *testing.T) {
		body := f.page("/")
		mustContain(t, body, `href="/ui/topics/bulk-00"`, `paused`, `id="next-topics"`)
		if strings.Contains(body, `href="/ui/topics/mail"`) {
			t.Error("the first page lists mail, the 61st topic by name")
		}
		next := regexp.MustCompile(`href="(/\?after=[^"]+)" id="next-topics"`).FindStringSubmatch(body)
		if next == nil {
			t.Fatal("no link to the next page")
		}
		second := f.page(strings.ReplaceAll(next[1], "&amp;", "&"))
		mustContain(t, second, `href="/ui/topics/mail"`, `href="/ui/topics/bulk-59"`)
		if strings.Contains(second, `href="/ui/topics/bulk-00"`) {
			t.Error("the second page repeats the first")
		}
	})
	t.Run("SearchFiltersByName", func(t *testing.T) {
		body := f.page("/?q=MAI")
		mustContain(t, body, `href="/ui/topics/mail"`)
		if strings.Contains(body, "bulk-") {
			t.Error("search MAI lists bulk topics")
		}
		// The row of mail: one due, one delayed.
		row := regexp.MustCompile(`(?s)href="/ui/topics/mail".*?</tr>`).FindString(body)
		cells := regexp.MustCompile(`<td class="num[^"]*">([^<]*)</td>`).FindAllStringSubmatch(row, -1)
		if len(cells) < 2 || cells[0][1] != "1" || cells[1][1] != "1" {
			t.Errorf("mail's row = %q, want 1 due and 1 delayed", row)
		}
	})
	t.Run("APIStaysWhereItWas", func(t *testing.T) {
		status, h, body := f.get("/topics")
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("GET /topics = %d %s", status, body)
		}
	})
	t.Run("PagesForbidOtherScripts", func(t *testing.T) {
		_, h, _ := f.get("/")
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("Content-Security-Policy = %q", csp)
		}
	})
}

func TestTaskPage(t *testing.T) {
	f := setup(t, "")
	t.Run("EscapesInputAndOutput", func(t *testing.T) {
		task := f.push("mail", repository.Creation{Identifier: `<b>id</b>`, Input: `<script>alert(1)</script>`})[0]
		body := f.page(fmt.Sprintf("/ui/topics/mail/tasks/%d", task.Sequence))
		mustContain(t, body, `&lt;script&gt;alert(1)&lt;/script&gt;`, `&lt;b&gt;id&lt;/b&gt;`)
		if strings.Contains(body, `<script>alert`) || strings.Contains(body, `<b>id`) {
			t.Error("the page holds the input unescaped")
		}
		list := f.page("/ui/topics/mail")
		if strings.Contains(list, `<script>alert`) {
			t.Error("the topic page holds the input unescaped")
		}
	})
	t.Run("PrettyPrintsJSONAndCutsLargeValuesWithAWayToSeeAll", func(t *testing.T) {
		big := `{"k":"` + strings.Repeat("y", 40_000) + `"}`
		task := f.push("mail", repository.Creation{Identifier: "json2", Input: big})[0]
		path := fmt.Sprintf("/ui/topics/mail/tasks/%d", task.Sequence)
		cut := f.page(path)
		mustContain(t, cut, "Show all", "(JSON)", "{\n  &#34;k&#34;: &#34;yyy")
		if strings.Count(cut, "y") > 20_000 {
			t.Error("the page shows the whole large input")
		}
		whole := f.page(path + "?full=1")
		if strings.Count(whole, "y") < 40_000 {
			t.Error("?full=1 does not show the whole input")
		}
		// the whole texts are read once: the page is not refreshed live (each refresh
		// of every viewer read megabytes again); the cut one is
		if strings.Contains(whole, "data-live") || !strings.Contains(whole, `id="not-live"`) {
			t.Error("?full=1 is refreshed live, or does not say it is not")
		}
		if !strings.Contains(cut, `<div id="task" data-live>`) {
			t.Error("the task page is not refreshed live")
		}
	})
	t.Run("SaysWhetherItsOwnerIsAlive", func(t *testing.T) {
		task := f.push("mail", repository.Creation{Identifier: "leased"})[0]
		owner, err := repository.New(repository.Config{Owner: "page-owner"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := owner.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(f.ctx, "UPDATE task SET state = 2, owner = 'page-owner', attempt = 1 WHERE topic = 'mail' AND sequence = $1", task.Sequence); err != nil {
			t.Fatal(err)
		}
		path := fmt.Sprintf("/ui/topics/mail/tasks/%d", task.Sequence)
		mustContain(t, f.page(path), `<code>page-owner</code> <span class="badge ok">alive</span>`)
		if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET heartbeat = now() - interval '1 hour' WHERE owner = 'page-owner'"); err != nil {
			t.Fatal(err)
		}
		mustContain(t, f.page(path), `<code>page-owner</code> <span class="badge bad">not alive</span>`)
	})
	t.Run("UnknownTaskIs404", func(t *testing.T) {
		if status, _, _ := f.get("/ui/topics/mail/tasks/999999"); status != http.StatusNotFound {
			t.Errorf("status = %d, want 404", status)
		}
		if status, _, _ := f.get("/ui/topics/nope/tasks/1"); status != http.StatusNotFound {
			t.Errorf("unknown topic: status = %d, want 404", status)
		}
		if status, _, body := f.get("/ui/topics/mail/tasks/x"); status != http.StatusBadRequest || !strings.Contains(body, "sequence") {
			t.Errorf("bad sequence: status = %d, want 400 naming the sequence: %s", status, body)
		}
	})
}

// TestTaskPageReadsLargeTextsInPart: the task page, and each of its live refreshes,
// reads from the database the start of a task's input, output and errors, never
// megabytes of them; ?full=1 reads them whole.
func TestTaskPageReadsLargeTextsInPart(t *testing.T) {
	f := setup(t, "")
	big := strings.Repeat("x", 3<<20)
	task := f.push("mail", repository.Creation{Identifier: "big", Input: big})[0]
	leased, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("poll = %v, %v", leased, err)
	}
	if _, err := f.repo.Complete(f.ctx, f.pool, "mail", leased[0].Decide(repository.Fail(errors.New(big)))); err != nil {
		t.Fatal(err)
	}
	// the dashboard on a pool that counts the bytes it reads from the database
	var read atomic.Int64
	cfg := f.pool.Config()
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := new(net.Dialer).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, read: &read}, nil
	}
	counted, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(counted.Close)
	g := *f
	g.srv = serve(t, counted, f.repo, "")
	path := fmt.Sprintf("/ui/topics/mail/tasks/%d", task.Sequence)
	g.page(path) // connects, prepares the statements
	before := read.Load()
	body := g.page(path, "HX-Request", "true") // a live refresh
	if n := read.Load() - before; n > 256<<10 {
		t.Errorf("a refresh of the page of a task of 6 MiB of texts read %d bytes from the database, want at most 256 KiB", n)
	}
	mustContain(t, body, "Shown: the start of 3.0 MiB", "Show all")
	if len(body) > 256<<10 {
		t.Errorf("the page is %d bytes, want at most 256 KiB", len(body))
	}
	before = read.Load()
	if whole := g.page(path + "?full=1"); strings.Count(whole, "x") < 2*len(big) || read.Load()-before < 2*int64(len(big)) {
		t.Errorf("?full=1 shows %d x and read %d bytes, want the whole input and error", strings.Count(whole, "x"), read.Load()-before)
	}
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func TestTaskPageTimeline(t *testing.T) {
	f := setup(t, "")
	first := f.push("mail", repository.Creation{Identifier: "order-7", Input: "v1"})[0]
	second, err := f.repo.Push(f.ctx, f.pool, "mail", repository.Replace, repository.Creation{Identifier: "order-7", Input: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	third := f.push("mail", repository.Creation{Identifier: "order-7", Input: "v3", Delay: time.Hour})[0]
	if err := f.repo.SetActive(f.ctx, f.pool, "mail", false); err != nil {
		t.Fatal(err)
	}
	body := f.page(fmt.Sprintf("/ui/topics/mail/tasks/%d", third.Sequence))
	t.Run("ShowsEveryTaskOfTheIdentifierWithStateAndDescent", func(t *testing.T) {
		timeline := regexp.MustCompile(`(?s)<ol class="timeline".*?</ol>`).FindString(body)
		for _, want := range []string{
			fmt.Sprintf(`#%d</a>\s*<span class="state st-redundant">REDUNDANT</span>\s*<span class="muted">from READY`, first.Sequence),
			fmt.Sprintf(`#%d</a>\s*<span class="state st-ready">READY</span>`, second[0].Sequence),
			fmt.Sprintf(`current">\s*<a href="/ui/topics/mail/tasks/%d">`, third.Sequence),
		} {
			if !regexp.MustCompile(want).MatchString(timeline) {
				t.Errorf("timeline lacks %s:\n%s", want, timeline)
			}
		}
	})
	t.Run("SaysWhyPollsSkipAReadyTask", func(t *testing.T) {
		mustContain(t, body, "not before", "the topic is paused",
			fmt.Sprintf("waits for the older task #%d", second[0].Sequence),
			fmt.Sprintf(`href="/ui/topics/mail/tasks/%d">see it`, second[0].Sequence))
	})
}

func TestTopicPage(t *testing.T) {
	f := setup(t, "")
	var creations []repository.Creation
	for i := range 120 {
		creations = append(creations, repository.Creation{Identifier: fmt.Sprintf("id-%03d", i), Reference: fmt.Sprintf("ref-%d", i%2)})
	}
	tasks := f.push("mail", creations...)
	seq := func(i int) int64 { return tasks[i].Sequence }
	links := regexp.MustCompile(`<a href="/ui/topics/mail/tasks/(\d+)">`)
	listed := func(body string) []string {
		var out []string
		for _, m := range links.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	t.Run("KeysetPagesNewestFirstBothWays", func(t *testing.T) {
		first := f.page("/ui/topics/mail")
		got := listed(first)
		if len(got) != 50 || got[0] != fmt.Sprint(seq(119)) || got[49] != fmt.Sprint(seq(70)) {
			t.Fatalf("first page = %v", got)
		}
		if strings.Contains(first, `id="newer-tasks"`) {
			t.Error("the newest page links to newer tasks")
		}
		mustContain(t, first, fmt.Sprintf(`href="/ui/topics/mail?before=%d" id="older-tasks"`, seq(70)))
		second := f.page(fmt.Sprintf("/ui/topics/mail?before=%d", seq(70)))
		if got := listed(second); len(got) != 50 || got[0] != fmt.Sprint(seq(69)) || got[49] != fmt.Sprint(seq(20)) {
			t.Fatalf("second page = %v", got)
		}
		mustContain(t, second, fmt.Sprintf(`href="/ui/topics/mail?after=%d" id="newer-tasks"`, seq(69)))
		last := f.page(fmt.Sprintf("/ui/topics/mail?before=%d", seq(20)))
		if got := listed(last); len(got) != 20 || strings.Contains(last, `id="older-tasks"`) {
			t.Fatalf("last page = %v, want 20 tasks and no older page", got)
		}
		back := f.page(fmt.Sprintf("/ui/topics/mail?after=%d", seq(69)))
		if got := listed(back); len(got) != 50 || got[0] != fmt.Sprint(seq(119)) || got[49] != fmt.Sprint(seq(70)) {
			t.Fatalf("page after %d = %v, want the first page again", seq(69), got)
		}
	})
	t.Run("FiltersByReferenceAndState", func(t *testing.T) {
		if got := listed(f.page("/ui/topics/mail?reference=ref-1&identifier=id-003")); len(got) != 1 || got[0] != fmt.Sprint(seq(3)) {
			t.Fatalf("reference ref-1, identifier id-003 = %v", got)
		}
		if got := listed(f.page("/ui/topics/mail?state=FAILED")); len(got) != 0 {
			t.Fatalf("state FAILED = %v, want none", got)
		}
	})
	t.Run("IdentifierPagesThroughItsOwnTasks", func(t *testing.T) {
		var same []repository.Creation
		for range 60 {
			same = append(same, repository.Creation{Identifier: "same"})
		}
		mine := f.push("mail", same...)
		first := f.page("/ui/topics/mail?identifier=same")
		if got := listed(first); len(got) != 50 || got[0] != fmt.Sprint(mine[59].Sequence) || got[49] != fmt.Sprint(mine[10].Sequence) {
			t.Fatalf("first page of identifier same = %v", got)
		}
		mustContain(t, first, fmt.Sprintf(`href="/ui/topics/mail?before=%d&amp;identifier=same" id="older-tasks"`, mine[10].Sequence))
		older := f.page(fmt.Sprintf("/ui/topics/mail?identifier=same&before=%d", mine[10].Sequence))
		if got := listed(older); len(got) != 10 || got[0] != fmt.Sprint(mine[9].Sequence) || strings.Contains(older, `id="older-tasks"`) {
			t.Fatalf("older page of identifier same = %v", got)
		}
		mustContain(t, older, `href="/ui/topics/mail?identifier=same" id="newer-tasks"`)
		if got := listed(f.page("/ui/topics/mail?identifier=same&state=FAILED")); len(got) != 0 {
			t.Fatalf("identifier same, state FAILED = %v, want none", got)
		}
	})
	t.Run("FiltersByTimeRange", func(t *testing.T) {
		future := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
		if got := listed(f.page("/ui/topics/mail?from=" + future)); len(got) != 0 {
			t.Fatalf("from the future = %v, want none", got)
		}
		past := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
		if got := listed(f.page("/ui/topics/mail?from=" + past)); len(got) != 50 {
			t.Fatalf("from an hour ago = %d tasks, want a page of 50", len(got))
		}
	})
	t.Run("BadFilterNamesTheField", func(t *testing.T) {
		for path, field := range map[string]string{"/ui/topics/mail?state=DONE": "state", "/ui/topics/mail?from=yesterday": "from",
			"/ui/topics/mail?after=x": "after", "/ui/topics/mail?identifier=a%00b": "identifier", "/ui/topics/mail?reference=%00": "reference",
			"/?q=a%00b": "topic search"} {
			status, _, body := f.get(path)
			if status != http.StatusBadRequest || !strings.Contains(body, field) {
				t.Errorf("GET %s = %d, want 400 naming %s", path, status, field)
			}
		}
	})
}

func TestSettings(t *testing.T) {
	f := setup(t, "")
	t.Run("SavesTheFieldsGiven", func(t *testing.T) {
		status, body := f.post("/ui/topics/mail/settings", `{"max_attempts": 5, "backoff_base": "2s", "queue_cap": 100, "retention": "24h"}`)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		topic, err := f.repo.Topic(f.ctx, f.pool, "mail")
		if err != nil {
			t.Fatal(err)
		}
		if topic.MaxAttempts != 5 || topic.BackoffBase != 2*time.Second || topic.QueueCap != 100 || topic.Retention != 24*time.Hour {
			t.Fatalf("settings = %+v", topic.TopicSettings)
		}
	})
	t.Run("BadValueNamesTheFieldAndWritesNothing", func(t *testing.T) {
		before, _ := f.repo.Topic(f.ctx, f.pool, "mail")
		for body, field := range map[string]string{`{"max_attempts": 7, "backoff_cap": "soon"}`: "backoff_cap",
			`{"max_attempts": 0}`: "max_attempts 0 is below 1", `{"colour": "red"}`: "colour",
			`{"queue_cap": -1}`:                         "queue_cap -1 is negative",
			`{"retention": "-1h"}`:                      "retention -1h0m0s is negative",
			`{"backoff_base": "1.5ms"}`:                 "backoff_base 1.5ms is not a whole number of milliseconds",
			`{"max_attempts": 3, "backoff_base": "2h"}`: "backoff_cap 1h0m0s is below backoff_base 2h0m0s",
			// a field given twice, data after the object: refused, not read in part
			`{"max_attempts": 3, "max_attempts": 0}`:  "is given twice",
			`{"max_attempts": 3} {"max_attempts": 0}`: "unexpected data after the json object",
			`{"max_attempts": 3000000000}`:            "got a json number 3000000000, want an integer"} {
			status, text := f.post("/ui/topics/mail/settings", body)
			if status != http.StatusBadRequest || !strings.Contains(strings.ToLower(text), field) {
				t.Errorf("%s: %d %s, want 400 naming %s", body, status, text, field)
			}
		}
		after, _ := f.repo.Topic(f.ctx, f.pool, "mail")
		if after.TopicSettings != before.TopicSettings {
			t.Errorf("settings changed: %+v, was %+v", after.TopicSettings, before.TopicSettings)
		}
	})
	t.Run("AQueryStringIsRefusedAndWritesNothing", func(t *testing.T) {
		before, _ := f.repo.Topic(f.ctx, f.pool, "mail")
		status, text := f.post("/ui/topics/mail/settings?max_attempts=9", `{"max_attempts": 8}`)
		if status != http.StatusBadRequest || !strings.Contains(text, "takes no query string") {
			t.Errorf("%d %s, want 400 refusing the query string", status, text)
		}
		after, _ := f.repo.Topic(f.ctx, f.pool, "mail")
		if after.TopicSettings != before.TopicSettings {
			t.Errorf("settings changed: %+v, was %+v", after.TopicSettings, before.TopicSettings)
		}
	})
}

func TestBulk(t *testing.T) {
	f := setup(t, "")
	ready := f.push("mail", repository.Creation{Identifier: "r1"}, repository.Creation{Identifier: "r2"}, repository.Creation{Identifier: "keep"})
	bulk := func(body string) (int64, string) {
		t.Helper()
		status, text := f.post("/ui/topics/mail/bulk", body)
		if status != http.StatusOK {
			t.Fatalf("bulk %s: %d %s", body, status, text)
		}
		var out struct{ Changed int64 }
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			t.Fatal(err)
		}
		return out.Changed, text
	}
	t.Run("CancelsTheReadyTasksOfTheFilter", func(t *testing.T) {
		if n, text := bulk(`{"action": "cancel", "state": "READY", "identifier": "r1"}`); n != 1 {
			t.Fatalf("cancelled %d: %s", n, text)
		}
		task, err := f.repo.Get(f.ctx, f.pool, "mail", ready[0].Sequence)
		if err != nil || task.State != repository.Redundant || !task.Cancelled {
			t.Fatalf("task = %+v, %v; want cancelled", task, err)
		}
	})
	t.Run("ATimeRangeWithoutTasksDoesNothingAndOneBackwardsIsRefused", func(t *testing.T) {
		if n, text := bulk(`{"action": "purge", "from": "2020-01-01T00:00", "to": "2020-01-02T00:00"}`); n != 0 || !strings.Contains(text, "nothing to do") {
			t.Fatalf("purge of 2020: %d, %s; want nothing to do", n, text)
		}
		status, text := f.post("/ui/topics/mail/bulk", `{"action": "purge", "from": "2030-01-01T00:00", "to": "2020-01-01T00:00"}`)
		if status != http.StatusBadRequest || !strings.Contains(text, "from 2030-01-01T00:00 is after to 2020-01-01T00:00") {
			t.Fatalf("purge from 2030 to 2020: %d %s, want 400 saying from is after to", status, text)
		}
		// an empty range does not pass over the action's own checks
		for body, says := range map[string]string{
			`{"action": "explode", "from": "2020-01-01T00:00", "to": "2020-01-02T00:00"}`:                     "action",
			`{"action": "purge", "state": "READY", "from": "2020-01-01T00:00", "to": "2020-01-02T00:00"}`:     "finished tasks only",
			`{"action": "reassign", "result": "MAYBE", "from": "2020-01-01T00:00", "to": "2020-01-02T00:00"}`: "result",
			// a state the action never changes: it answered 200, 0 tasks
			`{"action": "reassign", "result": "SUCCESS", "state": "READY"}`: "reassign to SUCCESS applies to tasks EXPIRED, FAILED, SUSPENDED, FILTERED, not READY",
			`{"action": "cancel", "state": "SUCCEEDED"}`:                    "cancel applies to tasks ACTIVE, READY, EXPIRED, SUSPENDED, not SUCCEEDED",
		} {
			if status, text := f.post("/ui/topics/mail/bulk", body); status != http.StatusBadRequest || !strings.Contains(text, says) {
				t.Errorf("%s: %d %s, want 400 naming %s", body, status, text, says)
			}
		}
	})
	t.Run("RevivesTheFailedOnes", func(t *testing.T) {
		polled, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 2)
		if err != nil || len(polled) != 2 {
			t.Fatalf("poll = %v, %v", polled, err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, "mail", polled[0].Decide(repository.Fail(fmt.Errorf("boom"))), polled[1].Decide(repository.Fail(fmt.Errorf("boom")))); err != nil {
			t.Fatal(err)
		}
		if n, text := bulk(`{"action": "recreate", "mode": "reset", "state": "FAILED"}`); n != 2 {
			t.Fatalf("reset %d: %s", n, text)
		}
		if got, _ := f.repo.Get(f.ctx, f.pool, "mail", polled[0].Sequence); got.State != repository.Ready {
			t.Fatalf("state = %s, want READY", got.State)
		}
	})
	t.Run("CancelsEveryCancellableStateWhenNoneIsNamed", func(t *testing.T) {
		// without a state, each cancellable state is read through its own index
		// (matching), and a finished task is left as it is
		f.createTopic("other")
		pushed := f.push("other", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"},
			repository.Creation{Identifier: "c", Suspended: true}, repository.Creation{Identifier: "d"})
		leased, err := f.repo.Poll(f.ctx, f.pool, "other", repository.FIFO, repository.None, 2)
		if err != nil || len(leased) != 2 {
			t.Fatalf("poll = %v, %v", leased, err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, "other", leased[0].Decide(repository.Succeed("done"))); err != nil {
			t.Fatal(err)
		}
		status, text := f.post("/ui/topics/other/bulk", `{"action": "cancel"}`)
		if status != http.StatusOK || !strings.Contains(text, `"changed":3`) {
			t.Fatalf("cancel of any state: %d %s, want 3 changed (ACTIVE, SUSPENDED, READY)", status, text)
		}
		for i, want := range []repository.State{repository.Succeeded, repository.Active, repository.Redundant, repository.Redundant} {
			task, err := f.repo.Get(f.ctx, f.pool, "other", pushed[i].Sequence)
			if err != nil || task.State != want || (i > 0 && !task.Cancelled) {
				t.Errorf("task %s = %s cancelled %v (%v), want %s cancelled", task.Identifier, task.State, task.Cancelled, err, want)
			}
		}
		// the ACTIVE task cancelled runs on until its handler ends: a second cancel
		// passes over it (it found it again at each "apply again", and counted it)
		status, text = f.post("/ui/topics/other/bulk", `{"action": "cancel"}`)
		if status != http.StatusOK || !strings.Contains(text, `"changed":0`) {
			t.Fatalf("cancel again: %d %s, want 0 changed", status, text)
		}
	})
	t.Run("APurgeWhoseTimeIsUpSaysSo", func(t *testing.T) {
		// a dashboard whose purges have no time: the first batch is cancelled, nothing is
		// deleted, and the answer asks for another purge rather than failing
		hurried := *f
		hurried.srv = serve(t, f.pool, f.repo, "", func(c *dashboard.Config) { c.PurgeFor = time.Nanosecond })
		status, text := hurried.post("/ui/topics/mail/bulk", `{"action": "purge"}`)
		if status != http.StatusOK || !strings.Contains(text, `"more":true`) || !strings.Contains(text, "purge again") {
			t.Fatalf("purge out of time: %d %s, want 200 asking for another purge", status, text)
		}
		if task, err := f.repo.Get(f.ctx, f.pool, "mail", ready[0].Sequence); err != nil || task.State != repository.Redundant {
			t.Fatalf("the cancelled task after a purge out of time = %+v, %v; want it kept", task, err)
		}
	})
	t.Run("PurgesFinishedTasks", func(t *testing.T) {
		if n, text := bulk(`{"action": "purge"}`); n != 1 {
			t.Fatalf("purged %d: %s, want the cancelled task", n, text)
		}
	})
	t.Run("RefusesWhatItCannotDo", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"action": "explode"}`:                     "action",
			`{"action": "purge", "identifier": "r2"}`:   "identifier",
			`{"action": "purge", "state": "READY"}`:     "finished",
			`{"action": "reassign", "result": "MAYBE"}`: "result",
			`{"action": "cancel", "state": "SLEEPING"}`: "state",
			`{"action": "cancel", "from": "last week"}`: "from",
		} {
			status, text := f.post("/ui/topics/mail/bulk", body)
			if status != http.StatusBadRequest || !strings.Contains(text, want) {
				t.Errorf("%s: %d %s, want 400 naming %s", body, status, text, want)
			}
		}
		huge := `{"action": "cancel", "identifier": "` + strings.Repeat("x", 70<<10) + `"}`
		if status, text := f.post("/ui/topics/mail/bulk", huge); status != http.StatusRequestEntityTooLarge || !strings.Contains(text, "too large") {
			t.Errorf("a body of 70 KiB: %d %s, want 413", status, text)
		}
	})
}

// TestBulkRevival: a bulk revival without a state filter revives the broken tasks
// (EXPIRED, FAILED, SUSPENDED) only, never the finished ones, which it touches when the
// filter names their state; a reassign never rewrites tasks already in the state its
// result leads to.
func TestBulkRevival(t *testing.T) {
	f := setup(t, "")
	// finished gives topic two SUCCEEDED tasks (output "done") and two FAILED ones
	finished := func(topic string) (succeeded, failed []repository.Task) {
		t.Helper()
		f.createTopic(topic)
		f.push(topic, repository.Creation{Identifier: "s1"}, repository.Creation{Identifier: "s2"},
			repository.Creation{Identifier: "f1"}, repository.Creation{Identifier: "f2"})
		leased, err := f.repo.Poll(f.ctx, f.pool, topic, repository.FIFO, repository.None, 4)
		if err != nil || len(leased) != 4 {
			t.Fatalf("poll = %v, %v", leased, err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, topic, leased[0].Decide(repository.Succeed("done")), leased[1].Decide(repository.Succeed("done")),
			leased[2].Decide(repository.Fail(fmt.Errorf("boom"))), leased[3].Decide(repository.Fail(fmt.Errorf("boom")))); err != nil {
			t.Fatal(err)
		}
		for _, task := range leased {
			got, err := f.repo.Get(f.ctx, f.pool, topic, task.Sequence)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == repository.Succeeded {
				succeeded = append(succeeded, got)
			} else {
				failed = append(failed, got)
			}
		}
		return succeeded, failed
	}
	bulk := func(topic, body string) int64 {
		t.Helper()
		status, text := f.post("/ui/topics/"+topic+"/bulk", body)
		var out struct{ Changed int64 }
		if status != http.StatusOK || json.Unmarshal([]byte(text), &out) != nil {
			t.Fatalf("bulk %s: %d %s", body, status, text)
		}
		return out.Changed
	}
	// unchanged fails unless the tasks are as they were, each the only one of its identifier
	unchanged := func(topic string, tasks []repository.Task) {
		t.Helper()
		for _, was := range tasks {
			got, err := f.repo.Get(f.ctx, f.pool, topic, was.Sequence)
			if err != nil || got.State != was.State || !got.Completed.Equal(was.Completed) || got.Output != was.Output {
				t.Errorf("task %s = %s completed %v output %q (%v), want %s completed %v output %q as before",
					was.Identifier, got.State, got.Completed, got.Output, err, was.State, was.Completed, was.Output)
			}
			if line, err := f.repo.Timeline(f.ctx, f.pool, topic, was.Identifier, repository.MaxSequence, 10); err != nil || len(line) != 1 {
				t.Errorf("identifier %s has %d tasks (%v), want no new one", was.Identifier, len(line), err)
			}
		}
	}
	t.Run("ReassignWithoutAStateLeavesTheSucceeded", func(t *testing.T) {
		succeeded, failed := finished("reassign")
		if n := bulk("reassign", `{"action": "reassign", "result": "SUCCESS"}`); n != 2 {
			t.Fatalf("reassigned %d, want the 2 FAILED", n)
		}
		unchanged("reassign", succeeded)
		for _, was := range failed {
			if got, err := f.repo.Get(f.ctx, f.pool, "reassign", was.Sequence); err != nil || got.State != repository.Succeeded {
				t.Errorf("task %s = %s (%v), want SUCCEEDED", was.Identifier, got.State, err)
			}
		}
		again, _ := f.repo.Get(f.ctx, f.pool, "reassign", failed[0].Sequence)
		if n := bulk("reassign", `{"action": "reassign", "result": "SUCCESS"}`); n != 0 {
			t.Fatalf("applied again: reassigned %d, want none", n)
		}
		unchanged("reassign", append(succeeded, again))
	})
	t.Run("RecreateWithoutAStateLeavesTheSucceeded", func(t *testing.T) {
		succeeded, failed := finished("recreate")
		if n := bulk("recreate", `{"action": "recreate", "mode": "append"}`); n != 2 {
			t.Fatalf("recreated %d, want the 2 FAILED", n)
		}
		unchanged("recreate", succeeded)
		for _, was := range failed {
			if got, err := f.repo.Get(f.ctx, f.pool, "recreate", was.Sequence); err != nil || got.State != repository.Recreated {
				t.Errorf("task %s = %s (%v), want RECREATED", was.Identifier, got.State, err)
			}
		}
	})
	t.Run("RecreateOfANamedSucceededStateRecreatesThem", func(t *testing.T) {
		succeeded, failed := finished("named")
		if n := bulk("named", `{"action": "recreate", "mode": "append", "state": "SUCCEEDED"}`); n != 2 {
			t.Fatalf("recreated %d, want the 2 SUCCEEDED", n)
		}
		for _, was := range succeeded {
			if got, err := f.repo.Get(f.ctx, f.pool, "named", was.Sequence); err != nil || got.State != repository.Recreated {
				t.Errorf("task %s = %s (%v), want RECREATED", was.Identifier, got.State, err)
			}
		}
		unchanged("named", failed)
	})
	t.Run("ReassignToTheStateFilteredIsRefused", func(t *testing.T) {
		succeeded, _ := finished("refused")
		status, text := f.post("/ui/topics/refused/bulk", `{"action": "reassign", "result": "SUCCESS", "state": "SUCCEEDED"}`)
		if status != http.StatusBadRequest || !strings.Contains(text, "reassign to SUCCESS applies to tasks EXPIRED, FAILED, SUSPENDED, FILTERED, not SUCCEEDED") {
			t.Fatalf("reassign SUCCEEDED to SUCCESS: %d %s, want 400 saying it applies to the other revivable states", status, text)
		}
		unchanged("refused", succeeded)
	})
}

// TestBulkFinishedStateWindow: a bulk action on a finished state, which has no index,
// searches a window of sequences below the end of the range at a time, as the topic
// page does; when older tasks remain unsearched it says so and where the next search
// starts, which finds them.
func TestBulkFinishedStateWindow(t *testing.T) {
	f := setup(t, "")
	f.createTopic("work")
	var rare int64
	if err := f.pool.QueryRow(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed, output)
		VALUES ('work', 'rare', 5, 1, now(), 'skipped') RETURNING sequence`).Scan(&rare); err != nil {
		t.Fatal(err)
	}
	// more SUCCEEDED tasks after it than one search reads
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed)
		SELECT 'work', 'common-' || g, 6, 1, now() FROM generate_series(1, 120000) g`); err != nil {
		t.Fatal(err)
	}
	bulk := func(body string) (out struct {
		Changed int64
		Message string
		More    bool
		Before  int64
	}) {
		t.Helper()
		status, text := f.post("/ui/topics/work/bulk", body)
		if status != http.StatusOK || json.Unmarshal([]byte(text), &out) != nil {
			t.Fatalf("bulk %s: %d %s", body, status, text)
		}
		return out
	}
	first := bulk(`{"action": "reassign", "result": "FAILURE", "state": "FILTERED"}`)
	if first.Changed != 0 || !first.More || first.Before <= rare || !strings.Contains(first.Message, fmt.Sprintf("apply again to search before %d", first.Before)) {
		t.Fatalf("first search = %+v; want nothing changed, more, and where to search on (above %d)", first, rare)
	}
	if got, err := f.repo.Get(f.ctx, f.pool, "work", rare); err != nil || got.State != repository.Filtered {
		t.Fatalf("rare task after the first search = %s (%v), want FILTERED still", got.State, err)
	}
	next := bulk(fmt.Sprintf(`{"action": "reassign", "result": "FAILURE", "state": "FILTERED", "before": %d}`, first.Before))
	if next.Changed != 1 || next.More || next.Before != 0 {
		t.Fatalf("search before %d = %+v; want the rare task changed, and no more", first.Before, next)
	}
	if got, err := f.repo.Get(f.ctx, f.pool, "work", rare); err != nil || got.State != repository.Failed {
		t.Fatalf("rare task = %s (%v), want FAILED", got.State, err)
	}
	if status, text := f.post("/ui/topics/work/bulk", `{"action": "reassign", "result": "FAILURE", "state": "FILTERED", "before": -1}`); status != http.StatusBadRequest || !strings.Contains(text, "before -1") {
		t.Errorf("before -1: %d %s, want 400 naming before", status, text)
	}
}

// TestBulkAtTheQueueCap: a chunk of a bulk revive that the topic's queue cap refuses
// answers 429 and changes nothing; the answer says what the chunks before it changed.
func TestBulkAtTheQueueCap(t *testing.T) {
	f := setup(t, "")
	const n = 1001 // two chunks (bulkChunk): 1000 resets, then one more
	f.failed("mail", n)
	if _, err := f.repo.Configure(f.ctx, f.pool, "mail", repository.TopicSettings{MaxAttempts: 1, QueueCap: n - 1}); err != nil {
		t.Fatal(err)
	}
	status, text := f.post("/ui/topics/mail/bulk", `{"action": "recreate", "mode": "reset", "state": "FAILED"}`)
	if status != http.StatusTooManyRequests || !strings.Contains(text, "reset in topic") || !strings.Contains(text, "after 1000 changed") {
		t.Fatalf("bulk reset of %d beyond a cap of %d: %d %s, want 429 saying the reset and the 1000 changed before", n, n-1, status, text)
	}
	if stats, err := f.repo.Stats(f.ctx, f.pool, "mail"); err != nil || stats.Ready != n-1 || stats.Failed != 1 {
		t.Fatalf("stats %+v, %v; want %d READY and 1 FAILED", stats, err, n-1)
	}
}

// failed pushes n tasks to topic, identifiers t0 to t{n-1}, and fails them: n FAILED
// tasks, in the order of their identifiers.
func (f *fixture) failed(topic string, n int) []repository.Task {
	f.t.Helper()
	creations := make([]repository.Creation, n)
	for i := range creations {
		creations[i] = repository.Creation{Identifier: fmt.Sprint("t", i)}
	}
	f.push(topic, creations...)
	leased, err := f.repo.Poll(f.ctx, f.pool, topic, repository.FIFO, repository.None, n)
	if err != nil || len(leased) != n {
		f.t.Fatalf("poll = %d tasks, %v", len(leased), err)
	}
	completions := make([]repository.Completion, n)
	for i, task := range leased {
		completions[i] = task.Decide(repository.Fail(fmt.Errorf("boom")))
	}
	if _, err := f.repo.Complete(f.ctx, f.pool, topic, completions...); err != nil {
		f.t.Fatal(err)
	}
	return leased
}

// poison makes the database fail or stall (how) the update of the task of identifier
// "t1000" of any topic: the second statement of a bulk action on tasks t0 to t1000.
func (f *fixture) poison(how string) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.identifier = 't1000' THEN `+how+`; END IF; RETURN NEW; END $$`); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `CREATE TRIGGER poison BEFORE UPDATE ON task FOR EACH ROW EXECUTE FUNCTION poison()`); err != nil {
		f.t.Fatal(err)
	}
}

// noStatementLeft fails the test when a statement of another session still runs in the
// test's database 5 seconds on: one an action answered for, which its context's end
// did not stop in the database.
func (f *fixture) noStatementLeft() {
	f.t.Helper()
	var running []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		running = nil
		rows, err := f.pool.Query(f.ctx, `SELECT query FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'`)
		if err == nil {
			running, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			f.t.Fatal(err)
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(end) {
			f.t.Fatalf("statements still running in the database after the action answered: %q", running)
		}
	}
}

// TestBulkTime: a bulk action starts no statement once its time (Config.BulkFor) is up,
// and cancels one still running when Config.PurgeFor is: it answers with what it
// changed, asking for another.
func TestBulkTime(t *testing.T) {
	const n = 1001 // two statements (bulkChunk): 1000 tasks, then one more
	reset := `{"action": "recreate", "mode": "reset", "state": "FAILED"}`
	answer := func(t *testing.T, f *fixture, body string) (out struct {
		Changed int64
		Message string
		More    bool
	}) {
		t.Helper()
		status, text := f.post("/ui/topics/mail/bulk", body)
		if status != http.StatusOK || json.Unmarshal([]byte(text), &out) != nil {
			t.Fatalf("bulk %s: %d %s", body, status, text)
		}
		return out
	}
	t.Run("NoStatementBeginsOnceTheTimeIsUp", func(t *testing.T) {
		f := setup(t, "")
		f.srv = serve(t, f.pool, f.repo, "", func(c *dashboard.Config) { c.BulkFor = time.Nanosecond })
		f.failed("mail", n)
		if out := answer(t, f, reset); out.Changed != 1000 || !out.More || !strings.Contains(out.Message, "apply again for more") {
			t.Fatalf("reset out of time = %+v, want the first 1000 and more", out)
		}
		if out := answer(t, f, reset); out.Changed != 1 || out.More {
			t.Fatalf("reset again = %+v, want the last one", out)
		}
	})
	t.Run("AStatementPastTheLimitIsCancelled", func(t *testing.T) {
		f := setup(t, "")
		// time for the first 1000 resets on a loaded machine; the second stalls for 30 s
		f.srv = serve(t, f.pool, f.repo, "", func(c *dashboard.Config) { c.PurgeFor = 5 * time.Second })
		last := f.failed("mail", n)[n-1]
		f.poison("PERFORM pg_sleep(30)")
		out := answer(t, f, reset)
		if out.Changed != 1000 || !out.More || !strings.Contains(out.Message, "apply again for more") {
			t.Fatalf("reset with a stalled statement = %+v, want the first 1000 and more", out)
		}
		// the database stopped the statement (statement_timeout) and undid it: the answer
		// does not say it may have changed
		if strings.Contains(out.Message, "may have changed") {
			t.Errorf("message %q says the stopped statement's task may have changed", out.Message)
		}
		f.noStatementLeft()
		if got, err := f.repo.Get(f.ctx, f.pool, "mail", last.Sequence); err != nil || got.State != repository.Failed {
			t.Fatalf("the stalled statement's task = %s (%v), want FAILED still", got.State, err)
		}
	})
	// a first statement past the limit changed nothing: "apply again" would answer the
	// same at every try, so the answer is a failure that says why
	t.Run("AFirstStatementPastTheLimitFails", func(t *testing.T) {
		f := setup(t, "")
		f.srv = serve(t, f.pool, f.repo, "", func(c *dashboard.Config) { c.PurgeFor = time.Second })
		failed := f.failed("mail", 2)
		first := failed[0]
		// another transaction holds the first task's row
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := tx.Exec(f.ctx, `SELECT 1 FROM task WHERE sequence = $1 FOR UPDATE`, first.Sequence); err != nil {
			t.Fatal(err)
		}
		status, text := f.post("/ui/topics/mail/bulk", reset)
		if status != http.StatusServiceUnavailable || !strings.Contains(text, "the first statement, of 2 tasks, did not finish in 1s (") ||
			!strings.Contains(text, "and nothing changed: another transaction may hold these tasks' rows") {
			t.Fatalf("reset with the first statement stalled = %d %s, want 503 saying why", status, text)
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		f.noStatementLeft()
		for _, task := range failed {
			if got, err := f.repo.Get(f.ctx, f.pool, "mail", task.Sequence); err != nil || got.State != repository.Failed {
				t.Errorf("task %d = %s (%v) after the failed reset, want FAILED still", task.Sequence, got.State, err)
			}
		}
	})
}

func TestProcesses(t *testing.T) {
	f := setup(t, "")
	worker, err := repository.New(repository.Config{Owner: "worker-1", Host: "box", PID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.SetExpiryTimeout(7 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	f.push("mail", repository.Creation{Identifier: "a"})
	if _, err := worker.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 1); err != nil {
		t.Fatal(err)
	}
	body := f.page("/ui/processes")
	row := regexp.MustCompile(`(?s)<code>worker-1</code>.*?</tr>`).FindString(body)
	mustContain(t, row, "alive", "box", "4242", "<td>7s</td>", `<td class="num">1</td>`, `<a href="/ui/topics/mail?state=ACTIVE">mail</a>`)
	if strings.Contains(body, `id="owners-more"`) {
		t.Error("the page says more owners are registered than it lists")
	}
	// more owners than the page lists: it says so (it left them out without a word,
	// the dead ones, which heart-beat last, first)
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task_owner (owner, heartbeat, started)
		SELECT 'old-' || g, now() - g * interval '1 minute', now() - interval '1 day' FROM generate_series(1, 600) g`); err != nil {
		t.Fatal(err)
	}
	body = f.page("/ui/processes")
	mustContain(t, body, `id="owners-more"`, "<code>worker-1</code>", "<code>old-1</code>")
	if strings.Contains(body, "<code>old-600</code>") {
		t.Error("the page lists the owner that heart-beat longest ago, past its 500")
	}
}

// TestLoginThrottled: after 10 wrong tokens from one address, the login form refuses
// that address (429, Retry-After), the right token too, without checking it; a weak
// token could be guessed as fast as the server answered.
func TestLoginThrottled(t *testing.T) {
	const token = "s3cret-token"
	f := setup(t, token)
	login := func(given string) (int, http.Header, string) {
		return f.do(http.MethodPost, "/ui/login", form("token", given, "next", "/"), "Content-Type", "application/x-www-form-urlencoded")
	}
	for i := range 10 {
		if status, _, _ := login(fmt.Sprintf("guess-%d", i)); status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, status)
		}
	}
	status, h, body := login(token)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || h.Get("Set-Cookie") != "" ||
		!strings.Contains(body, "too many wrong tokens from this address") {
		t.Errorf("the right token after 10 wrong ones: %d, Retry-After %q, cookie %q; want 429 saying why, no session", status, h.Get("Retry-After"), h.Get("Set-Cookie"))
	}
	// a bearer token on a page counts too (a page answered a right one 200, a wrong one
	// 303, as fast as asked)
	pages := *f
	pages.srv = serve(t, f.pool, f.repo, token) // a server of its own: its own counts
	for i := range 10 {
		if status, _, _ := pages.get("/", "Authorization", fmt.Sprintf("Bearer guess-%d", i)); status != http.StatusSeeOther {
			t.Fatalf("a page with wrong token %d: %d, want 303 to the login", i, status)
		}
	}
	if status, _, _ := pages.get("/", "Authorization", "Bearer "+token); status != http.StatusSeeOther {
		t.Errorf("a page with the right token after 10 wrong ones: %d, want 303 (the token not checked)", status)
	}
}

func TestLogin(t *testing.T) {
	const token = "s3cret-token"
	f := setup(t, token)
	t.Run("PagesNeedIt", func(t *testing.T) {
		for _, path := range []string{"/", "/ui/topics/mail", "/ui/processes"} {
			status, h, _ := f.get(path)
			if status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login?next=") {
				t.Errorf("GET %s = %d to %q, want 303 to the login", path, status, h.Get("Location"))
			}
		}
		if status, _ := f.post("/ui/topics/mail/settings", `{}`); status != http.StatusUnauthorized {
			t.Errorf("settings without session = %d, want 401", status)
		}
		if status, _ := f.post("/ui/api/topics/mail/pause", `{}`); status != http.StatusUnauthorized {
			t.Errorf("API without session = %d, want 401", status)
		}
	})
	login := func(given string) (int, http.Header, string) {
		return f.do(http.MethodPost, "/ui/login", form("token", given, "next", "/ui/processes"), "Content-Type", "application/x-www-form-urlencoded")
	}
	t.Run("WrongTokenIsRefused", func(t *testing.T) {
		status, h, body := login("wrong")
		if status != http.StatusUnauthorized || h.Get("Set-Cookie") != "" || !strings.Contains(body, "wrong token") {
			t.Fatalf("login = %d %q", status, h.Get("Set-Cookie"))
		}
	})
	t.Run("RightTokenSetsAStrictHttpOnlyCookie", func(t *testing.T) {
		status, h, _ := login(token)
		cookie := h.Get("Set-Cookie")
		if status != http.StatusSeeOther || h.Get("Location") != "/ui/processes" {
			t.Fatalf("login = %d to %q", status, h.Get("Location"))
		}
		for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
			if !strings.Contains(cookie, want) {
				t.Errorf("cookie %q lacks %s", cookie, want)
			}
		}
		if strings.Contains(cookie, token) {
			t.Error("the cookie holds the token")
		}
		session := strings.SplitN(cookie, ";", 2)[0]
		f.page("/", "Cookie", session)
		if status, _ := f.post("/ui/api/topics/mail/pause", `{}`, "Cookie", session); status != http.StatusOK {
			t.Errorf("pause with the session = %d, want 200", status)
		}
		if status, _ := f.post("/ui/topics/mail/settings", `{"max_attempts": 3}`, "Cookie", session); status != http.StatusOK {
			t.Errorf("settings with the session = %d, want 200", status)
		}
	})
	t.Run("SecureCookieBehindATLSProxy", func(t *testing.T) {
		// plain HTTP here: Secure would keep the browser from sending the cookie back
		if _, h, _ := login(token); strings.Contains(h.Get("Set-Cookie"), "Secure") {
			t.Errorf("cookie over plain HTTP %q is Secure", h.Get("Set-Cookie"))
		}
		// a proxy that ended TLS says so: the browser spoke HTTPS, the cookie is Secure
		_, h, _ := f.do(http.MethodPost, "/ui/login", form("token", token, "next", "/"),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-Proto", "https")
		if !strings.Contains(h.Get("Set-Cookie"), "Secure") {
			t.Errorf("cookie behind a TLS proxy %q is not Secure", h.Get("Set-Cookie"))
		}
	})
	t.Run("LogoutRevokesTheCookie", func(t *testing.T) {
		session := func() string {
			t.Helper()
			_, h, _ := login(token)
			return strings.SplitN(h.Get("Set-Cookie"), ";", 2)[0]
		}
		mine, other := session(), session()
		if mine == other {
			t.Fatalf("two logins got the same cookie %q", mine)
		}
		f.page("/", "Cookie", mine)
		status, h, _ := f.do(http.MethodPost, "/ui/logout", "", "Cookie", mine)
		if status != http.StatusSeeOther || !strings.Contains(h.Get("Set-Cookie"), "Max-Age=0") {
			t.Fatalf("logout = %d, cookie %q; want 303 clearing the cookie", status, h.Get("Set-Cookie"))
		}
		// a copy of the cookie kept after the logout
		if status, h, _ := f.get("/", "Cookie", mine); status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login") {
			t.Errorf("page with the cookie of a logout = %d to %q, want 303 to the login", status, h.Get("Location"))
		}
		// the page's buttons say to sign in, not that the API wants a bearer token
		if status, body := f.post("/ui/api/topics/mail/pause", `{}`, "Cookie", mine); status != http.StatusUnauthorized || !strings.Contains(body, "sign in first: /ui/login") {
			t.Errorf("API with the cookie of a logout = %d %s, want 401 saying to sign in", status, body)
		}
		f.page("/", "Cookie", other) // another login's session goes on
	})
	t.Run("BearerTokenWorksToo", func(t *testing.T) {
		f.page("/", "Authorization", "Bearer "+token)
	})
	t.Run("NextStaysOnTheServer", func(t *testing.T) {
		// the second: a path whose escaping again (the brace) makes it begin with "//"
		for _, next := range []string{"//evil.example/x", "/%2Fevil.example/{"} {
			status, h, _ := f.do(http.MethodPost, "/ui/login", form("token", token, "next", next), "Content-Type", "application/x-www-form-urlencoded")
			if status != http.StatusSeeOther || h.Get("Location") != "/" {
				t.Errorf("login to %s = %d to %q, want /", next, status, h.Get("Location"))
			}
		}
	})
	t.Run("CrossSiteWritesAreRefused", func(t *testing.T) {
		status, _, _ := f.do(http.MethodPost, "/ui/login", form("token", token), "Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site")
		if status != http.StatusForbidden {
			t.Errorf("cross-site login = %d, want 403", status)
		}
	})
}

func TestTopicNamesAreEscaped(t *testing.T) {
	f := setup(t, "")
	const name = `a/b <&>"`
	f.createTopic(name)
	path := "/ui/topics/" + url.PathEscape(name)
	overview := f.page("/?q=" + url.QueryEscape("a/b"))
	mustContain(t, overview, `href="`+strings.ReplaceAll(path, "&", "&amp;")+`"`, `a/b &lt;&amp;&gt;&#34;`)
	body := f.page(path)
	mustContain(t, body, `data-post="/ui/api/topics/`+strings.ReplaceAll(url.PathEscape(name), "&", "&amp;")+`/pause"`)
	if status, text := f.post("/ui/api/topics/"+url.PathEscape(name)+"/pause", ""); status != http.StatusOK {
		t.Fatalf("pause %q through the dashboard's API path: %d %s", name, status, text)
	}
	if topic, err := f.repo.Topic(f.ctx, f.pool, name); err != nil || topic.Active {
		t.Fatalf("topic = %+v, %v; want paused", topic, err)
	}
}

func TestLimitsShown(t *testing.T) {
	f := setup(t, "")
	f.createTopic("api")
	if _, err := f.repo.Configure(f.ctx, f.pool, "api", repository.TopicSettings{MaxAttempts: 1, Concurrency: 1, KeyConcurrency: 1}); err != nil {
		t.Fatal(err)
	}
	tasks := f.push("api", repository.Creation{Identifier: "a", ConcurrencyKey: "acme"}, repository.Creation{Identifier: "b", ConcurrencyKey: "acme"})
	if _, err := f.repo.Poll(f.ctx, f.pool, "api", repository.FIFO, repository.None, 10); err != nil {
		t.Fatal(err)
	}
	t.Run("TopicPageSaysLimitsAndTheirUse", func(t *testing.T) {
		mustContain(t, f.page("/ui/topics/api"), `id="limits" data-live`, "concurrency 1: 1 ACTIVE", "per concurrency key 1: 1 keys at the limit")
		if strings.Contains(f.page("/ui/topics/mail"), `id="limits"`) {
			t.Error("a topic without limits shows limits")
		}
	})
	t.Run("TaskPageNamesTheLimitThatHoldsIt", func(t *testing.T) {
		mustContain(t, f.page(fmt.Sprintf("/ui/topics/api/tasks/%d", tasks[1].Sequence)), `id="skip-reasons"`,
			"the topic&#39;s concurrency limit: 1 of 1 tasks ACTIVE", "the per-key limit: 1 of 1 tasks of concurrency key &#34;acme&#34; ACTIVE")
	})
}

func TestSchedulesPage(t *testing.T) {
	f := setup(t, "")
	if _, err := f.repo.CreateSchedule(f.ctx, f.pool, "night/ly", repository.ScheduleSettings{Topic: "mail", Spec: "0 3 * * *", TimeZone: "Europe/Paris"}); err != nil {
		t.Fatal(err)
	}
	t.Run("ListsSchedulesWithTheirNextFireAndAPauseButton", func(t *testing.T) {
		mustContain(t, f.page("/ui/schedules"), "night/ly", "0 3 * * *", "Europe/Paris", "running",
			`data-post="/ui/api/schedules/night%2Fly/pause"`, `href="/ui/schedules" aria-current="page"`)
	})
	t.Run("PauseAndResumeThroughTheAPI", func(t *testing.T) {
		if status, body := f.post("/ui/api/schedules/night%2Fly/pause", "{}"); status != http.StatusOK {
			t.Fatalf("pause: %d %s", status, body)
		}
		mustContain(t, f.page("/ui/schedules"), "paused", `data-post="/ui/api/schedules/night%2Fly/resume"`)
		if status, body := f.post("/ui/api/schedules/night%2Fly/resume", "{}"); status != http.StatusOK {
			t.Fatalf("resume: %d %s", status, body)
		}
		mustContain(t, f.page("/ui/schedules"), "running")
	})
	t.Run("APageAtATimeSearchedByNameOrTopic", func(t *testing.T) {
		for i := range 101 {
			if _, err := f.repo.CreateSchedule(f.ctx, f.pool, fmt.Sprintf("s%03d", i), repository.ScheduleSettings{Topic: "mail", Spec: "@hourly"}); err != nil {
				t.Fatal(err)
			}
		}
		first := f.page("/ui/schedules")
		mustContain(t, first, "night/ly", "s098", `href="/ui/schedules?after=s098" id="next-schedules"`)
		if strings.Contains(first, "<code>s099</code>") {
			t.Errorf("the first page lists s099, the 101st schedule")
		}
		second := f.page("/ui/schedules?after=s098")
		mustContain(t, second, "s099", "s100", `href="/ui/schedules">« First`)
		if strings.Contains(second, "night/ly") || strings.Contains(second, "next-schedules") {
			t.Errorf("the second page repeats the first or links to a third")
		}
		found := f.page("/ui/schedules?q=S10")
		mustContain(t, found, "s100")
		if strings.Contains(found, "<code>s099</code>") {
			t.Errorf("the search for S10 lists s099")
		}
		mustContain(t, f.page("/ui/schedules?q=nothing-like-it"), "No schedule or topic matches")
		// a name of 250 characters is longer than 250 bytes in most scripts: the page of
		// the schedules after it was refused, and its Next link with it
		long := "s" + strings.Repeat("é", 200)
		if _, err := f.repo.CreateSchedule(f.ctx, f.pool, long, repository.ScheduleSettings{Topic: "mail", Spec: "@hourly"}); err != nil {
			t.Fatal(err)
		}
		mustContain(t, f.page("/ui/schedules?after="+url.QueryEscape(long)), "<h1>Schedules</h1>")
		mustContain(t, f.page("/ui/schedules?q="+url.QueryEscape(long)), "<code>"+long+"</code>")
	})
}

// TestRareFinishedState: a page filtered by a finished state reads a window of sequences
// at a time; when the window holds none, it says how far it searched and links to the
// older tasks, where the match is.
func TestRareFinishedState(t *testing.T) {
	f := setup(t, "")
	f.createTopic("work")
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed, output)
		VALUES ('work', 'rare', 5, 1, now(), 'skipped')`); err != nil {
		t.Fatal(err)
	}
	// more SUCCEEDED tasks after it than a page reads at once
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed)
		SELECT 'work', 'common-' || g, 6, 1, now() FROM generate_series(1, 120000) g`); err != nil {
		t.Fatal(err)
	}
	body := f.page("/ui/topics/work?state=FILTERED")
	mustContain(t, body, "No task matches.", `id="searched"`, "Search older")
	older := regexp.MustCompile(`href="([^"]+)" id="older-tasks"`).FindStringSubmatch(body)
	if older == nil {
		t.Fatal("no link to search older tasks")
	}
	next := f.page(strings.ReplaceAll(older[1], "&amp;", "&"))
	mustContain(t, next, ">rare<", "FILTERED")
	if strings.Contains(next, "common-") {
		t.Error("the FILTERED page lists SUCCEEDED tasks")
	}
	// a common state fills its page from the newest, with an ordinary link to older ones
	body = f.page("/ui/topics/work?state=SUCCEEDED")
	mustContain(t, body, "common-120000", `id="older-tasks">Older »`)
	if strings.Contains(body, `id="searched"`) {
		t.Error("a full page says it searched a window")
	}
}

// TestDatabaseUnavailable: a page or an action that fails because the database cannot be
// reached answers 500 without the user, database and address the connection error names
// (the server's log has them).
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://alice:s3cret@127.0.0.1:1/ledger?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, pool, repo, "")
	f := &fixture{t: t, ctx: t.Context(), srv: srv}
	status, _, page := f.get("/ui/topics/mail")
	_, action := f.post("/ui/topics/mail/bulk", `{"action": "cancel"}`)
	for what, body := range map[string]string{"page": page, "action": action} {
		if status != http.StatusInternalServerError {
			t.Errorf("page: status %d, want 500", status)
		}
		if !strings.Contains(body, "could not connect") {
			t.Errorf("%s: %s, want it to say the database could not be reached", what, body)
		}
		for _, secret := range []string{"alice", "s3cret", "ledger", "127.0.0.1:1"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s names %q: %s", what, secret, body)
			}
		}
	}
}

// TestCappedCounts: a count that stopped at repository.StatsCap shows as "100 000+" on
// the overview and the topic's page, and REST names it in "capped".
func TestCappedCounts(t *testing.T) {
	f := setup(t, "")
	f.createTopic("dead")
	f.push("dead", repository.Creation{Identifier: "waiting"})
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, completed)
		SELECT 'dead', 'f' || g, 3, now() FROM generate_series(1, $1) g`, repository.StatsCap+1); err != nil {
		t.Fatal(err)
	}
	capped := "100\u202f000+"
	row := regexp.MustCompile(`(?s)href="/ui/topics/dead".*?</tr>`).FindString(f.page("/"))
	cells := regexp.MustCompile(`<td class="num[^"]*">([^<]*)</td>`).FindAllStringSubmatch(row, -1)
	if len(cells) < 5 || cells[0][1] != "1" || cells[4][1] != capped {
		t.Errorf("dead's row = %q, want 1 due and %s failed", row, capped)
	}
	mustContain(t, f.page("/ui/topics/dead"), `<span class="label">Failed</span><span class="value bad">`+capped+`</span>`)
	status, _, body := f.get("/topics/dead")
	if status != http.StatusOK || !strings.Contains(body, `"failed":100000,`) || !strings.Contains(body, `"capped":["failed"]`) {
		t.Errorf("GET /topics/dead = %d %s, want failed 100000 and capped [failed]", status, body)
	}

	// READY and delayed both capped: their difference (0) says nothing of the due
	// tasks, shown as unknown rather than "0+"
	f.createTopic("later")
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, not_before)
		SELECT 'later', 'l' || g, now() + interval '1 hour' FROM generate_series(1, $1) g`, repository.StatsCap+1); err != nil {
		t.Fatal(err)
	}
	row = regexp.MustCompile(`(?s)href="/ui/topics/later".*?</tr>`).FindString(f.page("/"))
	due := regexp.MustCompile(`<td class="num[^"]*">(.*?)</td>`).FindStringSubmatch(row)
	if due == nil || !strings.Contains(due[1], ">?</span>") || strings.Contains(due[1], "0+") {
		t.Errorf("later's row = %q, want its due count unknown (?)", row)
	}
	mustContain(t, f.page("/ui/topics/later"), `<span class="label">Ready (due)</span><span class="value"><span title=`)
}

// TestTaskPageShowsTheLastErrors: a task retried many times shows its last errors, not
// one per attempt (a page of thousands of texts, read again at each refresh); ?full=1
// shows them all.
func TestTaskPageShowsTheLastErrors(t *testing.T) {
	f := setup(t, "")
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, "mail", func(s *repository.TopicSettings) {
		s.MaxAttempts, s.BackoffBase, s.BackoffCap, s.BackoffJitter = 100, 0, 0, 0
	}); err != nil {
		t.Fatal(err)
	}
	task := f.push("mail", repository.Creation{Identifier: "retried"})[0]
	for i := range 30 {
		leased, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 1)
		if err != nil || len(leased) != 1 {
			t.Fatalf("poll %d = %v, %v", i, leased, err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, "mail", leased[0].Decide(repository.Fail(fmt.Errorf("failure-%02d", i)))); err != nil {
			t.Fatal(err)
		}
	}
	path := fmt.Sprintf("/ui/topics/mail/tasks/%d", task.Sequence)
	body := f.page(path)
	mustContain(t, body, "failure-29", "failure-10", `id="errors-left-out"`, "Only the last 20 errors are shown")
	if strings.Contains(body, "failure-09") {
		t.Errorf("the page shows the 10th error of 30, want the last 20 only")
	}
	mustContain(t, f.page(path+"?full=1"), "failure-00", "failure-29")
}

// A finished state's newer page starts again from the newest, and so offers no newer
// page (it linked to itself).
func TestFinishedStateNewerPageIsTheNewest(t *testing.T) {
	f := setup(t, "")
	f.push("mail", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
	leased, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 2)
	if err != nil || len(leased) != 2 {
		t.Fatalf("poll = %v, %v", leased, err)
	}
	if _, err := f.repo.Complete(f.ctx, f.pool, "mail", leased[0].Decide(repository.Succeed("")), leased[1].Decide(repository.Succeed(""))); err != nil {
		t.Fatal(err)
	}
	body := f.page(fmt.Sprintf("/ui/topics/mail?state=SUCCEEDED&after=%d", leased[0].Sequence))
	mustContain(t, body, fmt.Sprintf(`/ui/topics/mail/tasks/%d"`, leased[1].Sequence))
	if strings.Contains(body, `id="newer-tasks"`) {
		t.Error("the newest page of SUCCEEDED tasks links to newer tasks")
	}
}

// stoppedRequests returns the dashboard's handler, unguarded, with its log, and a
// context already ended, as a request's is when the browser went away or the read
// timeout passed.
func stoppedRequests(t *testing.T) (http.Handler, *logbuf.Buffer, context.Context) {
	t.Helper()
	f := setup(t, "")
	logs := &logbuf.Buffer{}
	guard, err := httpguard.New(httpguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	api, err := rest.New(rest.Config{Pool: f.pool, Repository: f.repo, Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Config{Pool: f.pool, Repository: f.repo, API: api, Guard: guard,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	return h, logs, ctx
}

// TestPageStoppedByTheBrowser: a page whose request ended before it did (a refresh in
// flight when the visitor left, the read timeout) answers 503 and logs no error; it was
// logged as a failure of the dashboard, an ERROR at every page left mid-refresh.
func TestPageStoppedByTheBrowser(t *testing.T) {
	h, logs, ctx := stoppedRequests(t)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/ui/topics/mail", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", rec.Code)
	}
	if got := logs.String(); strings.Contains(got, "level=ERROR") || !strings.Contains(got, "dashboard page stopped") {
		t.Errorf("logs:\n%s", got)
	}
}

// TestActionStoppedByTheBrowser: an action whose request ended before it did (the read
// timeout, a visitor who closed the tab during a long purge) answers 503, says to apply
// again, and logs no error, as a page does; it answered 500 with the statement's
// cancellation and logged an ERROR.
func TestActionStoppedByTheBrowser(t *testing.T) {
	h, logs, ctx := stoppedRequests(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/ui/topics/mail/settings", strings.NewReader(`{"queue_cap":100}`))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "apply again") {
		t.Errorf("status %d, %q; want 503 saying to apply again", rec.Code, rec.Body.String())
	}
	if got := logs.String(); strings.Contains(got, "level=ERROR") || !strings.Contains(got, "dashboard action stopped") {
		t.Errorf("logs:\n%s", got)
	}
}

// TestBulkCancelPassesOverTasksThatMovedOn: a task that leaves the states a bulk action
// applies to between the search and the statement (an ACTIVE task that ended) is passed
// over, the others changed, and the answer says how many were passed over. Its
// statement refused the whole chunk, a 409 "apply again" that on a busy topic met the
// same at every try.
func TestBulkCancelPassesOverTasksThatMovedOn(t *testing.T) {
	f := setup(t, "")
	f.push("mail", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"}, repository.Creation{Identifier: "c"})
	leased, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("poll: %v, %v", leased, err)
	}
	dashboard.SetMatchedHook(f.pool, func() {
		if _, err := f.repo.Complete(f.ctx, f.pool, "mail", leased[0].Decide(repository.Succeed(""))); err != nil {
			t.Error(err)
		}
	})
	defer dashboard.SetMatchedHook(f.pool, nil)
	status, text := f.post("/ui/topics/mail/bulk", `{"action": "cancel"}`)
	if status != http.StatusOK || !strings.Contains(text, `"changed":2`) || !strings.Contains(text, "1 passed over") {
		t.Errorf("bulk cancel with an ACTIVE task ending meanwhile: %d %s; want the 2 READY ones cancelled, 1 passed over", status, text)
	}
	if got, err := f.repo.Get(f.ctx, f.pool, "mail", leased[0].Sequence); err != nil || got.State != repository.Succeeded || got.Cancelled {
		t.Errorf("the task that ended: %+v, %v; want SUCCEEDED, not cancelled", got, err)
	}
}

// TestBulkRevivalPassesOverTasksThatFinished: a bulk recreate (or reassign) of the tasks
// the filter found SUSPENDED changed a task that had been released and had succeeded
// between the search and the statement (the revival statements take any state from
// EXPIRED to SUCCEEDED): reset, it was READY and ran again; reassigned FAILURE, a
// success became a failure. The statements hold the tasks still in the filter's state
// and pass over the others.
func TestBulkRevivalPassesOverTasksThatFinished(t *testing.T) {
	for name, action := range map[string]string{
		"RecreateReset":   `{"action": "recreate", "mode": "reset", "state": "SUSPENDED"}`,
		"ReassignFailure": `{"action": "reassign", "result": "FAILURE", "state": "SUSPENDED"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := setup(t, "")
			f.push("mail", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
			leased, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 2)
			if err != nil || len(leased) != 2 {
				t.Fatalf("poll: %v, %v", leased, err)
			}
			if _, err := f.repo.Complete(f.ctx, f.pool, "mail", leased[0].Decide(repository.Suspend("")), leased[1].Decide(repository.Suspend(""))); err != nil {
				t.Fatal(err)
			}
			finished := leased[0].Sequence
			dashboard.SetMatchedHook(f.pool, func() {
				// released, leased and succeeded since the search
				if _, err := f.pool.Exec(f.ctx, "UPDATE task SET state = 6, completed = now() WHERE topic = 'mail' AND sequence = $1", finished); err != nil {
					t.Error(err)
				}
			})
			defer dashboard.SetMatchedHook(f.pool, nil)
			status, text := f.post("/ui/topics/mail/bulk", action)
			if status != http.StatusOK || !strings.Contains(text, `"changed":1`) || !strings.Contains(text, "1 passed over") {
				t.Errorf("bulk %s with a task succeeding meanwhile: %d %s; want the other one changed, 1 passed over", action, status, text)
			}
			if got, err := f.repo.Get(f.ctx, f.pool, "mail", finished); err != nil || got.State != repository.Succeeded {
				t.Errorf("the task that succeeded: %v (%v); want SUCCEEDED still", got.State, err)
			}
			if got, err := f.repo.Get(f.ctx, f.pool, "mail", leased[1].Sequence); err != nil || got.State == repository.Suspended {
				t.Errorf("the task still SUSPENDED: %v (%v); want it changed", got.State, err)
			}
		})
	}
}
