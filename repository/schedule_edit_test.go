package repository_test

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// sqlNow returns the database's clock, truncated to the second.
func (s *scheduleFixture) sqlNow() time.Time {
	s.t.Helper()
	var now time.Time
	if err := s.pool.QueryRow(s.ctx, "SELECT date_trunc('second', clock_timestamp())").Scan(&now); err != nil {
		s.t.Fatal(err)
	}
	return now.UTC()
}

// exec runs statements on the pool and fails the test on error.
func (s *scheduleFixture) exec(queries ...string) {
	s.t.Helper()
	for _, q := range queries {
		if _, err := s.pool.Exec(s.ctx, q); err != nil {
			s.t.Fatalf("%s: %v", q, err)
		}
	}
}

// times reads a schedule's next_fire and fire_from (zero for NULL).
func (s *scheduleFixture) times(name string) (next, from time.Time) {
	s.t.Helper()
	var n, f *time.Time
	if err := s.pool.QueryRow(s.ctx, "SELECT next_fire, fire_from FROM task_schedule WHERE name = $1", name).Scan(&n, &f); err != nil {
		s.t.Fatal(err)
	}
	if n != nil {
		next = n.UTC()
	}
	if f != nil {
		from = f.UTC()
	}
	return next, from
}

// TestScheduleEditedInSQL: a schedule changed by hand with UPDATE task_schedule (as the
// PT016 hint and docs/sql.md suggest) fires as one changed through Go: task_schedule_check
// (migration 000041) refuses a bad spec, zone or name, and marks the next fire time for
// recomputing from now when the spec, a cron spec's zone or the pause changes, or
// next_fire is cleared. The firer's clock is set from the database's, whose now() the
// trigger reads.
func TestScheduleEditedInSQL(t *testing.T) {
	t.Run("ANewSpecFiresFromNowNotAtTheOldTime", func(t *testing.T) {
		s := setupSchedules(t)
		s.clock.set(s.sqlNow())
		s.create("job", appendEach("@daily"))
		s.exec("UPDATE task_schedule SET spec = '@every 2s' WHERE name = 'job'")
		next, from := s.times("job")
		if !next.IsZero() || from.IsZero() {
			t.Fatalf("after the new spec: next_fire %v, fire_from %v; want NULL and now", next, from)
		}
		first := from.Truncate(time.Second).Add(2 * time.Second)
		s.clock.set(first.Add(-time.Second))
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("fired before the new spec's first time: %+v", fires)
		}
		if next, _ := s.times("job"); !next.Equal(first) {
			t.Errorf("next fire %v, want %v: 2s after the change", next, first)
		}
		s.clock.set(first)
		if got, want := stampsOf(s.fire()), stamps(first); !slices.Equal(got, want) {
			t.Errorf("fired %v, want %v", got, want)
		}
	})

	// A process of the release before 000041 changes a spec and writes the next_fire it
	// computed in the same statement: the trigger keeps it (clearing it made that
	// release's firers compute it from the schedule's creation and push at once).
	t.Run("ANextFireWrittenWithTheSpecIsKept", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("job", appendEach("@daily"))
		s.exec("UPDATE task_schedule SET spec = '0 9 * * *', next_fire = '2030-01-01 09:00:00Z' WHERE name = 'job'")
		next, from := s.times("job")
		if want := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC); !next.Equal(want) || from.IsZero() {
			t.Errorf("after a new spec with its next_fire: next_fire %v, fire_from %v; want %v and set", next, from, want)
		}
	})

	// A spec written with white space around it is stored trimmed, so that writing it
	// again untrimmed changes nothing (Go took the stored spec for a new one).
	t.Run("ASpecWrittenByHandIsTrimmed", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("job", appendEach("@daily"))
		s.exec("UPDATE task_schedule SET spec = E' 0 9 * * *\\n' WHERE name = 'job'")
		var spec string
		if err := s.pool.QueryRow(s.ctx, "SELECT spec FROM task_schedule WHERE name = 'job'").Scan(&spec); err != nil || spec != "0 9 * * *" {
			t.Fatalf("spec stored %q (%v), want it trimmed", spec, err)
		}
		s.exec("UPDATE task_schedule SET next_fire = '2030-01-01 09:00:00Z', fire_from = NULL WHERE name = 'job'",
			"UPDATE task_schedule SET spec = ' 0 9 * * * ' WHERE name = 'job'")
		if next, from := s.times("job"); !next.Equal(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)) || !from.IsZero() {
			t.Errorf("the same spec written again untrimmed: next_fire %v, fire_from %v; want both kept", next, from)
		}
	})

	// The fire times restart from the statement that edits, not from the start of its
	// transaction: a resume committed late does not replay the time since BEGIN.
	t.Run("AnEditCountsFromItsStatement", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", appendEach("@every 10s"))
		s.exec("UPDATE task_schedule SET paused = true WHERE name = 'tick'")
		tx, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(s.ctx)
		var began time.Time
		if err := tx.QueryRow(s.ctx, "SELECT now() FROM pg_sleep(0.3)").Scan(&began); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(s.ctx, "UPDATE task_schedule SET paused = false WHERE name = 'tick'"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(s.ctx); err != nil {
			t.Fatal(err)
		}
		if _, from := s.times("tick"); from.Sub(began) < 300*time.Millisecond {
			t.Errorf("fire_from %v after a resume 0.3 s into a transaction begun at %v: want the statement's time", from, began.UTC())
		}
	})

	t.Run("AResumeDoesNotReplayAndKeepsThePhase", func(t *testing.T) {
		s := setupSchedules(t)
		now := s.sqlNow()
		s.clock.set(now.Add(-time.Hour))
		s.create("tick", appendEach("@every 10s")) // grid: now - 1h + 10s·k
		s.exec("UPDATE task_schedule SET paused = true WHERE name = 'tick'",
			"UPDATE task_schedule SET paused = false WHERE name = 'tick'")
		_, from := s.times("tick")
		if from.Before(now) {
			t.Fatalf("fire_from %v after the resume, want the database's now (%v or later)", from, now)
		}
		s.clock.set(from)
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("the resume replayed %+v", fires)
		}
		grid := now.Add(-time.Hour)
		want := grid.Add((from.Sub(grid)/(10*time.Second) + 1) * 10 * time.Second)
		if next, _ := s.times("tick"); !next.Equal(want) {
			t.Errorf("next fire after the resume %v, want %v: the next point of the grid", next, want)
		}
		s.clock.set(want)
		if got := stampsOf(s.fire()); !slices.Equal(got, stamps(want)) {
			t.Errorf("fired %v, want %v", got, stamps(want))
		}
	})

	t.Run("ReplayIsAskedByClearingFireFrom", func(t *testing.T) {
		s := setupSchedules(t)
		now := s.sqlNow()
		s.clock.set(now.Add(-time.Minute))
		s.create("tick", appendEach("@every 10s"))
		s.exec("UPDATE task_schedule SET paused = true WHERE name = 'tick'",
			"UPDATE task_schedule SET paused = false WHERE name = 'tick'",
			"UPDATE task_schedule SET fire_from = NULL WHERE name = 'tick'")
		s.clock.set(now)
		if fires := s.fire(); len(fires) != 1 || !fires[0].Times[0].Equal(now) {
			t.Errorf("replay fired %+v, want the latest missed time %v", fires, now)
		}
	})

	t.Run("NullNextFireIsRecomputedFromNowNotFromCreation", func(t *testing.T) {
		s := setupSchedules(t)
		now := s.sqlNow()
		s.clock.set(now.Add(-time.Hour))
		s.create("tick", appendEach("@every 10m"))
		s.exec("UPDATE task_schedule SET next_fire = NULL WHERE name = 'tick'")
		_, from := s.times("tick")
		s.clock.set(now.Add(time.Second))
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("a cleared next_fire replayed from the creation: %+v", fires)
		}
		if next, _ := s.times("tick"); !next.Equal(from.Truncate(time.Second).Add(10 * time.Minute)) {
			t.Errorf("next fire %v, want 10m after %v", next, from)
		}
	})

	t.Run("AZoneChangeRestartsACronSpecNotAnEverySpec", func(t *testing.T) {
		s := setupSchedules(t)
		s.clock.set(s.sqlNow())
		s.create("cron", repository.ScheduleSettings{Spec: "0 8 * * *"})
		s.create("every", repository.ScheduleSettings{Spec: "@every 1h"})
		everyNext, _ := s.times("every")
		s.exec("UPDATE task_schedule SET time_zone = 'Asia/Tokyo' WHERE name IN ('cron', 'every')")
		if next, _ := s.times("every"); !next.Equal(everyNext) {
			t.Errorf("@every next fire %v after a zone change, want %v kept", next, everyNext)
		}
		if next, from := s.times("cron"); !next.IsZero() || from.IsZero() {
			t.Errorf("cron after a zone change: next_fire %v, fire_from %v; want NULL and now", next, from)
		}
		s.fire()
		next, _ := s.times("cron")
		if local := next.In(mustZone(t, "Asia/Tokyo")); local.Hour() != 8 || local.Minute() != 0 {
			t.Errorf("cron next fire %v, want 08:00 in Asia/Tokyo", local)
		}
	})

	t.Run("BadEditsAreRefusedAndNothingWritten", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("job", repository.ScheduleSettings{Spec: "@hourly"})
		before := s.times
		next, _ := before("job")
		for _, c := range []struct{ statement, says string }{
			{"UPDATE task_schedule SET spec = '61 * * * *' WHERE name = 'job'", "minute 61 is out of range 0-59"},
			{"UPDATE task_schedule SET spec = '0 0 30 2 *' WHERE name = 'job'", "never fires"},
			{"UPDATE task_schedule SET spec = '@every -5s' WHERE name = 'job'", "interval -5s is negative"},
			{"UPDATE task_schedule SET time_zone = 'europe/paris' WHERE name = 'job'", "time_zone: unknown time zone 'europe/paris'"},
			{"UPDATE task_schedule SET time_zone = 'posix/Europe/Paris' WHERE name = 'job'", "give 'Europe/Paris'"},
			{"UPDATE task_schedule SET name = '..' WHERE name = 'job'", "schedule name '..' is not allowed"},
			{"INSERT INTO task_schedule (name, topic, spec) VALUES ('x', 'topic', '* * *')", "has 3 fields"},
			{"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ('x', 'topic', '@hourly', 'Mars/Olympus')", "unknown time zone 'Mars/Olympus'"},
			{"INSERT INTO task_schedule (name, topic, spec) VALUES ('.', 'topic', '@hourly')", "schedule name '.' is not allowed"},
			{"SELECT task_schedule('..', 'topic', '@hourly')", "schedule name '..' is not allowed"},
			{"UPDATE task_schedule SET name = E'job\\n2' WHERE name = 'job'", "has a control character (U+000A)"},
			{"INSERT INTO task_schedule (name, topic, spec) VALUES (E'a\\tb', 'topic', '@hourly')", "has a control character (U+0009)"},
			{"SELECT task_schedule(E'a\\x1b[2J', 'topic', '@hourly')", "has a control character (U+001B)"},
		} {
			_, err := s.pool.Exec(s.ctx, c.statement)
			if repository.SQLState(err) != "22023" || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v, want SQLSTATE 22023 saying %q", c.statement, err, c.says)
			}
		}
		got := textRowsOf(t, s, "SELECT name || ' ' || spec || ' ' || time_zone FROM task_schedule ORDER BY name")
		if !slices.Equal(got, []string{"job @hourly UTC"}) {
			t.Errorf("schedules after the refusals: %v", got)
		}
		if n, _ := before("job"); !n.Equal(next) {
			t.Errorf("next fire %v after the refusals, want %v", n, next)
		}
	})
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func textRowsOf(t *testing.T, s *scheduleFixture, query string) []string {
	t.Helper()
	rows, err := s.pool.Query(s.ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestScheduleEveryKeepsItsPhase: an @every schedule fires on its grid, the time it was
// created (or its spec last changed) plus whole periods: a resume without replay moves
// its next fire time to the next point of the grid after now, not to now plus a period
// (a weekly fire never skipped moved by up to a week), and a change of its zone alone
// does not move it.
func TestScheduleEveryKeepsItsPhase(t *testing.T) {
	t.Run("AResumeGoesOnTheGrid", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("hourly", appendEach("@every 1h"))
		s.clock.advance(10 * time.Minute)
		if _, err := s.sched.PauseSchedule(s.ctx, s.pool, "hourly"); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(3*time.Hour + 10*time.Minute)
		sc, err := s.sched.ResumeSchedule(s.ctx, s.pool, "hourly", false)
		if err != nil || !sc.NextFire.Equal(start.Add(4*time.Hour)) {
			t.Fatalf("resume at %v: next fire %v (%v), want %v", s.clock.now(), sc.NextFire, err, start.Add(4*time.Hour))
		}
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("the resume replayed %+v", fires)
		}
	})

	t.Run("AWeeklyFireNeverSkippedDoesNotMove", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("weekly", appendEach("@every 168h"))
		s.clock.advance(time.Hour)
		if _, err := s.sched.PauseSchedule(s.ctx, s.pool, "weekly"); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(time.Minute)
		sc, err := s.sched.ResumeSchedule(s.ctx, s.pool, "weekly", false)
		if err != nil || !sc.NextFire.Equal(start.Add(168*time.Hour)) {
			t.Errorf("resumed a minute later: next fire %v (%v), want %v kept", sc.NextFire, err, start.Add(168*time.Hour))
		}
	})

	t.Run("AZoneChangeDoesNotMoveIt", func(t *testing.T) {
		s := setupSchedules(t)
		created := s.create("weekly", appendEach("@every 168h"))
		s.clock.advance(time.Hour)
		sc, err := s.sched.UpdateSchedule(s.ctx, s.pool, "weekly", func(c *repository.ScheduleSettings) { c.TimeZone = "Europe/Paris" })
		if err != nil || !sc.NextFire.Equal(created.NextFire) || sc.TimeZone != "Europe/Paris" {
			t.Errorf("zone changed: %+v, %v; want next fire %v kept", sc, err, created.NextFire)
		}
	})

	// A spec stored untrimmed (by hand before 000041, or by 000016's task_schedule,
	// which trimmed spaces only) is not a new spec when another setting changes: it was
	// written trimmed, and the trigger restarted the fire times, the phase lost.
	t.Run("AnEditOfASpecStoredUntrimmedKeepsIt", func(t *testing.T) {
		s := setupSchedules(t)
		created := s.create("hourly", appendEach("@every 1h"))
		conn, err := s.pool.Acquire(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"BEGIN", "SET LOCAL session_replication_role = replica",
			`UPDATE task_schedule SET spec = E'@every 1h\n' WHERE name = 'hourly'`, "COMMIT"} {
			if _, err := conn.Exec(s.ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		conn.Release()
		s.clock.advance(10 * time.Minute)
		sc, err := s.sched.UpdateSchedule(s.ctx, s.pool, "hourly", func(c *repository.ScheduleSettings) { c.Priority = 1 })
		if err != nil || !sc.NextFire.Equal(created.NextFire) || sc.Priority != 1 {
			t.Errorf("priority changed: %+v, %v; want next fire %v kept", sc, err, created.NextFire)
		}
		sc, err = s.sched.UpdateSchedule(s.ctx, s.pool, "hourly", func(c *repository.ScheduleSettings) { c.Spec = " @every 1h " })
		if err != nil || !sc.NextFire.Equal(created.NextFire) {
			t.Errorf("the same spec given again: %+v, %v; want next fire %v kept", sc, err, created.NextFire)
		}
	})

	t.Run("ACronZoneChangeStillRestarts", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("daily", repository.ScheduleSettings{Spec: "0 8 * * *"})
		sc, err := s.sched.UpdateSchedule(s.ctx, s.pool, "daily", func(c *repository.ScheduleSettings) { c.TimeZone = "Asia/Tokyo" })
		// start is 21:00 in Tokyo: the next 08:00 there is 23:00 UTC
		if want := start.Add(11 * time.Hour); err != nil || !sc.NextFire.Equal(want) {
			t.Errorf("zone changed: next fire %v (%v), want %v", sc.NextFire, err, want)
		}
	})
}

