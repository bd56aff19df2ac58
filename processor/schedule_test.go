package processor_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/victim"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// scheduleClock is the injected time of every repository of a schedule test.
type scheduleClock struct{ ns atomic.Int64 }

func (c *scheduleClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *scheduleClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

var scheduleStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// scheduleProcessor is a processor without managers whose repository goes by clock; it
// heart-beats (and fires) every 20 ms of real time, and never finds its peers dead
// however far the clock moves.
func (f *fixture) scheduleProcessor(owner string, clock *scheduleClock, fired *atomic.Int64) *processor.Processor {
	f.t.Helper()
	repo, err := repository.New(repository.Config{Owner: owner, Now: clock.now})
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := processor.New(processor.Config{
		Pool: f.newPool(), Repository: repo, HeartbeatInterval: 20 * time.Millisecond, ExpiryTimeout: 24 * time.Hour,
		OnFire: func(fires []repository.Fire) {
			for _, fi := range fires {
				fired.Add(int64(len(fi.Tasks)))
			}
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// scheduled returns the identifiers of the tasks schedule pushed, in sequence order.
func (f *fixture) scheduled(schedule string) []string {
	f.t.Helper()
	tasks, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{Reference: repository.ScheduleReferencePrefix + schedule},
		0, 10_000, repository.Forward)
	if err != nil {
		f.t.Fatal(err)
	}
	ids := make([]string, len(tasks))
	for i, task := range tasks {
		ids[i] = task.Identifier
	}
	return ids
}

func fireStamps(first time.Time, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = first.Add(time.Duration(i) * time.Second).Format(time.RFC3339)
	}
	return out
}

func TestSchedules(t *testing.T) {
	t.Run("ThreeProcessorsPushEachFireTimeOnce", func(t *testing.T) {
		f := setup(t)
		clock := &scheduleClock{}
		clock.ns.Store(scheduleStart.UnixNano())
		admin, err := repository.New(repository.Config{Owner: "admin", Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CreateSchedule(f.ctx, f.pool, "tick", repository.ScheduleSettings{
			Topic: f.topic, Spec: "@every 1s", Identifier: "{time}", Insertion: new(repository.Append),
		}); err != nil {
			t.Fatal(err)
		}
		var fired atomic.Int64
		stops := make([]func() error, 3)
		for i := range stops {
			stops[i] = f.start(f.scheduleProcessor(fmt.Sprintf("processor-%d", i), clock, &fired))
		}
		for i := 1; i <= 10; i++ {
			clock.advance(time.Second)
			f.eventually(fmt.Sprintf("fire %d", i), func() bool { return len(f.scheduled("tick")) >= i })
			if i == 5 {
				if err := stops[1](); err != nil { // one processor goes away mid-way
					t.Fatal(err)
				}
			}
		}
		f.eventually("OnFire of the 10 fires", func() bool { return fired.Load() >= 10 })
		for _, stop := range stops {
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := f.scheduled("tick"), fireStamps(scheduleStart.Add(time.Second), 10); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want one per fire time %v", got, want)
		}
		if fired.Load() != 10 {
			t.Errorf("OnFire saw %d tasks, want 10", fired.Load())
		}
	})

	t.Run("MissedFiresWhileNothingRan", func(t *testing.T) {
		f := setup(t)
		clock := &scheduleClock{}
		clock.ns.Store(scheduleStart.UnixNano())
		admin, err := repository.New(repository.Config{Owner: "admin", Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		for name, catchUp := range map[string]int{"latest": 0, "catch-up": 10, "bounded": 3} {
			if _, err := admin.CreateSchedule(f.ctx, f.pool, name, repository.ScheduleSettings{
				Topic: f.topic, Spec: "@every 1s", Identifier: name + "-{time}", Insertion: new(repository.Append), CatchUp: catchUp,
			}); err != nil {
				t.Fatal(err)
			}
		}
		clock.advance(10 * time.Second) // every process down for 10 fire times
		var fired atomic.Int64
		stop := f.start(f.scheduleProcessor("late-starter", clock, &fired))
		f.eventually("the fires of the late starter", func() bool { return fired.Load() == 14 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		prefixed := func(prefix string, stamps []string) []string {
			for i := range stamps {
				stamps[i] = prefix + stamps[i]
			}
			return stamps
		}
		for name, want := range map[string][]string{
			"latest":   prefixed("latest-", fireStamps(scheduleStart.Add(10*time.Second), 1)),
			"catch-up": prefixed("catch-up-", fireStamps(scheduleStart.Add(time.Second), 10)),
			"bounded":  prefixed("bounded-", fireStamps(scheduleStart.Add(8*time.Second), 3)),
		} {
			if got := f.scheduled(name); !slices.Equal(got, want) {
				t.Errorf("schedule %s pushed %v, want %v", name, got, want)
			}
		}
	})
}

func TestRunSchedules(t *testing.T) {
	t.Run("TwoLoopsPushEachFireTimeOnce", func(t *testing.T) {
		f := setup(t)
		clock := &scheduleClock{}
		clock.ns.Store(scheduleStart.UnixNano())
		admin, err := repository.New(repository.Config{Owner: "admin", Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CreateSchedule(f.ctx, f.pool, "tick", repository.ScheduleSettings{
			Topic: f.topic, Spec: "@every 1s", Identifier: "{time}", Insertion: new(repository.Append),
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(f.ctx)
		var (
			fired atomic.Int64
			wg    sync.WaitGroup
		)
		for i := range 2 {
			repo, err := repository.New(repository.Config{Owner: fmt.Sprintf("loop-%d", i), Now: clock.now})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				err := processor.RunSchedules(ctx, processor.SchedulesConfig{Pool: f.newPool(), Repository: repo, Interval: 10 * time.Millisecond,
					OnFire: func(fires []repository.Fire) { fired.Add(int64(len(fires))) }})
				if err != nil {
					t.Error(err)
				}
			})
		}
		for i := 1; i <= 5; i++ {
			clock.advance(time.Second)
			f.eventually(fmt.Sprintf("fire %d", i), func() bool { return len(f.scheduled("tick")) >= i })
		}
		f.eventually("OnFire of the 5 fires", func() bool { return fired.Load() >= 5 })
		cancel()
		wg.Wait()
		if got, want := f.scheduled("tick"), fireStamps(scheduleStart.Add(time.Second), 5); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
		if fired.Load() != 5 {
			t.Errorf("OnFire saw %d fires, want 5", fired.Load())
		}
	})

	t.Run("RefusesABadConfig", func(t *testing.T) {
		if err := processor.RunSchedules(t.Context(), processor.SchedulesConfig{}); err == nil || !strings.Contains(err.Error(), "Pool is required") {
			t.Errorf("no pool: %v", err)
		}
		// a round too short to reach a fire fired nothing, round after round, and said
		// only that schedules were held; an interval of a nanosecond spun
		f := setup(t)
		pool := f.newPool()
		if err := processor.RunSchedules(t.Context(), processor.SchedulesConfig{Pool: pool, Timeout: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "Timeout 50ms is below 1s") {
			t.Errorf("a 50 ms timeout: %v, want it refused", err)
		}
		if err := processor.RunSchedules(t.Context(), processor.SchedulesConfig{Pool: pool, Interval: time.Nanosecond}); err == nil || !strings.Contains(err.Error(), "Interval 1ns is below") {
			t.Errorf("a 1 ns interval: %v, want it refused", err)
		}
	})
}

// Environment of the schedule victim subprocess: the database and its clock.
const (
	scheduleVictimEnv   = "PGTASK_TEST_SCHEDULE_VICTIM_DATABASE_URL"
	scheduleVictimAtEnv = "PGTASK_TEST_SCHEDULE_VICTIM_AT"
)

// TestScheduleVictimProcess is not a test of its own: TestScheduleKilledMidFire runs the
// test binary again with scheduleVictimEnv set, and then this function is a firer that
// dies mid-fire: it fires the due schedules in a transaction it never commits, says
// "holding" and waits for SIGKILL, its push written and the schedule's row locked.
func TestScheduleVictimProcess(t *testing.T) {
	url := os.Getenv(scheduleVictimEnv)
	if url == "" {
		t.Skip("helper process for TestScheduleKilledMidFire; runs only as its subprocess")
	}
	at, err := time.Parse(time.RFC3339, os.Getenv(scheduleVictimAtEnv))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := repository.New(repository.Config{Owner: "schedule-victim", Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fires, err := repo.FireSchedules(ctx, tx)
	if err != nil || len(fires) != 1 {
		t.Fatalf("victim fired %+v, %v", fires, err)
	}
	fmt.Println("holding")
	select {} // until SIGKILL
}

// TestScheduleKilledMidFire kills a process in the middle of a fire (pushed, not
// committed, the schedule's row locked) while two processors wait for that row: the
// fire time is pushed once, by one of them, and the following ones too.
func TestScheduleKilledMidFire(t *testing.T) {
	f := setup(t)
	clock := &scheduleClock{}
	clock.ns.Store(scheduleStart.UnixNano())
	admin, err := repository.New(repository.Config{Owner: "admin", Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateSchedule(f.ctx, f.pool, "tick", repository.ScheduleSettings{
		Topic: f.topic, Spec: "@every 1s", Identifier: "{time}", Insertion: new(repository.Append),
	}); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Second)

	cmd := victim.Start(t, "TestScheduleVictimProcess",
		[]string{scheduleVictimEnv + "=" + f.url, scheduleVictimAtEnv + "=" + clock.now().Format(time.RFC3339)}, "holding")

	var fired atomic.Int64
	stops := []func() error{
		f.start(f.scheduleProcessor("survivor-1", clock, &fired)),
		f.start(f.scheduleProcessor("survivor-2", clock, &fired)),
	}
	// The survivors wait for the victim's lock: nothing is pushed meanwhile.
	f.eventually("the survivors waiting for the victim's lock", func() bool {
		var n int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= 1
	})
	if got := f.scheduled("tick"); len(got) != 0 {
		t.Fatalf("pushed %v while the victim held the fire", got)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for i := 1; i <= 10; i++ {
		if i > 1 {
			clock.advance(time.Second)
		}
		f.eventually(fmt.Sprintf("fire %d", i), func() bool { return len(f.scheduled("tick")) >= i })
	}
	f.eventually("OnFire of the 10 fires", func() bool { return fired.Load() >= 10 })
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.scheduled("tick"), fireStamps(scheduleStart.Add(time.Second), 10); !slices.Equal(got, want) {
		t.Errorf("tasks %v, want one per fire time %v", got, want)
	}
}

// TestScheduleHeldBySession: a schedule another session keeps locked (a transaction
// left open on task_schedule) delays its fires without making the processor unhealthy;
// once released, the fire is pushed.
func TestScheduleHeldBySession(t *testing.T) {
	f := setup(t)
	clock := &scheduleClock{}
	clock.ns.Store(scheduleStart.UnixNano())
	admin, err := repository.New(repository.Config{Owner: "admin", Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateSchedule(f.ctx, f.pool, "tick", repository.ScheduleSettings{Topic: f.topic, Spec: "@every 1s"}); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Second)
	p, tx := f.startWithScheduleHeld(clock, "tick", "waiter")
	if err := p.Health(); err != nil {
		t.Errorf("health while a session holds a schedule: %v", err)
	}
	if got := f.scheduled("tick"); len(got) != 0 {
		t.Fatalf("pushed %v while the schedule was held", got)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.eventually("the fire once released", func() bool { return len(f.scheduled("tick")) == 1 })
}

// TestScheduleHeldDoesNotHideFailures: in a round where one schedule is held by another
// session (ErrScheduleWait, not a failure) and another's fire fails in the database (a
// trigger on task raises for its task), the failure is reported: the processor is
// unhealthy, naming it. Before, the held schedule's error made the whole round's error
// count as held, and the processor stayed healthy.
func TestScheduleHeldDoesNotHideFailures(t *testing.T) {
	f := setup(t)
	clock := &scheduleClock{}
	clock.ns.Store(scheduleStart.UnixNano())
	admin, err := repository.New(repository.Config{Owner: "admin", Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"held", "boom"} {
		if _, err := admin.CreateSchedule(f.ctx, f.pool, name, repository.ScheduleSettings{Topic: f.topic, Spec: "@every 1s"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.pool.Exec(f.ctx, `
		CREATE FUNCTION test_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.identifier = 'boom' THEN
				RAISE EXCEPTION 'disk on fire' USING ERRCODE = 'XX000';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_boom BEFORE INSERT ON task FOR EACH ROW EXECUTE FUNCTION test_boom();`); err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Second)
	p, _ := f.startWithScheduleHeld(clock, "held", "firer")
	f.eventually("the failure in the health report", func() bool {
		err := p.Health()
		return err != nil && strings.Contains(err.Error(), "fire schedules")
	})
	if err := p.Health(); !strings.Contains(fmt.Sprint(err), "disk on fire") && !strings.Contains(fmt.Sprint(err), "XX000") {
		t.Errorf("health %v, want the failure of the schedule boom", err)
	}
}

// startWithScheduleHeld holds schedule held in a transaction of its own (rolled back when
// the test ends, or by the caller), starts a processor of owner firing on clock, and
// waits for its first round that found the schedule held. Its heartbeat is 20 ms and a
// round may take its expiry timeout, 1 s, so that a loaded machine (a CI run under the
// race detector) still fires within one once the schedule is released.
func (f *fixture) startWithScheduleHeld(clock *scheduleClock, held, owner string) (*processor.Processor, pgx.Tx) {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(f.ctx, "SELECT FROM task_schedule WHERE name = $1 FOR UPDATE", held); err != nil {
		f.t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	repo, err := repository.New(repository.Config{Owner: owner, Now: clock.now})
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: f.newPool(), Repository: repo, Logger: jsonLogger(logs, slog.LevelWarn),
		HeartbeatInterval: 20 * time.Millisecond, ExpiryTimeout: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	f.start(p)
	f.eventually("the warning of a round that found the schedule held", func() bool {
		return len(logs.Lines("schedules not fired: held by another session")) > 0
	})
	return p, tx
}

// TestScheduleDisabled: a processor with DisableSchedules heart-beats past a due fire
// time and pushes nothing.
func TestScheduleDisabled(t *testing.T) {
	f := setup(t)
	created, err := f.repo.CreateSchedule(f.ctx, f.pool, "tick", repository.ScheduleSettings{Topic: f.topic, Spec: "@every 1s"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := repository.New(repository.Config{Owner: "no-schedules"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: f.newPool(), Repository: repo, HeartbeatInterval: 20 * time.Millisecond, DisableSchedules: true})
	if err != nil {
		t.Fatal(err)
	}
	f.start(p)
	// Its heartbeats (by the database clock) go on for a second past the fire time.
	f.eventually("heartbeats a second past the fire time", func() bool {
		var late bool
		err := f.pool.QueryRow(f.ctx, "SELECT heartbeat > $1::timestamptz + interval '1 second' FROM task_owner WHERE owner = 'no-schedules'",
			created.NextFire).Scan(&late)
		return err == nil && late
	})
	if got := f.scheduled("tick"); len(got) != 0 {
		t.Errorf("a processor with DisableSchedules pushed %v", got)
	}
}
