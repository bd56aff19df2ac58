package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// The browser tests drive a real headless Chromium (chromedp) against the dashboard on a
// real database, with a real processor on topic "work". They never skip: without a
// browser they fail and say how to install one.

// chromeInstall is how to get the browser the tests need.
const chromeInstall = "install it with `apt-get install -y chromium` (Debian, Ubuntu; .ci/run does), " +
	"or set PGTASK_CHROME to a Chrome or Chromium binary"

// chromePath finds the browser: $PGTASK_CHROME, else the usual names on the PATH.
func chromePath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PGTASK_CHROME"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("PGTASK_CHROME=%s: %v: %s", p, err, chromeInstall)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("the dashboard's browser tests need Chromium and found none on the PATH: %s", chromeInstall)
	return ""
}

// browser starts a headless Chromium for the test and returns a tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromePath(t)),
		chromedp.NoSandbox, // tests may run as root (CI containers)
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start Chromium: %v (%s)", err, chromeInstall)
	}
	return ctx
}

// run runs browser steps, each given time enough, and fails the test on error.
func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// waitFor waits until the JavaScript expression is true. It evaluates the expression
// again and again rather than in one poll of the page, so that it goes on across the
// navigations that clicks and form submissions start.
func waitFor(expr string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, target *chromedp.Target) (chromedp.Void, error) {
		deadline := time.Now().Add(30 * time.Second)
		var last error
		for time.Now().Before(deadline) {
			ok, err := chromedp.Evaluate[bool](expr)(ctx, target)
			if err == nil && ok {
				return chromedp.Void{}, nil
			}
			last = err
			select {
			case <-ctx.Done():
				return chromedp.Void{}, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		page, _ := chromedp.Evaluate[string](`location.href + ": " + document.body.innerText.slice(0, 400)`)(ctx, target)
		return chromedp.Void{}, fmt.Errorf("waited 30s for %s (last error: %v); the page: %s", expr, last, page)
	}
}

// act runs an action on an element (a click, typing) again while the element cannot be
// found for a moment: right after a navigation chromedp may still hold the node ids of
// the page before, and a loaded machine makes that moment longer.
func act(a chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, target *chromedp.Target) (chromedp.Void, error) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			v, err := a(ctx, target)
			if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "Could not find node") {
				return v, err
			}
			select {
			case <-ctx.Done():
				return v, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// click clicks the element selector finds.
func click(selector string) chromedp.Action[chromedp.Void] {
	return act(chromedp.Click(chromedp.CSS(selector)))
}

// typeIn types text into the element selector finds.
func typeIn(selector, text string) chromedp.Action[chromedp.Void] {
	return act(chromedp.SendKeys(chromedp.CSS(selector), text))
}

// textIs is an expression true when the element's text, trimmed, is want.
func textIs(selector, want string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.textContent || "").trim() === %q`, selector, want)
}

// eval evaluates a JavaScript expression.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page as docs/dashboard-<name>.png when $PGTASK_SCREENSHOTS names a
// directory (the docs' pictures are made so: PGTASK_SCREENSHOTS=$PWD/docs go test
// ./internal/dashboard -run Browser), else takes it only to check that it can.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if dir := os.Getenv("PGTASK_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// worker runs a processor on topic "work" until the test ends: input "fail" fails, input
// "wait" waits for release, anything else succeeds. It returns the topic's manager.
func worker(t *testing.T, f *fixture, release <-chan struct{}) *processor.TaskManager {
	t.Helper()
	f.createTopic("work")
	proc, err := processor.New(processor.Config{Pool: f.pool})
	if err != nil {
		t.Fatal(err)
	}
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		switch task.Input {
		case "fail":
			return repository.Fail(errors.New("asked to fail"))
		case "wait":
			select {
			case <-release:
			case <-ctx.Done():
				return repository.Fail(ctx.Err())
			}
		}
		return repository.Succeed("done: " + task.Input)
	})
	m, err := proc.Manage(processor.ManagerConfig{Topic: "work", Handler: handler, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(f.ctx))
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("processor: %v", err)
		}
	})
	return m
}

// state reads a task's state from the database.
func (f *fixture) state(topic string, sequence int64) repository.State {
	f.t.Helper()
	task, err := f.repo.Get(f.ctx, f.pool, topic, sequence)
	if err != nil {
		f.t.Fatal(err)
	}
	return task.State
}

func TestBrowser(t *testing.T) {
	f := setup(t, "")
	release := make(chan struct{})
	manager := worker(t, f, release)
	f.createTopic("idle") // no processor: its tasks stay where the test puts them
	ctx := browser(t)
	base := f.srv.URL

	t.Run("PushFromTheFormAndWatchItSucceedWithoutReload", func(t *testing.T) {
		run(t, ctx,
			chromedp.Navigate(base+"/"),
			act(chromedp.SetValue(chromedp.CSS("#push-topic"), "work")),
			typeIn("#push-identifier", "hello"),
			typeIn("#push-input", "wait"),
			click("#push"),
			waitFor(`location.pathname.startsWith("/ui/topics/work/tasks/") && document.body.dataset.ready === "1"`),
			waitFor(textIs("#task-state", "ACTIVE")),
			chromedp.Evaluate[chromedp.Void](`window.samePage = true`),
		)
		close(release)
		run(t, ctx, waitFor(textIs("#task-state", "SUCCEEDED")))
		if !eval[bool](t, ctx, `window.samePage === true`) {
			t.Fatal("the page was reloaded")
		}
		if out := eval[string](t, ctx, `document.querySelector("#task-output").textContent`); out != "done: wait" {
			t.Fatalf("output = %q", out)
		}
		screenshot(t, ctx, "task")
		// The topic's chart counts the push and the success once their second is over.
		run(t, ctx, chromedp.Navigate(base+"/ui/topics/work"),
			waitFor(`document.querySelector("#rates canvas") !== null && ["pushed", "succeeded"].every((k) =>
				Number(document.querySelector("#rates .totals [data-series=" + k + "]")?.dataset.total) >= 1)`))
	})

	t.Run("InputIsShownAsText", func(t *testing.T) {
		const xss = `<script>alert(1)</script>`
		run(t, ctx,
			chromedp.Navigate(base+"/ui/topics/idle"),
			typeIn("#push-identifier", `<img src=x onerror=alert(2)>`),
			typeIn("#push-input", xss),
			click("#push"),
			waitFor(`location.pathname.startsWith("/ui/topics/idle/tasks/")`),
			waitFor(`document.querySelector("#task-input") !== null`),
		)
		if got := eval[string](t, ctx, `document.querySelector("#task-input").textContent`); got != xss {
			t.Fatalf("input shown = %q, want %q", got, xss)
		}
		for _, path := range []string{"", "/ui/topics/idle"} {
			if path != "" {
				run(t, ctx, chromedp.Navigate(base+path), waitFor(`document.body.dataset.ready === "1"`))
			}
			const want = "/ui/static/vendor/htmx.min.js /ui/static/vendor/uPlot.iife.min.js /ui/static/app.js"
			got := eval[string](t, ctx, `Array.from(document.scripts, (s) => new URL(s.src || "inline:", location.href).pathname).join(" ")
				+ " ".repeat(document.querySelectorAll("img").length ? 1 : 0) + (document.querySelectorAll("img").length ? "img" : "")`)
			if got != want {
				t.Fatalf("%s: scripts and images %q, want only the dashboard's scripts %q", path, got, want)
			}
		}
	})

	t.Run("CancelAReadyTask", func(t *testing.T) {
		task := f.push("idle", repository.Creation{Identifier: "to-cancel"})[0]
		run(t, ctx,
			chromedp.Navigate(fmt.Sprintf("%s/ui/topics/idle/tasks/%d", base, task.Sequence)),
			waitFor(textIs("#task-state", "READY")),
			click("#cancel"),
			waitFor(textIs("#task-state", "REDUNDANT")),
		)
		if st := f.state("idle", task.Sequence); st != repository.Redundant {
			t.Fatalf("state = %s, want REDUNDANT", st)
		}
	})

	// The page of a task shown whole is not refreshed live: after an action it reloads
	// (it showed the state before, its button left disabled).
	t.Run("CancelAReadyTaskShownWhole", func(t *testing.T) {
		task := f.push("idle", repository.Creation{Identifier: "to-cancel-whole"})[0]
		run(t, ctx,
			chromedp.Navigate(fmt.Sprintf("%s/ui/topics/idle/tasks/%d?full=1", base, task.Sequence)),
			waitFor(textIs("#task-state", "READY")),
			waitFor(`document.body.dataset.ready === "1"`),
			click("#cancel"),
			waitFor(textIs("#task-state", "REDUNDANT")),
			waitFor(`document.querySelector("#toast").textContent === "Cancel: done"`),
		)
	})

	// The settings form posted every field as the page had loaded it, so a save undid
	// what was set elsewhere since: it posts the fields changed in it.
	t.Run("SaveSettingsKeepsWhatChangedElsewhere", func(t *testing.T) {
		run(t, ctx,
			chromedp.Navigate(base+"/ui/topics/idle"),
			waitFor(`document.body.dataset.ready === "1"`),
		)
		if _, err := f.repo.UpdateSettings(f.ctx, f.pool, "idle", func(s *repository.TopicSettings) { s.QueueCap = 1000 }); err != nil {
			t.Fatal(err)
		}
		run(t, ctx,
			act(chromedp.SetValue(chromedp.CSS(`#settings-form input[name=max_attempts]`), "7")),
			click("#save-settings"),
			waitFor(`document.getElementById("toast")?.textContent === "Saved"`),
		)
		got, err := f.repo.Topic(f.ctx, f.pool, "idle")
		if err != nil {
			t.Fatal(err)
		}
		if got.MaxAttempts != 7 || got.QueueCap != 1000 {
			t.Fatalf("max attempts %d, queue cap %d: want 7 (saved) and 1000 (set meanwhile)", got.MaxAttempts, got.QueueCap)
		}
	})

	t.Run("ReviveAFailedTask", func(t *testing.T) {
		task := f.push("work", repository.Creation{Identifier: "to-revive", Input: "fail"})[0]
		run(t, ctx,
			chromedp.Navigate(fmt.Sprintf("%s/ui/topics/work/tasks/%d", base, task.Sequence)),
			waitFor(textIs("#task-state", "FAILED")),
		)
		screenshot(t, ctx, "task-failed")
		run(t, ctx,
			click("#revive-reassign"),
			waitFor(textIs("#task-state", "SUCCEEDED")),
		)
		if st := f.state("work", task.Sequence); st != repository.Succeeded {
			t.Fatalf("state = %s, want SUCCEEDED", st)
		}
	})

	t.Run("ABulkRevivalOfARareStateSearchesOnWhenAppliedAgain", func(t *testing.T) {
		// a FILTERED task below more SUCCEEDED ones than one search reads: the first
		// click says older tasks may match, the second searches them
		f.createTopic("rare")
		var rare int64
		if err := f.pool.QueryRow(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed)
			VALUES ('rare', 'rare', 5, 1, now()) RETURNING sequence`).Scan(&rare); err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed)
			SELECT 'rare', 'common-' || g, 6, 1, now() FROM generate_series(1, 120000) g`); err != nil {
			t.Fatal(err)
		}
		apply := []chromedp.Action[chromedp.Void]{click("#bulk"), waitFor(textIs("#bulk", "Click again to confirm")), click("#bulk")}
		run(t, ctx, append([]chromedp.Action[chromedp.Void]{
			chromedp.Navigate(base + "/ui/topics/rare?state=FILTERED"),
			waitFor(`document.body.dataset.ready === "1"`),
			act(chromedp.SetValue(chromedp.CSS("#bulk-action"), "reassign")),
			act(chromedp.SetValue(chromedp.CSS(`#bulk-form select[name=result]`), "FAILURE")),
		}, append(apply, waitFor(`document.querySelector("#toast").textContent.includes("apply again to search before")`))...)...)
		if st := f.state("rare", rare); st != repository.Filtered {
			t.Fatalf("state after the first search = %s, want FILTERED", st)
		}
		run(t, ctx, append(apply, waitFor(`document.querySelector("#toast").textContent === "reassign: 1 tasks"`))...)
		if st := f.state("rare", rare); st != repository.Failed {
			t.Fatalf("state after the second search = %s, want FAILED", st)
		}
	})

	// The bulk form carries the filter the list was loaded with: a state chosen above
	// but not applied was ignored, and a purge deleted every finished state.
	t.Run("ABulkActionRefusesAFilterNotApplied", func(t *testing.T) {
		f.createTopic("unapplied")
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, descent, completed)
			VALUES ('unapplied', 'failed', 3, 1, now()), ('unapplied', 'succeeded', 6, 1, now())`); err != nil {
			t.Fatal(err)
		}
		run(t, ctx,
			chromedp.Navigate(base+"/ui/topics/unapplied"),
			waitFor(`document.body.dataset.ready === "1"`),
			act(chromedp.SetValue(chromedp.CSS("#filter-state"), "FAILED")),
			act(chromedp.SetValue(chromedp.CSS("#bulk-action"), "purge")),
			click("#bulk"),
			waitFor(`document.querySelector("#toast").textContent.includes("The filter above has changes not applied")`),
		)
		if got := eval[string](t, ctx, `document.querySelector("#bulk").textContent`); got != "Apply to the filter" {
			t.Errorf("the bulk button says %q after the refusal, want it not armed", got)
		}
		var n int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = 'unapplied'").Scan(&n); err != nil || n != 2 {
			t.Fatalf("%d tasks after the refused purge (%v), want both", n, err)
		}
		// a filter applied whose identifier holds a line break (a text field's value
		// drops it, its attribute keeps it) is no change
		run(t, ctx,
			chromedp.Navigate(base+"/ui/topics/unapplied?identifier=a%0Ab"),
			waitFor(`document.body.dataset.ready === "1"`),
			click("#bulk"),
			waitFor(textIs("#bulk", "Click again to confirm")),
		)
	})

	t.Run("PauseATopicAndPollingStops", func(t *testing.T) {
		run(t, ctx,
			chromedp.Navigate(base+"/ui/topics/work"),
			waitFor(`document.body.dataset.ready === "1"`),
			click("#pause"),
			waitFor(textIs("#topic-status", "paused")),
		)
		topic, err := f.repo.Topic(f.ctx, f.pool, "work")
		if err != nil || topic.Active {
			t.Fatalf("topic = %+v, %v; want paused", topic, err)
		}
		// Processors stop polling within a second of the pause (this one once it says
		// so); a task pushed after that stays READY, and its page says why.
		deadline := time.Now().Add(30 * time.Second)
		for manager.Active() {
			if time.Now().After(deadline) {
				t.Fatal("the processor did not see the pause within 30 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		task := f.push("work", repository.Creation{Identifier: "while-paused"})[0]
		run(t, ctx,
			chromedp.Navigate(fmt.Sprintf("%s/ui/topics/work/tasks/%d", base, task.Sequence)),
			waitFor(`(document.querySelector("#skip-reasons")?.textContent || "").includes("the topic is paused")`),
		)
		time.Sleep(1500 * time.Millisecond)
		if st := f.state("work", task.Sequence); st != repository.Ready {
			t.Fatalf("state after the pause = %s, want READY (polling stopped)", st)
		}
		run(t, ctx,
			chromedp.Navigate(base+"/ui/topics/work"),
			waitFor(`document.body.dataset.ready === "1"`), // the button's handler is bound
			click("#resume"),
			waitFor(textIs("#topic-status", "running")),
			chromedp.Navigate(fmt.Sprintf("%s/ui/topics/work/tasks/%d", base, task.Sequence)),
			waitFor(textIs("#task-state", "SUCCEEDED")),
		)
	})

	t.Run("EveryPageLoads", func(t *testing.T) {
		f.push("idle", repository.Creation{Identifier: "later", Delay: time.Hour, Input: `{"order": 42}`})
		for _, p := range []struct{ name, path, ready string }{
			{"overview", "/", `document.querySelector("#topics a.topic-link") !== null`},
			{"topic", "/ui/topics/work", `document.querySelector("#tasks tbody tr") !== null`},
			{"processes", "/ui/processes", `document.querySelector("#owners tbody tr") !== null`},
		} {
			run(t, ctx, chromedp.Navigate(base+p.path), waitFor(p.ready),
				waitFor(`Number(document.body.dataset.refreshes) >= 2`)) // the chart has points
			if strings.Contains(eval[string](t, ctx, `document.title`), "Not Found") {
				t.Fatalf("%s: not found", p.path)
			}
			screenshot(t, ctx, p.name)
		}
	})

	t.Run("DarkModeOnAPhone", func(t *testing.T) {
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
			t.Fatal(err)
		}
		run(t, ctx, chromedp.EmulateViewport(390, 844),
			chromedp.Navigate(base+"/ui/topics/work"), waitFor(`document.body.dataset.ready === "1"`))
		if bg := eval[string](t, ctx, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(15, 18, 22)" {
			t.Errorf("background in dark mode = %s, want the dark one", bg)
		}
		// Nothing but the tables (which scroll inside their box) is wider than the phone.
		if w := eval[int](t, ctx, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("the page is %dpx wide on a 390px phone", w)
		}
		screenshot(t, ctx, "topic-phone-dark")
	})
}

func TestBrowserLogin(t *testing.T) {
	const token = "browser-token"
	f := setup(t, token)
	ctx := browser(t)
	run(t, ctx,
		chromedp.Navigate(f.srv.URL+"/ui/topics/mail"),
		waitFor(`location.pathname === "/ui/login"`),
	)
	screenshot(t, ctx, "login")
	run(t, ctx,
		typeIn("#token", "not-the-token"),
		click("#login"),
		waitFor(textIs("#login-error", "wrong token")),
		// The form came back after a POST: fill it from a script (chromedp's DOM of the
		// page before may still be in use for a moment).
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector("#token").value = %q; document.querySelector("#login").click()`, token)),
		// ready: app.js has run, and its click handler of the buttons is there
		waitFor(`location.pathname === "/ui/topics/mail" && document.querySelector("#topic-name") !== null && document.body.dataset.ready === "1"`),
	)
	// The session works for the pages' actions too (the REST API under /ui/api/). The
	// button is clicked from a script: a mouse click lands where chromedp measured the
	// button, and under CI's load one was lost (a run at d53206b: the topic stayed
	// running for 30 s); a script's click does not depend on where the button is.
	run(t, ctx,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#pause").click()`),
		waitFor(textIs("#topic-status", "paused")),
	)
	if cookie := eval[string](t, ctx, `document.cookie`); cookie != "" {
		t.Fatalf("scripts can read the cookie %q; want HttpOnly", cookie)
	}
	// The session ends (its cookie gone, as when it expires): the live refresh, sent to
	// the login page, says so and stops, where the page stopped changing without a word.
	if _, err := chromedp.Call(ctx, network.ClearBrowserCookies, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, waitFor(`document.body.dataset.signedOut === "1" && document.querySelector("#toast").textContent.includes("session has ended")`))
}