// TestScheduleNameDotSegments: "." and ".." are refused as new schedule names, by Go
// and by SQL: the REST API's /schedules/{name} would resolve them to other resources. A
// schedule of either name stored before stays usable from Go.
func TestScheduleNameDotSegments(t *testing.T) {
	s := setupSchedules(t)
	for _, name := range []string{".", ".."} {
		if err := repository.ValidateNewScheduleName(name); !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "schedule name") {
			t.Errorf("ValidateNewScheduleName(%q) = %v, want ErrInvalid naming the schedule name", name, err)
		}
		if err := repository.ValidateScheduleName(name); err != nil {
			t.Errorf("ValidateScheduleName(%q) (a schedule stored before) = %v, want nil", name, err)
		}
		if _, err := s.sched.CreateSchedule(s.ctx, s.pool, name, repository.ScheduleSettings{Topic: s.topic, Spec: "@hourly"}); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("CreateSchedule(%q) = %v, want ErrInvalid", name, err)
		}
	}
	for _, name := range []string{"...", ".hidden", "a.b"} {
		if err := repository.ValidateScheduleName(name); err != nil {
			t.Errorf("ValidateScheduleName(%q) = %v, want nil", name, err)
		}
	}
}

// TestScheduleZoneTheDatabaseLists: a time zone is checked against the zones the
// database lists (pg_timezone_names), not only against what Go loads: on a
// case-insensitive file system (macOS) Go loads europe/paris, which the database does not
// list and processors on Linux do not load, so the schedule never fired. The test runs
// itself again with ZONEINFO set to a directory holding europe/paris, so that Go loads it
// here too: CreateSchedule and UpdateSchedule refuse it with ErrInvalid naming the zone,
// write nothing, and leave the caller's transaction usable.
func TestScheduleZoneTheDatabaseLists(t *testing.T) {
	if os.Getenv("PGTASK_TEST_ZONEINFO_CHILD") == "" {
		t.Parallel()
		paris, err := zoneFile("Europe/Paris")
		if err != nil {
			t.Fatalf("no zone file to copy: %v (install the system's time zone data: apt-get install tzdata)", err)
		}
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "europe"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "europe", "paris"), paris, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestScheduleZoneTheDatabaseLists$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "ZONEINFO="+dir, "PGTASK_TEST_ZONEINFO_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestScheduleZoneTheDatabaseLists") {
			t.Fatalf("the test with ZONEINFO=%s: %v\n%s", dir, err, out)
		}
		return
	}
	if _, err := time.LoadLocation("europe/paris"); err != nil {
		t.Fatalf("Go does not load europe/paris from ZONEINFO: %v", err)
	}
	s := setupSchedules(t)
	tx, err := s.pool.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(s.ctx) }()
	_, err = s.sched.CreateSchedule(s.ctx, tx, "paris", repository.ScheduleSettings{Topic: s.topic, Spec: "0 8 * * *", TimeZone: "europe/paris"})
	if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "unknown time zone 'europe/paris'") {
		t.Errorf("create in europe/paris: %v, want ErrInvalid naming the time zone", err)
	}
	if _, err := s.sched.CreateSchedule(s.ctx, tx, "utc", repository.ScheduleSettings{Topic: s.topic, Spec: "0 8 * * *"}); err != nil {
		t.Fatalf("the caller's transaction after the refusal: %v", err)
	}
	_, err = s.sched.UpdateSchedule(s.ctx, tx, "utc", func(c *repository.ScheduleSettings) { c.TimeZone = "europe/paris"; c.Priority = 5 })
	if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "unknown time zone 'europe/paris'") {
		t.Errorf("update to europe/paris: %v, want ErrInvalid naming the time zone", err)
	}
	sc, err := s.sched.Schedule(s.ctx, tx, "utc")
	if err != nil || sc.TimeZone != "UTC" || sc.Priority != 0 {
		t.Errorf("after the refused update: %+v, %v; want it unchanged", sc, err)
	}
	if _, err := s.sched.Schedule(s.ctx, tx, "paris"); !errors.Is(err, repository.ErrUnknownSchedule) {
		t.Errorf("the refused schedule: %v, want ErrUnknownSchedule", err)
	}
}

