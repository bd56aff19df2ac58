package rest_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
)

func TestSchedules(t *testing.T) {
	t.Run("CreateGetListUpdatePauseResumeRunDelete", func(t *testing.T) {
		f := setup(t)
		var sc wire.Schedule
		r := f.call(http.MethodPost, "/schedules", `{"name":"nightly","topic":"mail","spec":"0 3 * * *","time_zone":"Europe/Paris","identifier":"digest-{time}","catch_up":2}`)
		r.want(t, http.StatusCreated, &sc)
		if r.header.Get("Location") != "/schedules/nightly" || sc.Insertion != "SUPERSEDE" || sc.NextFire == nil || sc.TimeZone != "Europe/Paris" || sc.CatchUp != 2 {
			t.Errorf("created %+v, Location %q", sc, r.header.Get("Location"))
		}
		if h := sc.NextFire.In(mustZone(t, "Europe/Paris")).Hour(); h != 3 {
			t.Errorf("next fire %v is not at 03:00 in Paris", sc.NextFire)
		}
		var list struct {
			Schedules []wire.Schedule `json:"schedules"`
		}
		f.call(http.MethodGet, "/schedules", "").want(t, http.StatusOK, &list)
		if len(list.Schedules) != 1 || list.Schedules[0].Name != "nightly" {
			t.Errorf("list %+v", list)
		}
		f.call(http.MethodPatch, "/schedules/nightly", `{"spec":"@every 1h","priority":4,"insertion":"append"}`).want(t, http.StatusOK, &sc)
		if sc.Spec != "@every 1h" || sc.Priority != 4 || sc.Insertion != "APPEND" || *sc.Identifier != "digest-{time}" {
			t.Errorf("updated %+v", sc)
		}
		f.call(http.MethodPost, "/schedules/nightly/pause", "").want(t, http.StatusOK, &sc)
		if !sc.Paused {
			t.Errorf("paused %+v", sc)
		}
		f.call(http.MethodPost, "/schedules/nightly/resume", `{"replay":false}`).want(t, http.StatusOK, &sc)
		if sc.Paused {
			t.Errorf("resumed %+v", sc)
		}
		var run struct {
			Task wire.Task `json:"task"`
		}
		r = f.call(http.MethodPost, "/schedules/nightly/run", "")
		r.want(t, http.StatusCreated, &run)
		if !strings.HasPrefix(run.Task.Identifier, "digest-") || run.Task.Priority != 4 || run.Task.Topic != "mail" ||
			!strings.HasPrefix(r.header.Get("Location"), "/topics/mail/tasks/") {
			t.Errorf("run %+v, Location %q", run.Task, r.header.Get("Location"))
		}
		f.call(http.MethodGet, "/schedules/nightly", "").want(t, http.StatusOK, &sc)
		// an input, and null for none, as a schedule answers it
		f.call(http.MethodPatch, "/schedules/nightly", `{"input":"{\"to\":\"all\"}"}`).want(t, http.StatusOK, &sc)
		if sc.Input == nil || *sc.Input != `{"to":"all"}` {
			t.Errorf("input after PATCH: %v", sc.Input)
		}
		f.call(http.MethodPatch, "/schedules/nightly", `{"input":null,"identifier":null}`).want(t, http.StatusOK, &sc)
		if sc.Input != nil {
			t.Errorf("input after PATCH with null: %q, want none", *sc.Input)
		}
		if sc.Identifier != nil {
			t.Errorf("identifier after PATCH with null: %q, want none (the schedule's name)", *sc.Identifier)
		}
		f.call(http.MethodDelete, "/schedules/nightly", "").want(t, http.StatusOK, nil)
		f.call(http.MethodGet, "/schedules/nightly", "").wantError(t, http.StatusNotFound, "unknown schedule")
		f.call(http.MethodDelete, "/schedules/nightly", "").wantError(t, http.StatusNotFound, "unknown schedule")
	})

	t.Run("BadInputIsRefusedAndNothingWritten", func(t *testing.T) {
		f := setup(t)
		f.call(http.MethodPost, "/schedules", `{"name":"taken","topic":"mail","spec":"@hourly"}`).want(t, http.StatusCreated, nil)
		for _, c := range []struct {
			method, path, body string
			status             int
			says               string
		}{
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"61 * * * *"}`, 400, "spec"},
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"@every -5s"}`, 400, "interval -5s is negative"},
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"@hourly","time_zone":"Mars/Olympus"}`, 400, `unknown time zone "Mars/Olympus"`},
			{"POST", "/schedules", `{"name":"a","topic":"nope","spec":"@hourly"}`, 404, `"nope"`},
			{"POST", "/schedules", `{"name":"taken","topic":"mail","spec":"@daily"}`, 409, "schedule exists"},
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"@hourly","catch_up":-1}`, 400, "catch-up -1 is negative"},
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"@hourly","insertion":"sideways"}`, 400, "insertion"},
			{"POST", "/schedules", `{"topic":"mail","spec":"@hourly"}`, 400, `"name" is required`},
			{"POST", "/schedules", `{"name":"a\u001b[2J","topic":"mail","spec":"@hourly"}`, 400, "schedule name has a control character (U+001B)"},
			{"POST", "/schedules", `{"name":"a","topic":"mail"}`, 400, `"spec" are required`},
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"@hourly","cron":"x"}`, 400, `unknown field "cron"`},
			{"PATCH", "/schedules/taken", `{"spec":"* * *"}`, 400, "spec"},
			{"PATCH", "/schedules/taken", `{"topic":"nope"}`, 404, `"nope"`},
			{"PATCH", "/schedules/taken", `{"name":"other"}`, 400, "cannot be renamed"},
			// the good spec is not written either
			{"PATCH", "/schedules/taken", `{"spec":"0 7 * * *","insertion":"sideways"}`, 400, "insertion"},
			{"PATCH", "/schedules/ghost", `{"priority":1}`, 404, "unknown schedule"},
			{"POST", "/schedules/ghost/pause", "", 404, "unknown schedule"},
			// null where a field has no "none" changed nothing and answered 200
			{"PATCH", "/schedules/taken", `{"spec":null}`, 400, `field "spec": got a JSON null, want a string`},
			{"PATCH", "/schedules/taken", `{"paused":null,"priority":2}`, 400, `field "paused": got a JSON null`},
			{"PATCH", "/schedules/taken", `{"time_zone":null}`, 400, `field "time_zone": got a JSON null`},
			{"PATCH", "/schedules/taken", `{"catch_up":null}`, 400, `field "catch_up": got a JSON null`},
			// an empty zone (a variable come out empty) was taken as UTC, and moved a
			// schedule to it
			{"POST", "/schedules", `{"name":"a","topic":"mail","spec":"@hourly","time_zone":""}`, 400, `"time_zone" is empty`},
			{"PATCH", "/schedules/taken", `{"time_zone":"","priority":3}`, 400, `"time_zone" is empty`},
		} {
			f.call(c.method, c.path, c.body).wantError(t, c.status, c.says)
		}
		// a listing refuses what it does not know: ?topic= would not filter
		f.call(http.MethodGet, "/schedules?topic=mail", "").wantError(t, http.StatusBadRequest, `unknown query parameter "topic": GET /schedules takes q, after or limit`)
		f.call(http.MethodGet, "/schedules?after=", "").wantError(t, http.StatusBadRequest, `query parameter "after" is empty`)
		f.call(http.MethodGet, "/schedules?limit=0", "").wantError(t, http.StatusBadRequest, `limit "0" is out of range`)
		var sc wire.Schedule
		f.call(http.MethodGet, "/schedules/taken", "").want(t, http.StatusOK, &sc)
		if sc.Spec != "@hourly" || sc.Topic != "mail" || !sc.Updated.Equal(sc.Created) {
			t.Errorf("after the refusals %+v", sc)
		}
		var list struct {
			Schedules []wire.Schedule `json:"schedules"`
		}
		f.call(http.MethodGet, "/schedules", "").want(t, http.StatusOK, &list)
		if len(list.Schedules) != 1 {
			t.Errorf("schedules after the refusals: %+v", list.Schedules)
		}
	})
}

