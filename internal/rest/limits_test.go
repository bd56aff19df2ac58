package rest_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// TestLimits: a topic's limits are set, cleared and refused over REST, shown with their
// use, and name themselves as what holds a READY task back.
func TestLimits(t *testing.T) {
	t.Run("PatchSetsAndClearsLimitsAndKeepsTheOtherSettings", func(t *testing.T) {
		f := setup(t)
		var topic wire.Topic
		f.call("PATCH", "/topics/mail", `{"concurrency": 3, "key_concurrency": 1, "rate": 50, "rate_period_ms": 1000, "fair": true}`).
			want(t, http.StatusOK, &topic)
		s := topic.Settings
		if s.MaxAttempts != 1 || s.Concurrency == nil || *s.Concurrency != 3 || *s.KeyConcurrency != 1 || *s.Rate != 50 ||
			*s.RatePeriodMs != 1000 || *s.RateBurst != 50 || !s.Fair {
			t.Fatalf("settings after PATCH: %+v", s)
		}
		f.call("PATCH", "/topics/mail", `{"concurrency": null, "rate": null, "rate_burst": null, "fair": false}`).want(t, http.StatusOK, &topic)
		s = topic.Settings
		if s.Concurrency != nil || s.Rate != nil || s.RatePeriodMs != nil || s.RateBurst != nil || s.Fair || s.KeyConcurrency == nil {
			t.Fatalf("settings after clearing: %+v", s)
		}
		stored, err := f.repo.Topic(f.ctx, f.pool, "mail")
		if err != nil || stored.Concurrency != 0 || stored.KeyConcurrency != 1 || stored.Rate != 0 {
			t.Fatalf("stored: %+v, %v", stored.TopicSettings, err)
		}
	})

	t.Run("BadLimitsAreRefusedAndNothingIsWritten", func(t *testing.T) {
		f := setup(t)
		f.call("PATCH", "/topics/mail", `{"concurrency": 2}`).want(t, http.StatusOK, nil)
		version := func() string {
			t.Helper()
			var xmin string
			if err := f.pool.QueryRow(f.ctx, "SELECT xmin::text FROM task_topic WHERE topic = 'mail'").Scan(&xmin); err != nil {
				t.Fatal(err)
			}
			return xmin
		}
		before := version()
		for _, c := range []struct{ body, want string }{
			{`{"concurrency": 0}`, `"concurrency" 0 is below 1`},
			{`{"concurrency": -3, "max_attempts": 9}`, `"concurrency" -3 is below 1`},
			{`{"key_concurrency": 0}`, `"key_concurrency" 0 is below 1`},
			{`{"rate": 5}`, `"rate" needs "rate_period_ms"`},
			{`{"rate": 5, "rate_period_ms": 0}`, `"rate_period_ms" 0 is below 1`},
			{`{"rate": 5, "rate_period_ms": 1000, "rate_burst": 0}`, `"rate_burst" 0 is below 1`},
			{`{"rate_burst": 4, "max_attempts": 9}`, `the topic has no rate limit`},
			{`{"concurrency": "3"}`, `concurrency`},
			{`{"rate": 5, "rate_period_ms": 288230376151712744}`, `"rate_period_ms" 288230376151712744 is out of range`},
			{`{"retention_ms": 9223372036854775807}`, `"retention_ms" 9223372036854775807 is out of range`},
			{`{"retention_ms": -288230376151710744}`, `"retention_ms" -288230376151710744 is out of range`},
			{`{"backoff_base_ms": -1}`, `"backoff_base_ms" -1 is out of range`},
			{`{"rate_period_ms": null}`, `"rate_period_ms" is null`},
			{`{"limit": 3}`, `limit`},
			// null where a setting has no "none" changed nothing and answered 200
			{`{"queue_cap": null, "concurrency": 5}`, `field "queue_cap": got a JSON null, want an integer`},
			{`{"max_attempts": null}`, `field "max_attempts": got a JSON null, want an integer`},
			{`{"fair": null}`, `field "fair": got a JSON null, want true or false`},
			{`{"retention_ms": null}`, `field "retention_ms": got a JSON null`},
			// the repository's checks, said in the API's names
			{`{"max_attempts": 0}`, `"max_attempts" 0 is below 1`},
			{`{"queue_cap": -1}`, `"queue_cap" -1 is negative`},
			{`{"max_attempts": 3, "backoff_base_ms": 5000, "backoff_cap_ms": 1000}`, `"backoff_cap_ms" 1000 is below "backoff_base_ms" 5000`},
			{`{"max_attempts": 3, "backoff_base_ms": 5000000}`, `"backoff_cap_ms" 3600000 is below "backoff_base_ms" 5000000`},
		} {
			f.call("PATCH", "/topics/mail", c.body).wantError(t, http.StatusBadRequest, c.want)
		}
		f.call("PATCH", "/topics/nope", `{"concurrency": 2}`).wantError(t, http.StatusNotFound, "nope")
		stored, err := f.repo.Topic(f.ctx, f.pool, "mail")
		if err != nil || stored.Concurrency != 2 || stored.MaxAttempts != 1 || stored.Rate != 0 {
			t.Fatalf("stored after refusals: %+v, %v", stored.TopicSettings, err)
		}
		if after := version(); after != before {
			t.Errorf("the topic's row was rewritten by refused changes (xmin %s, was %s)", after, before)
		}
	})

	t.Run("PatchingTheRatePeriodKeepsTheBurst", func(t *testing.T) {
		f := setup(t)
		f.call("PATCH", "/topics/mail", `{"rate": 50, "rate_period_ms": 1000, "rate_burst": 10}`).want(t, http.StatusOK, nil)
		var topic wire.Topic
		f.call("PATCH", "/topics/mail", `{"rate_period_ms": 2000}`).want(t, http.StatusOK, &topic)
		if s := topic.Settings; s.Rate == nil || *s.Rate != 50 || *s.RatePeriodMs != 2000 || *s.RateBurst != 10 {
			t.Fatalf("settings after a new period: %+v, want 50 per 2000 ms with the burst of 10 kept", s)
		}
		f.call("PATCH", "/topics/mail", `{"rate_burst": null}`).want(t, http.StatusOK, &topic)
		if s := topic.Settings; s.RateBurst == nil || *s.RateBurst != 50 {
			t.Fatalf("settings after a null burst: %+v, want the default burst of 50", s)
		}
	})

	t.Run("UsageAndWhyATaskWaits", func(t *testing.T) {
		f := setup(t)
		f.call("PATCH", "/topics/mail", `{"concurrency": 1, "key_concurrency": 1}`).want(t, http.StatusOK, nil)
		tasks := f.enqueue(`{"tasks": [{"identifier": "a", "key": "acme"}, {"identifier": "b", "key": "acme"}, {"identifier": "c", "key": "zeta"}]}`)
		if _, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 10); err != nil {
			t.Fatal(err)
		}
		var topic wire.Topic
		f.call("GET", "/topics/mail", "").want(t, http.StatusOK, &topic)
		if u := topic.Usage; u == nil || u.Active != 1 || u.KeysAtLimit != 1 || u.KeysWaiting != 2 {
			t.Fatalf("usage: %+v", topic.Usage)
		}
		var waiting struct {
			Key     *string  `json:"key"`
			State   string   `json:"state"`
			Waiting []string `json:"waiting"`
		}
		f.call("GET", taskURL(tasks[1].Sequence), "").want(t, http.StatusOK, &waiting)
		why := strings.Join(waiting.Waiting, "; ")
		if waiting.Key == nil || *waiting.Key != "acme" || !strings.Contains(why, "concurrency limit: 1 of 1") ||
			!strings.Contains(why, `per-key limit: 1 of 1 tasks of concurrency key "acme"`) {
			t.Fatalf("task b: %+v", waiting)
		}
		f.call("GET", taskURL(tasks[2].Sequence), "").want(t, http.StatusOK, &waiting)
		if why := strings.Join(waiting.Waiting, "; "); strings.Contains(why, "per-key") || !strings.Contains(why, "concurrency limit") {
			t.Fatalf("task c: %+v", waiting)
		}
		// an ACTIVE task says nothing of waiting
		var raw map[string]json.RawMessage
		f.call("GET", taskURL(tasks[0].Sequence), "").want(t, http.StatusOK, &raw)
		if _, ok := raw["waiting"]; ok {
			t.Errorf("an ACTIVE task has waiting: %s", raw["waiting"])
		}
		f.call("PATCH", "/topics/mail", `{"concurrency": null, "key_concurrency": null}`).want(t, http.StatusOK, nil)
		if _, err := f.pool.Exec(f.ctx, `UPDATE task SET not_before = now() + interval '1 hour' WHERE sequence = $1`, tasks[2].Sequence); err != nil {
			t.Fatal(err)
		}
		f.call("GET", taskURL(tasks[2].Sequence), "").want(t, http.StatusOK, &waiting)
		if why := strings.Join(waiting.Waiting, "; "); !strings.Contains(why, "delayed until") || !strings.Contains(why, "1 due READY tasks are ahead") {
			t.Fatalf("task c delayed: %+v", waiting)
		}
		f.call("GET", taskURL(tasks[1].Sequence), "").want(t, http.StatusOK, &waiting)
		if why := strings.Join(waiting.Waiting, "; "); !strings.Contains(why, "nothing") {
			t.Fatalf("task b free: %+v", waiting)
		}
	})

	t.Run("RateLimitNamesTheNextStart", func(t *testing.T) {
		f := setup(t)
		f.call("PATCH", "/topics/mail", `{"rate": 1, "rate_period_ms": 3600000}`).want(t, http.StatusOK, nil)
		tasks := f.enqueue(`{"tasks": [{"identifier": "a"}, {"identifier": "b"}]}`)
		if _, err := f.repo.Poll(f.ctx, f.pool, "mail", repository.FIFO, repository.None, 10); err != nil {
			t.Fatal(err)
		}
		var waiting struct {
			Waiting []string `json:"waiting"`
		}
		f.call("GET", taskURL(tasks[1].Sequence), "").want(t, http.StatusOK, &waiting)
		if why := strings.Join(waiting.Waiting, "; "); !strings.Contains(why, "the rate limit of 1 per 1h0m0s: the next start in") {
			t.Fatalf("waiting: %+v", waiting)
		}
		var topic wire.Topic
		f.call("GET", "/topics/mail", "").want(t, http.StatusOK, &topic)
		if topic.Usage == nil || topic.Usage.Tokens >= 1 || topic.Usage.Tokens < 0 {
			t.Fatalf("usage: %+v", topic.Usage)
		}
	})
}

// taskURL is the URL path of a task of topic mail.
func taskURL(seq int64) string { return "/topics/mail/tasks/" + strconv.FormatInt(seq, 10) }