// zoneFile reads the zone file of name from the system's time zone data, else from the
// copy that comes with Go ($GOROOT/lib/time/zoneinfo.zip).
func zoneFile(name string) ([]byte, error) {
	data, sysErr := os.ReadFile(filepath.Join("/usr/share/zoneinfo", name))
	if sysErr == nil {
		return data, nil
	}
	goroot := os.Getenv("GOROOT")
	if goroot == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return nil, errors.Join(sysErr, fmt.Errorf("go env GOROOT: %w", err))
		}
		goroot = strings.TrimSpace(string(out))
	}
	zipped := filepath.Join(goroot, "lib", "time", "zoneinfo.zip")
	r, err := zip.OpenReader(zipped)
	if err != nil {
		return nil, errors.Join(sysErr, err)
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		return nil, errors.Join(sysErr, fmt.Errorf("%s: %w", zipped, err))
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestScheduleEditLateInATransaction: an edit from Go made late in a long transaction
// starts its fire times from the edit, as one made in SQL does (task_schedule_check):
// it went by the transaction's start, so that a time gone by before the edit was fired
// at once.
func TestScheduleEditLateInATransaction(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.CreateSchedule(f.ctx, f.pool, "tick", repository.ScheduleSettings{Topic: f.topic, Spec: "@every 1h"}); err != nil {
		t.Fatal(err)
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, "SELECT pg_sleep(2.5)"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.UpdateSchedule(f.ctx, tx, "tick", func(s *repository.ScheduleSettings) { s.Spec = "@every 2s" }); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	fires, err := f.repo.FireSchedules(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 0 {
		t.Errorf("right after the edit, a round fired %+v: a time before the edit", fires)
	}
}

// TestScheduleFiredIdentifierWrittenByHand: a schedule whose tasks' identifier is too
// long once each {time} is replaced by the fire time (20 characters) never fires; an
// INSERT or UPDATE of task_schedule by hand is refused as task_schedule() and Go refuse
// it (migration 000044), and so is a name standing for the identifier (no identifier
// given) that is too long so replaced, from SQL and from Go. A row stored before the
// check keeps taking other changes. Nothing refused is written.
func TestScheduleFiredIdentifierWrittenByHand(t *testing.T) {
	s := setupSchedules(t)
	long := strings.Repeat("x", 481) + "{time}" // 501 once replaced
	s.create("job", repository.ScheduleSettings{Spec: "@hourly", Identifier: "job-{time}"})
	rows := func() []string {
		t.Helper()
		return textRowsOf(t, s, "SELECT name || ' ' || coalesce(identifier, '-') || ' ' || priority FROM task_schedule ORDER BY name")
	}
	before := rows()
	refused := func(what, want string, err error) {
		t.Helper()
		if repository.SQLState(err) != "22023" || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want 22023 saying %q", what, err, want)
		}
	}
	_, err := s.pool.Exec(s.ctx, "INSERT INTO task_schedule (name, topic, spec, time_zone, identifier) VALUES ('hand', $1, '@hourly', 'UTC', $2)", s.topic, long)
	refused("INSERT of an identifier too long once expanded", "identifier is 501 characters long once {time} is replaced", err)
	_, err = s.pool.Exec(s.ctx, "UPDATE task_schedule SET identifier = $1 WHERE name = 'job'", long)
	refused("UPDATE of an identifier too long once expanded", "identifier is 501 characters long once {time} is replaced", err)

	// a name of 246 characters, 41 {time}: 820 once replaced
	name := strings.Repeat("{time}", 41)
	_, err = s.pool.Exec(s.ctx, "SELECT task_schedule($1, $2, '@hourly')", name, s.topic)
	refused("task_schedule() of a long name without an identifier", "the name, the identifier of its tasks, is 820 characters long", err)
	_, err = s.pool.Exec(s.ctx, "INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ($1, $2, '@hourly', 'UTC')", name, s.topic)
	refused("INSERT of a long name without an identifier", "the name, the identifier of its tasks, is 820 characters long", err)
	if _, err := s.sched.CreateSchedule(s.ctx, s.pool, name, repository.ScheduleSettings{Topic: s.topic, Spec: "@hourly"}); !errors.Is(err, repository.ErrInvalid) ||
		!strings.Contains(err.Error(), "schedule name, the identifier of its tasks when none is given, is 820 characters long") {
		t.Errorf("CreateSchedule of a long name without an identifier: %v, want ErrInvalid naming the schedule name and 820", err)
	}
	if got := rows(); !slices.Equal(got, before) {
		t.Errorf("schedules after the refusals: %v, want %v", got, before)
	}

	// with an identifier the name is fine; taking the identifier away is refused
	s.create(name, repository.ScheduleSettings{Spec: "@hourly", Identifier: "named"})
	if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, name, func(c *repository.ScheduleSettings) { c.Identifier = "" }); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("UpdateSchedule clearing the identifier of a long name: %v, want ErrInvalid", err)
	}
	_, err = s.pool.Exec(s.ctx, "UPDATE task_schedule SET identifier = NULL WHERE name = $1", name)
	refused("UPDATE clearing the identifier of a long name", "the name, the identifier of its tasks, is 820 characters long", err)
	if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, name, func(c *repository.ScheduleSettings) { c.Priority = 3 }); err != nil {
		t.Errorf("UpdateSchedule of the priority of a long name with an identifier: %v", err)
	}

	// stored before the check (past the trigger): other changes are taken
	conn, err := s.pool.Acquire(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", "SET LOCAL session_replication_role = replica",
		"UPDATE task_schedule SET identifier = '" + long + "' WHERE name = 'job'", "COMMIT"} {
		if _, err := conn.Exec(s.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Release()
	s.exec("UPDATE task_schedule SET priority = 5, paused = true WHERE name = 'job'")
	if got := textRowsOf(t, s, "SELECT priority || ' ' || paused FROM task_schedule WHERE name = 'job'"); !slices.Equal(got, []string{"5 true"}) {
		t.Errorf("legacy row after a change of its priority and pause: %v, want 5 true", got)
	}
	// and through Go: its identifier kept is not checked again; a new one is
	if _, err := s.sched.ResumeSchedule(s.ctx, s.pool, "job", false); err != nil {
		t.Errorf("ResumeSchedule of the legacy row: %v", err)
	}
	if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, "job", func(c *repository.ScheduleSettings) { c.Priority = 6 }); err != nil {
		t.Errorf("UpdateSchedule of the legacy row's priority: %v", err)
	}
	if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, "job", func(c *repository.ScheduleSettings) { c.Identifier += "x" }); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("UpdateSchedule of the legacy row to a longer identifier: %v, want ErrInvalid", err)
	}
}