// A schedule stored in a leap-second zone before such zones were refused (right/…): a
// PATCH that gives that zone again is refused as at creation, and writes nothing of the
// other fields it gives (the refusal came after UpdateSchedule, whose own check keeps a
// stored zone, had written them); one that leaves the zone out changes the schedule.
func TestScheduleLegacyZonePatch(t *testing.T) {
	f := setup(t)
	f.call(http.MethodPost, "/schedules", `{"name":"legacy","topic":"mail","spec":"@hourly","priority":1}`).want(t, http.StatusCreated, nil)
	// written past task_schedule_check (migration 000041), which refuses the zone now
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SET LOCAL session_replication_role = replica", "UPDATE task_schedule SET time_zone = 'right/UTC' WHERE name = 'legacy'"} {
		if _, err := tx.Exec(f.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	var before, after wire.Schedule
	f.call(http.MethodGet, "/schedules/legacy", "").want(t, http.StatusOK, &before)
	f.call(http.MethodPatch, "/schedules/legacy", `{"time_zone":"right/UTC","spec":"@daily","priority":7}`).
		wantError(t, http.StatusBadRequest, `time zone "right/UTC" counts leap seconds`)
	f.call(http.MethodGet, "/schedules/legacy", "").want(t, http.StatusOK, &after)
	if after.Spec != "@hourly" || after.Priority != 1 || !after.Updated.Equal(before.Updated) || !after.NextFire.Equal(*before.NextFire) {
		t.Errorf("after a refused PATCH %+v, want it unchanged %+v", after, before)
	}
	f.call(http.MethodPatch, "/schedules/legacy", `{"priority":7}`).want(t, http.StatusOK, &after)
	if after.Priority != 7 || after.TimeZone != "right/UTC" {
		t.Errorf("after a PATCH of the priority %+v, want priority 7 in right/UTC", after)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestListSchedulesPages: GET /schedules answers a page by name with the next page's
// position, searched by name or topic.
func TestListSchedulesPages(t *testing.T) {
	f := setup(t)
	for _, name := range []string{"a-digest", "b-digest", "c-report"} {
		f.call(http.MethodPost, "/schedules", `{"name":"`+name+`","topic":"mail","spec":"@hourly"}`).want(t, http.StatusCreated, nil)
	}
	type page struct {
		Schedules []wire.Schedule `json:"schedules"`
		Next      *string         `json:"next"`
	}
	names := func(p page) []string {
		var out []string
		for _, sc := range p.Schedules {
			out = append(out, sc.Name)
		}
		return out
	}
	var first, second, found page
	f.call(http.MethodGet, "/schedules?limit=2", "").want(t, http.StatusOK, &first)
	if got := names(first); !slices.Equal(got, []string{"a-digest", "b-digest"}) || first.Next == nil || *first.Next != "b-digest" {
		t.Fatalf("first page %v, next %v", got, first.Next)
	}
	f.call(http.MethodGet, "/schedules?limit=2&after="+*first.Next, "").want(t, http.StatusOK, &second)
	if got := names(second); !slices.Equal(got, []string{"c-report"}) || second.Next != nil {
		t.Fatalf("second page %v, next %v", got, second.Next)
	}
	f.call(http.MethodGet, "/schedules?q=DIGEST", "").want(t, http.StatusOK, &found)
	if got := names(found); !slices.Equal(got, []string{"a-digest", "b-digest"}) {
		t.Fatalf("search %v", got)
	}
}

// A schedule whose identifier is too long once {time} is replaced, stored before such
// identifiers were refused (written by hand before migration 000044): a PATCH that
// leaves the identifier out changes the schedule, one that gives a longer identifier is
// refused.
func TestScheduleLegacyIdentifierPatch(t *testing.T) {
	f := setup(t)
	f.call(http.MethodPost, "/schedules", `{"name":"legacy","topic":"mail","spec":"@hourly","identifier":"l-{time}"}`).want(t, http.StatusCreated, nil)
	long := strings.Repeat("x", 481) + "{time}" // 501 characters once replaced
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SET LOCAL session_replication_role = replica", "UPDATE task_schedule SET identifier = '" + long + "' WHERE name = 'legacy'"} {
		if _, err := tx.Exec(f.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	var after wire.Schedule
	f.call(http.MethodPatch, "/schedules/legacy", `{"priority":7}`).want(t, http.StatusOK, &after)
	if after.Priority != 7 || after.Identifier == nil || *after.Identifier != long {
		t.Errorf("after a PATCH of the priority %+v, want priority 7 with the identifier kept", after)
	}
	f.call(http.MethodPatch, "/schedules/legacy", `{"identifier":"`+long+`","priority":8}`).want(t, http.StatusOK, &after) // the same, given again
	f.call(http.MethodPatch, "/schedules/legacy", `{"identifier":"`+long+`x"}`).
		wantError(t, http.StatusBadRequest, "identifier is 502 characters long")
}

// TestSchedulePatchUnderRepeatableRead: a PATCH of a schedule that another transaction
// changes meanwhile (a processor firing it) waits for it and then changes the schedule as
// it is, whatever the database's default isolation: its transaction began at that
// default, and under REPEATABLE READ the wait ended in a serialization failure.
func TestSchedulePatchUnderRepeatableRead(t *testing.T) {
	f := setup(t)
	f.call(http.MethodPost, "/schedules", `{"name":"nightly","topic":"mail","spec":"@hourly"}`).want(t, http.StatusCreated, nil)
	if _, err := f.pool.Exec(f.ctx, "DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read'); END$$"); err != nil {
		t.Fatal(err)
	}
	f.pool.Reset() // the next connections take the setting
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	if _, err := tx.Exec(f.ctx, "UPDATE task_schedule SET priority = 5 WHERE name = 'nightly'"); err != nil {
		t.Fatal(err)
	}
	done := make(chan response, 1)
	go func() { done <- f.call(http.MethodPatch, "/schedules/nightly", `{"catch_up":3}`) }()
	deadline := time.Now().Add(30 * time.Second)
	for waiting := false; !waiting; {
		if time.Now().After(deadline) {
			t.Fatal("the PATCH did not wait for the schedule's row")
		}
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	var sc wire.Schedule
	(<-done).want(t, http.StatusOK, &sc)
	if sc.CatchUp != 3 || sc.Priority != 5 {
		t.Errorf("after the PATCH %+v, want catch_up 3 and the priority the other transaction set, 5", sc)
	}
}