// TestScheduleSpecStoredBeforeTheCheck: a spec stored before migration 000029 refused
// it ("*-5", which the cron library reads as *) goes on firing as it did and takes
// other changes (a pause, a priority); a new spec is checked as at creation. Before,
// every round failed to fire it and Go refused to pause it.
func TestScheduleSpecStoredBeforeTheCheck(t *testing.T) {
	s := setupSchedules(t)
	s.create("legacy", repository.ScheduleSettings{Spec: "* * * * *", Identifier: "legacy-{time}"})
	if _, err := s.sched.CreateSchedule(s.ctx, s.pool, "new", repository.ScheduleSettings{Topic: s.topic, Spec: "*-5 * * * *"}); !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("CreateSchedule with spec *-5: %v, want ErrInvalid", err)
	}
	// as a release before 000029 stored it (past the trigger)
	conn, err := s.pool.Acquire(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", "SET LOCAL session_replication_role = replica",
		"UPDATE task_schedule SET spec = '*-5 * * * *' WHERE name = 'legacy'", "COMMIT"} {
		if _, err := conn.Exec(s.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Release()

	s.fire() // the first fire time
	s.clock.advance(2 * time.Minute)
	if fires := s.fire(); len(fires) != 1 || fires[0].Schedule != "legacy" {
		t.Errorf("fires of the stored spec two minutes on: %+v, want one of legacy", fires)
	}
	if got := s.identifiers(); len(got) != 1 {
		t.Errorf("tasks pushed by the stored spec: %v, want 1", got)
	}
	if _, err := s.sched.PauseSchedule(s.ctx, s.pool, "legacy"); err != nil {
		t.Errorf("PauseSchedule of the stored spec: %v", err)
	}
	if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, "legacy", func(c *repository.ScheduleSettings) { c.Priority = 4 }); err != nil {
		t.Errorf("UpdateSchedule of the stored spec's priority: %v", err)
	}
	if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, "legacy", func(c *repository.ScheduleSettings) { c.Spec = "+5 * * * *" }); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("UpdateSchedule to a new spec +5: %v, want ErrInvalid", err)
	}
	if got := textRowsOf(t, s, "SELECT spec || ' ' || priority || ' ' || paused FROM task_schedule WHERE name = 'legacy'"); !slices.Equal(got, []string{"*-5 * * * * 4 true"}) {
		t.Errorf("the stored schedule: %v, want *-5 * * * * 4 true", got)
	}
	// its coming fire times, as pgtask schedule show lists them: every minute
	stored, err := s.sched.Schedule(s.ctx, s.pool, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if times, err := stored.FiresAfter(start, 2); err != nil || len(times) != 2 || !times[0].Equal(start.Add(time.Minute)) || !times[1].Equal(start.Add(2*time.Minute)) {
		t.Errorf("FiresAfter of the stored spec: %v, %v; want the next two minutes", times, err)
	}
}

// TestScheduleTopicMustExist: a schedule written by hand must name a topic that exists
// (23503, foreign_key_violation), INSERT or UPDATE, and a schedule created while its
// topic is being destroyed does not outlive it: either the destroy waits for it and
// deletes it, or the schedule is refused. On plain PostgreSQL task_schedule's foreign
// key does it; on Citus, which drops the key, task_schedule_topic_check (migration
// 000046): before it, both writes went through there and the schedule was left.
func TestScheduleTopicMustExist(t *testing.T) {
	s := setupSchedules(t)
	s.create("job", repository.ScheduleSettings{Spec: "@hourly"})
	for _, q := range []string{
		"UPDATE task_schedule SET topic = 'nope' WHERE name = 'job'",
		"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ('hand', 'nope', '@hourly', 'UTC')",
	} {
		if _, err := s.pool.Exec(s.ctx, q); repository.SQLState(err) != "23503" {
			t.Errorf("%s: %v, want 23503", q, err)
		}
	}
	if got := textRowsOf(t, s, "SELECT name || ' ' || topic FROM task_schedule ORDER BY name"); !slices.Equal(got, []string{"job " + s.topic}) {
		t.Errorf("schedules after the refusals: %v", got)
	}

	// the destroy holds the topic's deletion, uncommitted, while a schedule of it is
	// created: once the destroy commits, the schedule is refused (or, had it come first,
	// deleted with the topic)
	if _, err := s.sched.CreateTopic(s.ctx, s.pool, "doomed"); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(s.ctx)
	if _, err := tx.Exec(s.ctx, "SELECT task_topic_destroy('doomed')"); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() {
		_, err := s.sched.CreateSchedule(s.ctx, s.pool, "late", repository.ScheduleSettings{Topic: "doomed", Spec: "@hourly"})
		created <- err
	}()
	time.Sleep(300 * time.Millisecond) // the creation waits for the destroy, or has not begun: either way
	if err := tx.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-created; !errors.Is(err, repository.ErrUnknownTopic) {
		t.Errorf("schedule created while its topic was destroyed: %v, want ErrUnknownTopic", err)
	}
	if got := textRowsOf(t, s, "SELECT name FROM task_schedule WHERE topic = 'doomed'"); len(got) != 0 {
		t.Errorf("schedules of the destroyed topic: %v, want none", got)
	}
}
