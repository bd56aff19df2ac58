package repository_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// fakeClock is a time the test moves by hand, shared by every repository that fires.
type fakeClock struct{ ns atomic.Int64 }

func newClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }

// scheduleFixture is a test database, a clock and a repository going by it.
type scheduleFixture struct {
	*fixture
	clock *fakeClock
	sched *repository.Repository
}

// start is the fixtures' first instant: a whole second, as fire times are.
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func setupSchedules(t *testing.T) *scheduleFixture {
	f := setup(t)
	s := &scheduleFixture{fixture: f, clock: newClock(start)}
	s.sched = s.firer("firer-1")
	return s
}

// firer returns a repository that goes by the fixture's clock.
func (s *scheduleFixture) firer(owner string) *repository.Repository {
	s.t.Helper()
	repo, err := repository.New(repository.Config{Owner: owner, Now: s.clock.now})
	if err != nil {
		s.t.Fatal(err)
	}
	return repo
}

// create creates a schedule and fails the test on error.
func (s *scheduleFixture) create(name string, settings repository.ScheduleSettings) repository.Schedule {
	s.t.Helper()
	if settings.Topic == "" {
		settings.Topic = s.topic
	}
	sc, err := s.sched.CreateSchedule(s.ctx, s.pool, name, settings)
	if err != nil {
		s.t.Fatalf("create schedule %s: %v", name, err)
	}
	return sc
}

// fire runs FireSchedules and fails the test on error.
func (s *scheduleFixture) fire() []repository.Fire {
	s.t.Helper()
	fires, err := s.sched.FireSchedules(s.ctx, s.pool)
	if err != nil {
		s.t.Fatalf("fire schedules: %v", err)
	}
	return fires
}

// cancelRequests returns a pool on pool's database whose connections answer a context
// done by a cancel request, not pgx's default of interrupting the connection: the
// server then fails the statement with SQLSTATE 57014 (query_canceled), which says
// nothing of the context.
func cancelRequests(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 10 * time.Second}
	}
	requests, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(requests.Close)
	return requests
}

// identifiers returns the identifiers of every task of the topic, in sequence order.
func (s *scheduleFixture) identifiers() []string {
	s.t.Helper()
	tasks, err := s.repo.Page(s.ctx, s.pool, s.topic, repository.TaskFilter{}, 0, 100_000, repository.Forward)
	if err != nil {
		s.t.Fatal(err)
	}
	out := make([]string, len(tasks))
	for i, task := range tasks {
		out[i] = task.Identifier
	}
	return out
}

// stamps formats times as a schedule's {time} does.
func stamps(times ...time.Time) []string {
	out := make([]string, len(times))
	for i, t := range times {
		out[i] = t.UTC().Format(time.RFC3339)
	}
	return out
}

// every returns the n times from first, step apart.
func every(first time.Time, step time.Duration, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = first.Add(time.Duration(i) * step)
	}
	return out
}

// appendEach is a schedule pushing one task of its own per fire time.
func appendEach(spec string) repository.ScheduleSettings {
	return repository.ScheduleSettings{Spec: spec, Identifier: "{time}", Insertion: new(repository.Append)}
}

// TestSchedulesOf: a topic's schedules, by name, and no other topic's; an unknown topic
// has none; a topic name that cannot be is refused.
func TestSchedulesOf(t *testing.T) {
	s := setupSchedules(t)
	s.createTopic("other")
	s.create("weekly", repository.ScheduleSettings{Spec: "@weekly"})
	s.create("daily", repository.ScheduleSettings{Spec: "@daily"})
	s.create("elsewhere", repository.ScheduleSettings{Topic: "other", Spec: "@daily"})
	got, err := s.sched.SchedulesOf(s.ctx, s.pool, s.topic)
	if err != nil || len(got) != 2 || got[0].Name != "daily" || got[1].Name != "weekly" || got[0].Topic != s.topic {
		t.Errorf("schedules of %s: %+v, %v; want daily and weekly", s.topic, got, err)
	}
	if got, err := s.sched.SchedulesOf(s.ctx, s.pool, "unknown"); err != nil || len(got) != 0 {
		t.Errorf("schedules of an unknown topic: %+v, %v; want none", got, err)
	}
	if _, err := s.sched.SchedulesOf(s.ctx, s.pool, ""); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("schedules of an empty topic name: %v, want ErrInvalid", err)
	}
}

func TestScheduleCreate(t *testing.T) {
	t.Run("DefaultsAndFirstFireTime", func(t *testing.T) {
		s := setupSchedules(t)
		s.clock.set(start.Add(1500 * time.Millisecond))
		sc := s.create("nightly", repository.ScheduleSettings{Spec: "0 3 * * *"})
		if sc.TimeZone != "UTC" || sc.Insertion == nil || *sc.Insertion != repository.Supersede || sc.CatchUp != 0 || sc.Paused {
			t.Errorf("defaults: %+v", sc.ScheduleSettings)
		}
		if want := time.Date(2026, 3, 2, 3, 0, 0, 0, time.UTC); !sc.NextFire.Equal(want) {
			t.Errorf("next fire %v, want %v", sc.NextFire, want)
		}
		every := s.create("often", repository.ScheduleSettings{Spec: "@every 90s"})
		if want := start.Add(time.Second + 90*time.Second); !every.NextFire.Equal(want) {
			t.Errorf("@every 90s created at %v: next fire %v, want %v", s.clock.now(), every.NextFire, want)
		}
		zoned := s.create("paris", repository.ScheduleSettings{Spec: "0 0 9 * * mon-fri", TimeZone: "Europe/Paris"})
		if want := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC); !zoned.NextFire.Equal(want) { // Monday 09:00 CET
			t.Errorf("paris next fire %v, want %v", zoned.NextFire, want)
		}
		got, err := s.sched.Schedule(s.ctx, s.pool, "nightly")
		if err != nil || got.Spec != "0 3 * * *" || !got.NextFire.Equal(sc.NextFire) {
			t.Errorf("read back %+v, %v", got, err)
		}
		list, err := s.sched.Schedules(s.ctx, s.pool)
		if err != nil || len(list) != 3 || list[0].Name != "nightly" || list[1].Name != "often" || list[2].Name != "paris" {
			t.Errorf("list %+v, %v", list, err)
		}
	})

	t.Run("BadInputIsRefusedAndNothingWritten", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("taken", repository.ScheduleSettings{Spec: "@hourly"})
		ok := repository.ScheduleSettings{Topic: s.topic, Spec: "@hourly"}
		with := func(change func(*repository.ScheduleSettings)) repository.ScheduleSettings {
			c := ok
			change(&c)
			return c
		}
		cases := []struct {
			name     string
			schedule string
			settings repository.ScheduleSettings
			sentinel error
			says     string
		}{
			{"InvalidSpec", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "61 * * * *" }), repository.ErrInvalid, "spec"},
			{"TooFewFields", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "* * *" }), repository.ErrInvalid, "spec"},
			{"EmptySpec", "a", with(func(c *repository.ScheduleSettings) { c.Spec = " " }), repository.ErrInvalid, "spec is empty"},
			{"UnknownDescriptor", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "@fortnightly" }), repository.ErrInvalid, "spec"},
			{"NeverFires", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "0 0 30 2 *" }), repository.ErrInvalid, "never fires"},
			{"StarRange", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "*-5 * * * *" }), repository.ErrInvalid, `minute field "*-5" is not a value, a range or a step`},
			{"SignedNumber", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "0 +5 * * *" }), repository.ErrInvalid, `hour field "+5" is not a value`},
			{"NotASCII", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "0 5\u00a0* * *" }), repository.ErrInvalid, `character '\u00a0' is not allowed`},
			{"ZoneInSpec", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "CRON_TZ=Europe/Paris 0 3 * * *" }), repository.ErrInvalid, "time zone"},
			{"NegativeInterval", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "@every -5s" }), repository.ErrInvalid, "interval -5s is negative"},
			{"SubSecondInterval", "a", with(func(c *repository.ScheduleSettings) { c.Spec = "@every 500ms" }), repository.ErrInvalid, "shorter than 1s"},
			{"UnknownTimeZone", "a", with(func(c *repository.ScheduleSettings) { c.TimeZone = "Mars/Olympus" }), repository.ErrInvalid, `unknown time zone "Mars/Olympus"`},
			{"LocalTimeZone", "a", with(func(c *repository.ScheduleSettings) { c.TimeZone = "Local" }), repository.ErrInvalid, "unknown time zone"},
			{"LeapSecondTimeZone", "a", with(func(c *repository.ScheduleSettings) { c.TimeZone = "right/Europe/Paris" }), repository.ErrInvalid, `time zone "right/Europe/Paris" counts leap seconds, which schedules do not: give "Europe/Paris"`},
			{"UnknownTopic", "a", with(func(c *repository.ScheduleSettings) { c.Topic = "nope" }), repository.ErrUnknownTopic, `topic "nope"`},
			{"EmptyTopic", "a", with(func(c *repository.ScheduleSettings) { c.Topic = "" }), repository.ErrInvalid, "topic is empty"},
			{"DuplicateName", "taken", ok, repository.ErrScheduleExists, `"taken"`},
			// it reached metrics' labels, logs and terminals as it was
			{"NameWithATab", "a\tb", ok, repository.ErrInvalid, "schedule name has a control character (U+0009) at byte 1"},
			{"NameWithAnEscape", "a\x1b[2J", ok, repository.ErrInvalid, "control character (U+001B)"},
			{"EmptyName", "", ok, repository.ErrInvalid, "schedule name is empty"},
			{"LongName", strings.Repeat("n", 251), ok, repository.ErrInvalid, "schedule name is 251 characters"},
			{"LongIdentifier", "a", with(func(c *repository.ScheduleSettings) { c.Identifier = strings.Repeat("i", 495) + "{time}" }), repository.ErrInvalid, "identifier"},
			{"NegativeCatchUp", "a", with(func(c *repository.ScheduleSettings) { c.CatchUp = -1 }), repository.ErrInvalid, "catch-up -1 is negative"},
			{"UnknownInsertion", "a", with(func(c *repository.ScheduleSettings) { c.Insertion = new(repository.Insertion(9)) }), repository.ErrInvalid, "insertion"},
		}
		for _, c := range cases {
			_, err := s.sched.CreateSchedule(s.ctx, s.pool, c.schedule, c.settings)
			if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: error %v, want %v saying %q", c.name, err, c.sentinel, c.says)
			}
		}
		// In a transaction too, which survives the refusals.
		tx, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(s.ctx) }()
		if _, err := s.sched.CreateSchedule(s.ctx, tx, "taken", ok); !errors.Is(err, repository.ErrScheduleExists) {
			t.Errorf("duplicate in a transaction: %v", err)
		}
		if _, err := s.sched.CreateSchedule(s.ctx, tx, "b", with(func(c *repository.ScheduleSettings) { c.Topic = "nope" })); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("unknown topic in a transaction: %v", err)
		}
		if _, err := s.sched.CreateSchedule(s.ctx, tx, "c", ok); err != nil {
			t.Errorf("the transaction is usable after refusals: %v", err)
		}
		if err := tx.Rollback(s.ctx); err != nil {
			t.Fatal(err)
		}
		list, err := s.sched.Schedules(s.ctx, s.pool)
		if err != nil || len(list) != 1 {
			t.Errorf("schedules after the refusals: %+v, %v; want only \"taken\"", list, err)
		}
	})
}

func TestScheduleFire(t *testing.T) {
	// A fire slower than the caller's bound (a catch-up of thousands on a busy server; here
	// a push that waits 3 s for the topic's row, which another session holds) finishes:
	// the bound is for waiting on schedules others hold. Cut short, it was tried again at
	// each round and never fired. Cancelling the context (a shutdown) still stops it.
	t.Run("AFireSlowerThanTheCallersBoundFinishes", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("slow", appendEach("@every 1s"))
		s.create("later", appendEach("@every 1s"))
		holder, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback(context.WithoutCancel(s.ctx)) }()
		if _, err := holder.Exec(s.ctx, "SELECT 1 FROM task_topic WHERE topic = $1 FOR UPDATE", s.topic); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(time.Second)
		stop, halt := context.WithCancel(s.ctx)
		time.AfterFunc(500*time.Millisecond, halt)
		began := time.Now()
		if fires, err := s.sched.FireSchedules(stop, s.pool); err == nil || len(fires) != 0 || time.Since(began) > 2*time.Second {
			t.Fatalf("a fire waiting for the topic, its context cancelled after 0.5 s: %d fires, %v after %v; want none and an error at once",
				len(fires), err, time.Since(began))
		} else if !errors.Is(err, context.Canceled) || errors.Is(err, repository.ErrScheduleWait) {
			t.Errorf("a fire cancelled: %v; want context.Canceled, not ErrScheduleWait", err)
		}
		// The holder's transaction is released by this goroutine alone from here
		// on (a pgx.Tx is not safe for concurrent use): the test waits for it to
		// finish before its own deferred rollback.
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(3 * time.Second)
			_ = holder.Rollback(context.WithoutCancel(s.ctx))
		}()
		defer func() { <-released }()
		ctx, cancel := context.WithTimeout(s.ctx, time.Second)
		defer cancel()
		fires, err := s.sched.FireSchedules(ctx, s.pool)
		if err != nil || len(fires) != 1 {
			t.Fatalf("a fire of 3 s under a bound of 1 s: %d fires (%v), want the first schedule fired and no error", len(fires), err)
		}
		// the other one, not begun when the bound passed, is left for the next call
		if got := s.identifiers(); len(got) != 1 {
			t.Fatalf("tasks %v after the first call, want the one fire", got)
		}
		if next := s.fire(); len(next) != 1 || next[0].Schedule == fires[0].Schedule {
			t.Fatalf("the next call fired %v, want the schedule left (not %s)", next, fires[0].Schedule)
		}
		if got, want := s.identifiers(), stamps(start.Add(time.Second), start.Add(time.Second)); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
	})

	// A wait for a schedule another session holds, cut short by the bound, says so
	// (ErrScheduleWait: the processor logs it as that session's doing, not as a fault).
	t.Run("AWaitCutShortSaysSo", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("held", appendEach("@every 1s"))
		holder, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback(context.WithoutCancel(s.ctx)) }()
		if _, err := holder.Exec(s.ctx, "SELECT 1 FROM task_schedule WHERE name = 'held' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(time.Second)
		for _, pool := range []*pgxpool.Pool{s.pool, cancelRequests(t, s.pool)} {
			ctx, cancel := context.WithTimeout(s.ctx, time.Second)
			fires, err := s.sched.FireSchedules(ctx, pool)
			cancel()
			if !errors.Is(err, repository.ErrScheduleWait) || errors.Is(err, context.Canceled) || len(fires) != 0 {
				t.Errorf("FireSchedules while another session holds the schedule: %d fires, %v; want ErrScheduleWait, not context.Canceled", len(fires), err)
			}
		}
	})
	// A schedule an application's transaction holds (a pause or an update left open)
	// costs a call a short wait, not its whole deadline: the call fires the others,
	// names the held one (ErrScheduleWait) and returns; once released, it fires.
	t.Run("AScheduleHeldByAnotherSessionIsLeftForTheNextCall", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("held", appendEach("@every 1s"))
		s.create("free", appendEach("@every 1s"))
		holder, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback(context.WithoutCancel(s.ctx)) }()
		if _, err := holder.Exec(s.ctx, "SELECT 1 FROM task_schedule WHERE name = 'held' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			s.clock.advance(time.Second)
			ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
			fires, err := s.sched.FireSchedules(ctx, s.pool)
			waitedOut := ctx.Err() != nil
			cancel()
			if waitedOut {
				t.Fatalf("FireSchedules waited out its deadline for the held schedule: %d fires, %v", len(fires), err)
			}
			if len(fires) != 1 || fires[0].Schedule != "free" {
				t.Errorf("fires %+v, want free's", fires)
			}
			if !errors.Is(err, repository.ErrScheduleWait) || !strings.Contains(err.Error(), `schedule "held" is held by another session`) {
				t.Errorf("err = %v, want ErrScheduleWait naming held", err)
			}
		}
		if err := holder.Rollback(s.ctx); err != nil {
			t.Fatal(err)
		}
		fires, err := s.sched.FireSchedules(s.ctx, s.pool)
		if err != nil || len(fires) != 1 || fires[0].Schedule != "held" {
			t.Errorf("after the holder rolled back: fires %+v, %v; want held's", fires, err)
		}
	})
	// The same wait cancelled (a shutdown) is a cancellation, not time run out: a caller
	// tells it by context.Canceled, and the processor does not log it as another
	// session's doing.
	t.Run("AWaitCancelledIsACancellation", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("held", appendEach("@every 1s"))
		holder, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback(context.WithoutCancel(s.ctx)) }()
		if _, err := holder.Exec(s.ctx, "SELECT 1 FROM task_schedule WHERE name = 'held' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(time.Second)
		for _, pool := range []*pgxpool.Pool{s.pool, cancelRequests(t, s.pool)} {
			ctx, cancel := context.WithCancel(s.ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			fires, err := s.sched.FireSchedules(ctx, pool)
			if len(fires) != 0 || !errors.Is(err, context.Canceled) || errors.Is(err, repository.ErrScheduleWait) {
				t.Errorf("FireSchedules cancelled while another session holds the schedule: %d fires, %v; want context.Canceled, not ErrScheduleWait",
					len(fires), err)
			}
		}
	})
	// A fire cancelled (here waiting for its topic's row) is a cancellation too, on a
	// connection interrupted or sent a cancel request.
	t.Run("AFireCancelledIsACancellation", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("slow", appendEach("@every 1s"))
		holder, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback(context.WithoutCancel(s.ctx)) }()
		if _, err := holder.Exec(s.ctx, "SELECT 1 FROM task_topic WHERE topic = $1 FOR UPDATE", s.topic); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(time.Second)
		for _, pool := range []*pgxpool.Pool{s.pool, cancelRequests(t, s.pool)} {
			ctx, cancel := context.WithCancel(s.ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			fires, err := s.sched.FireSchedules(ctx, pool)
			if len(fires) != 0 || !errors.Is(err, context.Canceled) || errors.Is(err, repository.ErrScheduleWait) {
				t.Errorf("FireSchedules cancelled in a fire: %d fires, %v; want context.Canceled, not ErrScheduleWait", len(fires), err)
			}
		}
	})
	// A context done before FireSchedules began (cancelled, or its deadline passed) did
	// not wait for anything: the error says which, not ErrScheduleWait; nothing fires.
	t.Run("AContextDoneBeforehandIsNoWait", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("due", appendEach("@every 1s"))
		s.clock.advance(time.Second)
		cancelled, cancel := context.WithCancel(s.ctx)
		cancel()
		fires, err := s.sched.FireSchedules(cancelled, s.pool)
		if len(fires) != 0 || !errors.Is(err, context.Canceled) || errors.Is(err, repository.ErrScheduleWait) {
			t.Errorf("FireSchedules on a cancelled context: %d fires, %v; want context.Canceled, not ErrScheduleWait", len(fires), err)
		}
		past, cancelPast := context.WithDeadline(s.ctx, time.Now().Add(-time.Second))
		defer cancelPast()
		fires, err = s.sched.FireSchedules(past, s.pool)
		if len(fires) != 0 || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, repository.ErrScheduleWait) {
			t.Errorf("FireSchedules on a context past its deadline: %d fires, %v; want context.DeadlineExceeded, not ErrScheduleWait", len(fires), err)
		}
		if got := s.identifiers(); len(got) != 0 {
			t.Errorf("tasks %v pushed on a done context, want none", got)
		}
		if fires := s.fire(); len(fires) != 1 {
			t.Errorf("the next call fired %v, want the schedule left for it", fires)
		}
	})
	t.Run("OncePerFireTimeWithManyConcurrentFirers", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", appendEach("@every 1s"))
		firers := make([]*repository.Repository, 8)
		for i := range firers {
			firers[i] = s.firer(fmt.Sprintf("firer-%d", i))
		}
		var pushed atomic.Int64
		for range 10 {
			s.clock.advance(time.Second)
			var wg sync.WaitGroup
			for i, firer := range firers {
				wg.Go(func() {
					if i == 0 {
						// A firer that dies mid-way: it fires in a transaction that is
						// never committed.
						tx, err := s.pool.Begin(s.ctx)
						if err != nil {
							t.Error(err)
							return
						}
						defer func() { _ = tx.Rollback(s.ctx) }()
						if _, err := firer.FireSchedules(s.ctx, tx); err != nil {
							t.Error(err)
						}
						return
					}
					fires, err := firer.FireSchedules(s.ctx, s.pool)
					if err != nil {
						t.Error(err)
					}
					for _, f := range fires {
						pushed.Add(int64(len(f.Tasks)))
					}
				})
			}
			wg.Wait()
		}
		want := stamps(every(start.Add(time.Second), time.Second, 10)...)
		if got := s.identifiers(); !slices.Equal(got, want) {
			t.Errorf("tasks pushed %v, want one per fire time %v", got, want)
		}
		if pushed.Load() != 10 {
			t.Errorf("the firers report %d tasks pushed, want 10", pushed.Load())
		}
		sc, err := s.sched.Schedule(s.ctx, s.pool, "tick")
		if err != nil || sc.Fires != 10 || !sc.LastFire.Equal(start.Add(10*time.Second)) || !sc.NextFire.Equal(start.Add(11*time.Second)) {
			t.Errorf("state %+v, %v", sc, err)
		}
	})

	t.Run("ConcurrentFirersOfManySchedules", func(t *testing.T) {
		s := setupSchedules(t)
		for i := range 20 {
			s.create(fmt.Sprintf("s%02d", i), repository.ScheduleSettings{Spec: "@every 1s", Identifier: fmt.Sprintf("s%02d-{time}", i), Insertion: new(repository.Append)})
		}
		s.clock.advance(time.Second)
		var wg sync.WaitGroup
		for i := range 6 {
			firer := s.firer(fmt.Sprintf("firer-%d", i))
			wg.Go(func() {
				if _, err := firer.FireSchedules(s.ctx, s.pool); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got := s.identifiers()
		slices.Sort(got)
		var want []string
		for i := range 20 {
			want = append(want, fmt.Sprintf("s%02d-%s", i, stamps(start.Add(time.Second))[0]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("tasks %v, want one per schedule %v", got, want)
		}
	})

	t.Run("NotDueFiresNothing", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", appendEach("@every 1s"))
		s.clock.advance(999 * time.Millisecond)
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("fired %+v before the first fire time", fires)
		}
	})

	t.Run("TaskCarriesTheSettings", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("report", repository.ScheduleSettings{Spec: "* * * * *", Input: `{"at":"{time}"}`, Priority: 3})
		s.clock.advance(time.Minute)
		fires := s.fire()
		if len(fires) != 1 || len(fires[0].Tasks) != 1 {
			t.Fatalf("fires %+v", fires)
		}
		f := fires[0]
		task := s.get(f.Tasks[0].Sequence)
		at := start.Add(time.Minute)
		if task.Identifier != "report" || task.Input != `{"at":"`+stamps(at)[0]+`"}` || task.Priority != 3 ||
			task.Reference != "schedule:report" || task.State != repository.Ready {
			t.Errorf("task %+v", task)
		}
		if f.Schedule != "report" || f.Topic != s.topic || !f.Times[0].Equal(at) || f.Lateness() != 0 || f.Missed != 0 {
			t.Errorf("fire %+v", f)
		}
	})

	t.Run("SupersedeKeepsOneReadyTask", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", repository.ScheduleSettings{Spec: "@every 1s"})
		for range 3 {
			s.clock.advance(time.Second)
			s.fire()
		}
		tasks, err := s.repo.Page(s.ctx, s.pool, s.topic, repository.TaskFilter{}, 0, 10, repository.Forward)
		if err != nil || len(tasks) != 3 {
			t.Fatalf("tasks %+v, %v", tasks, err)
		}
		if tasks[0].State != repository.Redundant || tasks[1].State != repository.Redundant || tasks[2].State != repository.Ready {
			t.Errorf("states %v %v %v, want REDUNDANT REDUNDANT READY", tasks[0].State, tasks[1].State, tasks[2].State)
		}
	})

	t.Run("InTheCallersTransaction", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", appendEach("@every 1s"))
		s.clock.advance(time.Second)
		tx, err := s.pool.Begin(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fires, err := s.sched.FireSchedules(s.ctx, tx); err != nil || len(fires) != 1 {
			t.Fatalf("fire in a transaction: %+v, %v", fires, err)
		}
		if err := tx.Rollback(s.ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.identifiers(); len(got) != 0 {
			t.Errorf("a rolled back fire left tasks %v", got)
		}
		if fires := s.fire(); len(fires) != 1 || !fires[0].Times[0].Equal(start.Add(time.Second)) {
			t.Errorf("the fire after the rollback: %+v", fires)
		}
	})

	t.Run("AFailingScheduleDoesNotBlockTheOthers", func(t *testing.T) {
		s := setupSchedules(t)
		s.createTopic("capped")
		if _, err := s.repo.UpdateSettings(s.ctx, s.pool, "capped", func(ts *repository.TopicSettings) { ts.QueueCap = 1 }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.repo.Push(s.ctx, s.pool, "capped", repository.Append, repository.Creation{Identifier: "filler"}); err != nil {
			t.Fatal(err)
		}
		s.create("full", repository.ScheduleSettings{Topic: "capped", Spec: "@every 1s", Identifier: "x-{time}"})
		s.create("fine", appendEach("@every 1s"))
		s.clock.advance(time.Second)
		fires, err := s.sched.FireSchedules(s.ctx, s.pool)
		if !errors.Is(err, repository.ErrQueueFull) || !strings.Contains(err.Error(), `"full"`) {
			t.Errorf("error %v, want the full queue of schedule \"full\"", err)
		}
		if len(fires) != 1 || fires[0].Schedule != "fine" {
			t.Errorf("fires %+v, want \"fine\"", fires)
		}
		full, _ := s.sched.Schedule(s.ctx, s.pool, "full")
		if !full.NextFire.Equal(start.Add(time.Second)) || full.Fires != 0 {
			t.Errorf("the refused schedule moved on: %+v", full)
		}
	})
}

// A cancellation (a shutdown) that comes while a fire's COMMIT is in flight does not
// interrupt it: the fire is committed and reported, so that what the processor tells
// its OnFire and logs is what was pushed. Interrupted, the COMMIT still happened on
// the server, and the caller was told it failed. (A deferred trigger holds the COMMIT
// until the test has cancelled. Not in .ci/run's Citus list: there the trigger would
// run on the workers.)
func TestScheduleFireCommitInFlight(t *testing.T) {
	s := setupSchedules(t)
	s.create("tick", appendEach("@every 1s"))
	if _, err := s.pool.Exec(s.ctx, `
CREATE FUNCTION test_hold_commit() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END$$;
CREATE CONSTRAINT TRIGGER test_hold_commit AFTER UPDATE ON task_schedule
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_hold_commit()`); err != nil {
		t.Fatal(err)
	}
	for i, pool := range []*pgxpool.Pool{s.pool, cancelRequests(t, s.pool)} {
		holder, err := s.pool.Acquire(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec(s.ctx, "SELECT pg_advisory_lock(4242)"); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(time.Second)
		ctx, cancel := context.WithCancel(s.ctx)
		type result struct {
			fires []repository.Fire
			err   error
		}
		done := make(chan result, 1)
		go func() {
			fires, err := s.sched.FireSchedules(ctx, pool)
			done <- result{fires, err}
		}()
		s.eventually("the fire's COMMIT waiting in its deferred trigger", func() bool {
			var waiting bool
			err := s.pool.QueryRow(s.ctx,
				"SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted)").Scan(&waiting)
			return err == nil && waiting
		})
		cancel()
		time.Sleep(200 * time.Millisecond) // the interruption, were there one, has struck
		if _, err := holder.Exec(s.ctx, "SELECT pg_advisory_unlock(4242)"); err != nil {
			t.Fatal(err)
		}
		holder.Release()
		r := <-done
		if r.err != nil || len(r.fires) != 1 || len(r.fires[0].Tasks) != 1 {
			t.Errorf("FireSchedules cancelled during its COMMIT (pool %d): %d fires, %v; want the fire reported, no error", i, len(r.fires), r.err)
		}
		if got, want := s.identifiers(), stamps(every(start.Add(time.Second), time.Second, i+1)...); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
	}
}

func TestScheduleMissedFires(t *testing.T) {
	// (every 10 s: only the latest time is within the grace, 2 s; TestScheduleGrace)
	t.Run("LatestOnlyByDefault", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", appendEach("@every 10s"))
		s.clock.advance(100*time.Second + 300*time.Millisecond)
		fires := s.fire()
		if len(fires) != 1 || len(fires[0].Times) != 1 || fires[0].Missed != 9 {
			t.Fatalf("fires %+v, want the latest of 10 times, 9 missed", fires)
		}
		if got, want := s.identifiers(), stamps(start.Add(100*time.Second)); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
		if late := fires[0].Lateness(); late != 300*time.Millisecond {
			t.Errorf("lateness %v, want 300ms", late)
		}
		sc, _ := s.sched.Schedule(s.ctx, s.pool, "tick")
		if !sc.NextFire.Equal(start.Add(110*time.Second)) || sc.Fires != 1 {
			t.Errorf("next fire %v fires %d, want %v and 1", sc.NextFire, sc.Fires, start.Add(110*time.Second))
		}
	})

	t.Run("CatchUpPushesEveryMissedTime", func(t *testing.T) {
		s := setupSchedules(t)
		settings := appendEach("@every 1s")
		settings.CatchUp = 10
		s.create("tick", settings)
		s.clock.advance(10 * time.Second)
		fires := s.fire()
		if len(fires) != 1 || fires[0].Missed != 0 {
			t.Fatalf("fires %+v", fires)
		}
		if got, want := s.identifiers(), stamps(every(start.Add(time.Second), time.Second, 10)...); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
	})

	t.Run("CatchUpIsBounded", func(t *testing.T) {
		s := setupSchedules(t)
		settings := appendEach("@every 1s")
		settings.CatchUp = 4
		s.create("tick", settings)
		s.clock.advance(10 * time.Second)
		fires := s.fire()
		if len(fires) != 1 || fires[0].Missed != 6 {
			t.Fatalf("fires %+v, want 4 pushed and 6 missed", fires)
		}
		if got, want := s.identifiers(), stamps(every(start.Add(7*time.Second), time.Second, 4)...); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want the 4 latest %v", got, want)
		}
	})

	t.Run("CatchUpBeyondTheQueueCapPushesTheLatest", func(t *testing.T) {
		// Ten times missed, a catch-up of five and a queue cap of two: the five would
		// never fit, so the latest is pushed alone and nine are missed, instead of the
		// schedule staying due and refused at every round.
		s := setupSchedules(t)
		if _, err := s.repo.UpdateSettings(s.ctx, s.pool, s.topic, func(ts *repository.TopicSettings) { ts.QueueCap = 2 }); err != nil {
			t.Fatal(err)
		}
		settings := appendEach("@every 1s")
		settings.CatchUp = 5
		s.create("tick", settings)
		s.clock.advance(10 * time.Second)
		fires := s.fire()
		if len(fires) != 1 || len(fires[0].Times) != 1 || fires[0].Missed != 9 {
			t.Fatalf("fires %+v, want the latest time pushed and 9 missed", fires)
		}
		if got, want := s.identifiers(), stamps(start.Add(10*time.Second)); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
		// a catch-up that fits is pushed whole
		s.clock.advance(time.Second)
		if fires := s.fire(); len(fires) != 1 || len(fires[0].Times) != 1 || fires[0].Missed != 0 {
			t.Fatalf("fires %+v, want the one time due", fires)
		}
		// and with the queue full the schedule waits: refused, still due
		s.clock.advance(3 * time.Second)
		if _, err := s.sched.FireSchedules(s.ctx, s.pool); !errors.Is(err, repository.ErrQueueFull) {
			t.Fatalf("fire with the queue full: %v, want ErrQueueFull", err)
		}
		if got := len(s.identifiers()); got != 2 {
			t.Errorf("%d tasks after the refusal, want 2", got)
		}
	})

	t.Run("CronCatchUpOverDays", func(t *testing.T) {
		s := setupSchedules(t)
		settings := appendEach("0 3 * * *")
		settings.CatchUp = 3
		s.create("nightly", settings)
		s.clock.advance(10 * 24 * time.Hour) // 10 nightly times missed
		fires := s.fire()
		if len(fires) != 1 || fires[0].Missed != 7 {
			t.Fatalf("fires %+v, want 3 pushed and 7 missed", fires)
		}
		want := stamps(every(time.Date(2026, 3, 9, 3, 0, 0, 0, time.UTC), 24*time.Hour, 3)...)
		if got := s.identifiers(); !slices.Equal(got, want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
		sc, _ := s.sched.Schedule(s.ctx, s.pool, "nightly")
		if want := time.Date(2026, 3, 12, 3, 0, 0, 0, time.UTC); !sc.NextFire.Equal(want) {
			t.Errorf("next fire %v, want %v", sc.NextFire, want)
		}
	})
}

// TestScheduleStrayNextFire: a next fire time that is not one of the spec's (set by hand
// in SQL, or computed by an earlier pgtask whose zone arithmetic erred) pushes nothing
// when it comes and moves on to the spec's next time; it used to panic the firer (an
// index out of range on an empty list of due times).
func TestScheduleStrayNextFire(t *testing.T) {
	s := setupSchedules(t)
	s.create("stray", appendEach("30 2 * * *"))
	if _, err := s.pool.Exec(s.ctx, `UPDATE task_schedule SET next_fire = '2026-03-02T02:45:00Z' WHERE name = 'stray'`); err != nil {
		t.Fatal(err)
	}
	s.clock.set(time.Date(2026, 3, 2, 2, 46, 0, 0, time.UTC))
	if fires := s.fire(); len(fires) != 0 {
		t.Errorf("fires %+v, want none", fires)
	}
	sc, err := s.sched.Schedule(s.ctx, s.pool, "stray")
	if want := time.Date(2026, 3, 3, 2, 30, 0, 0, time.UTC); err != nil || !sc.NextFire.Equal(want) {
		t.Errorf("next fire %v (%v), want %v", sc.NextFire, err, want)
	}
	s.clock.set(time.Date(2026, 3, 3, 2, 30, 0, 0, time.UTC))
	s.fire()
	if got, want := s.identifiers(), []string{"2026-03-03T02:30:00Z"}; !slices.Equal(got, want) {
		t.Errorf("pushed %v, want %v", got, want)
	}
}

// TestNextFiresWallClockRule checks the documented rule in every zone with unusual
// changes, around each of their changes in two stretches of years (2005–2012 from the
// zone database's table, 2037–2040 from its rule for the future): a fire time is an
// instant whose wall-clock time matches the spec; for a fixed-time spec (Vixie cron's
// rule: no * or ? starting its seconds, minute or hour field) a time the clocks skip
// fires at the first instant after the gap and one they pass twice fires the first time
// only; for the others a time the clocks skip does not fire and one they pass twice
// fires twice. The reference steps through real time and matches each instant's wall
// clock (and, for fixed-time specs, the wall-clock times a step skipped, and the times
// passed before); NextFires must give exactly its instants.
func TestNextFiresWallClockRule(t *testing.T) {
	specs := []struct {
		spec  string
		step  time.Duration
		fixed bool // a fixed-time spec: Vixie cron's rule
		match func(l time.Time) bool
	}{
		{"30 2 * * *", time.Minute, true, func(l time.Time) bool { return l.Hour() == 2 && l.Minute() == 30 }},
		{"45 1 * * *", time.Minute, true, func(l time.Time) bool { return l.Hour() == 1 && l.Minute() == 45 }},
		{"0 2 * * *", time.Minute, true, func(l time.Time) bool { return l.Hour() == 2 && l.Minute() == 0 }},
		{"@daily", time.Minute, true, func(l time.Time) bool { return l.Hour() == 0 && l.Minute() == 0 }},
		{"59 23 * * *", time.Minute, true, func(l time.Time) bool { return l.Hour() == 23 && l.Minute() == 59 }},
		{"@hourly", time.Minute, false, func(l time.Time) bool { return l.Minute() == 0 }},
		{"*/15 * * * *", time.Minute, false, func(l time.Time) bool { return l.Minute()%15 == 0 }},
		{"30 */20 * * * *", 10 * time.Second, false, func(l time.Time) bool { return l.Second() == 30 && l.Minute()%20 == 0 }},
		{"0 1 * * sun", time.Minute, true, func(l time.Time) bool { return l.Weekday() == time.Sunday && l.Hour() == 1 && l.Minute() == 0 }},
	}
	// wall is an instant's wall-clock time in loc, as a UTC time of the same fields
	wall := func(x time.Time, loc *time.Location) time.Time {
		l := x.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
	}
	// repeated reports whether x's wall-clock time was passed before, the clocks having
	// fallen back since (by up to three hours)
	repeated := func(x time.Time, loc *time.Location) bool {
		for d := 15 * time.Minute; d <= 3*time.Hour; d += 15 * time.Minute {
			if wall(x.Add(-d), loc).Equal(wall(x, loc)) {
				return true
			}
		}
		return false
	}
	zones := []string{
		"Europe/Paris", "America/New_York", // whole hours
		"Australia/Lord_Howe",                 // half an hour
		"Pacific/Chatham", "America/St_Johns", // odd offsets; St_Johns changed at 00:01
		"America/Havana", "America/Santiago", "America/Sao_Paulo", "Asia/Tehran", // at midnight
		"Antarctica/Troll", // two hours
		"Pacific/Apia",     // skipped a whole day (2011-12-30)
	}
	for _, tz := range zones {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Fatalf("%s: %v (the zone database is needed: Go's embedded one or the system's)", tz, err)
		}
		var changes []time.Time
		for _, years := range [][2]int{{2005, 2012}, {2037, 2040}} {
			at := time.Date(years[0], 1, 1, 0, 0, 0, 0, time.UTC)
			stop := time.Date(years[1]+1, 1, 1, 0, 0, 0, 0, time.UTC)
			for {
				_, end := at.In(loc).ZoneBounds()
				if !end.IsZero() && !end.After(at) {
					at = at.Add(24 * time.Hour) // Go's end a day early at a leap year's end
					continue
				}
				if end.IsZero() || !end.Before(stop) {
					break
				}
				changes = append(changes, end)
				at = end
			}
		}
		// the ends of leap years, where Go's time.Time.ZoneBounds errs
		changes = append(changes, time.Date(2040, 12, 31, 12, 0, 0, 0, loc), time.Date(2044, 12, 31, 12, 0, 0, 0, loc))
		if len(changes) < 2 {
			t.Fatalf("%s: %d changes found", tz, len(changes))
		}
		for _, change := range changes {
			from, to := change.Add(-30*time.Hour), change.Add(30*time.Hour)
			for _, sp := range specs {
				var want []string
				for x := from.Truncate(sp.step).Add(sp.step); !x.After(to); x = x.Add(sp.step) {
					gap := false // a fixed-time spec's skipped times fire as the gap ends
					if before := wall(x.Add(-sp.step), loc); sp.fixed && wall(x, loc).Sub(before) > sp.step {
						for w := before.Add(sp.step); w.Before(wall(x, loc)); w = w.Add(sp.step) {
							gap = gap || sp.match(w)
						}
					}
					if gap || sp.match(x.In(loc)) && !(sp.fixed && repeated(x, loc)) {
						want = append(want, x.In(loc).Format(time.RFC3339))
					}
				}
				got := []string{}
				times, err := repository.NextFires(sp.spec, tz, from, len(want)+1)
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range times {
					if !x.After(to) {
						got = append(got, x.In(loc).Format(time.RFC3339))
					}
				}
				if !slices.Equal(got, want) && len(want) > 0 {
					t.Errorf("%s %q around %v: fires %v, want %v", tz, sp.spec, change.In(loc), got, want)
				} else if len(want) == 0 && len(got) != 0 {
					t.Errorf("%s %q around %v: fires %v, want none", tz, sp.spec, change.In(loc), got)
				}
			}
		}
	}
}

// TestScheduleCronTimes steps a clock minute by minute (second by second where seconds
// matter) over days with daylight-saving changes and checks every fire time.
func TestScheduleCronTimes(t *testing.T) {
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name, spec, zone string
		from, to         time.Time
		step             time.Duration
		want             []string
	}{
		{
			name: "SecondsStepsAndRanges", spec: "*/20 0-1 12 * * *", zone: "UTC",
			from: utc("2026-03-01T11:59:00Z"), to: utc("2026-03-01T12:03:00Z"), step: time.Second,
			want: []string{"2026-03-01T12:00:00Z", "2026-03-01T12:00:20Z", "2026-03-01T12:00:40Z",
				"2026-03-01T12:01:00Z", "2026-03-01T12:01:20Z", "2026-03-01T12:01:40Z"},
		},
		{
			name: "NamesAndLists", spec: "0 9,17 * jan-mar mon,fri", zone: "UTC",
			from: utc("2026-03-01T00:00:00Z"), to: utc("2026-03-07T00:00:00Z"), step: time.Minute,
			want: []string{"2026-03-02T09:00:00Z", "2026-03-02T17:00:00Z", "2026-03-06T09:00:00Z", "2026-03-06T17:00:00Z"},
		},
		{
			// Europe/Paris springs forward on 2026-03-29 at 02:00 CET: 02:30 does not exist
			// that day; a fixed-time spec fires right after the gap, at 03:00 CEST.
			name: "SpringForwardFiresAfterTheGap", spec: "30 2 * * *", zone: "Europe/Paris",
			from: utc("2026-03-27T12:00:00Z"), to: utc("2026-03-30T12:00:00Z"), step: time.Minute,
			want: []string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			// Europe/Paris falls back on 2026-10-25 at 03:00 CEST: 02:30 happens twice; a
			// fixed-time spec fires the first time only (the README's nightly report).
			name: "FallBackFiresOnce", spec: "0 30 2 * * *", zone: "Europe/Paris",
			from: utc("2026-10-24T12:00:00Z"), to: utc("2026-10-26T12:00:00Z"), step: time.Minute,
			want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
		{
			// A spec whose minute field is * is no fixed-time spec: every minute of the
			// hour from 02:00 fires by real time, twice in the hour passed twice.
			name: "WildcardMinutesAcrossFallBack", spec: "*/30 2 * * *", zone: "Europe/Paris",
			from: utc("2026-10-24T23:00:00Z"), to: utc("2026-10-25T02:00:00Z"), step: time.Minute,
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z"},
		},
		{
			// America/Havana springs forward at midnight (2026-03-08, 00:00 to 01:00):
			// @daily's midnight does not exist that day and fires at 01:00.
			name: "SpringForwardAtMidnight", spec: "@daily", zone: "America/Havana",
			from: utc("2026-03-07T00:00:00Z"), to: utc("2026-03-09T12:00:00Z"), step: time.Minute,
			want: []string{"2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		},
		{
			// The same day, hourly at minute 0 in New York (falls back 2026-11-01 02:00
			// EDT): every real hour fires, 25 times on that day.
			name: "HourlyAcrossFallBack", spec: "@hourly", zone: "America/New_York",
			from: utc("2026-11-01T03:59:00Z"), to: utc("2026-11-01T08:00:00Z"), step: time.Minute,
			want: []string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"},
		},
		{
			// Australia/Lord_Howe springs forward by half an hour on 2026-10-04 at 02:00
			// (+1030 to +1100): 01:45 exists every day, and fires every day at 01:45.
			name: "HalfHourSpringForward", spec: "45 1 * * *", zone: "Australia/Lord_Howe",
			from: utc("2026-10-03T12:00:00Z"), to: utc("2026-10-05T16:00:00Z"), step: time.Minute,
			want: []string{"2026-10-03T15:15:00Z", "2026-10-04T14:45:00Z", "2026-10-05T14:45:00Z"},
		},
		{
			// It falls back by half an hour on 2026-04-05 at 02:00 (+1100 to +1030):
			// 01:45 happens twice and fires the first time, 02:00 once, after the change.
			name: "HalfHourFallBack", spec: "0,45 1,2 * * *", zone: "Australia/Lord_Howe",
			from: utc("2026-04-04T14:00:00Z"), to: utc("2026-04-04T16:00:00Z"), step: time.Minute,
			want: []string{"2026-04-04T14:45:00Z", "2026-04-04T15:30:00Z"},
		},
		{
			// America/St_Johns changed its clocks at 00:01 until 2011 (2008-03-09,
			// -0330 to -0230): midnight exists on both days and fires on both.
			name: "ChangeAtMidnight", spec: "@daily", zone: "America/St_Johns",
			from: utc("2008-03-08T12:00:00Z"), to: utc("2008-03-10T12:00:00Z"), step: time.Minute,
			want: []string{"2008-03-09T03:30:00Z", "2008-03-10T02:30:00Z"},
		},
		{
			name: "DailyInAZone", spec: "@daily", zone: "Asia/Tokyo",
			from: utc("2026-03-01T00:00:00Z"), to: utc("2026-03-03T00:00:00Z"), step: time.Minute,
			want: []string{"2026-03-01T15:00:00Z", "2026-03-02T15:00:00Z"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := setupSchedules(t)
			s.clock.set(c.from)
			settings := appendEach(c.spec)
			settings.TimeZone = c.zone
			s.create("cron", settings)
			for s.clock.now().Before(c.to) {
				s.clock.advance(c.step)
				s.fire()
			}
			if got := s.identifiers(); !slices.Equal(got, c.want) {
				t.Errorf("fired at %v, want %v", got, c.want)
			}
			// The library's computation, without the database, agrees.
			times, err := repository.NextFires(c.spec, c.zone, c.from, len(c.want)+1)
			if err != nil || !slices.Equal(stamps(times[:len(c.want)]...), c.want) || !times[len(c.want)].After(c.to) {
				t.Errorf("NextFires %v, %v", times, err)
			}
		})
	}
}

func TestSchedulePause(t *testing.T) {
	t.Run("ResumingARunningScheduleChangesNothing", func(t *testing.T) {
		// nor does setting a value to what it is: the updated time stays when the
		// settings last changed (it moved at every such call)
		s := setupSchedules(t)
		created := s.create("tick", appendEach("@every 1s"))
		s.clock.advance(time.Minute)
		resumed, err := s.sched.ResumeSchedule(s.ctx, s.pool, "tick", false)
		if err != nil || !resumed.Updated.Equal(created.Updated) || !resumed.NextFire.Equal(created.NextFire) {
			t.Errorf("resume of a running schedule: %+v, %v; want it as created (updated %v)", resumed, err, created.Updated)
		}
		set, err := s.sched.UpdateSchedule(s.ctx, s.pool, "tick", func(c *repository.ScheduleSettings) { c.Priority = created.Priority })
		if err != nil || !set.Updated.Equal(created.Updated) {
			t.Errorf("a priority set to what it is: %+v, %v; want updated %v still", set, err, created.Updated)
		}
		if got, err := s.sched.Schedule(s.ctx, s.pool, "tick"); err != nil || !got.Updated.Equal(created.Updated) {
			t.Errorf("read back: %+v, %v; want updated %v", got, err, created.Updated)
		}
	})

	t.Run("PausedDoesNotFireAndResumeDoesNotReplay", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("tick", appendEach("@every 1s"))
		if sc, err := s.sched.PauseSchedule(s.ctx, s.pool, "tick"); err != nil || !sc.Paused {
			t.Fatalf("pause: %+v, %v", sc, err)
		}
		s.clock.advance(5 * time.Second)
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("a paused schedule fired %+v", fires)
		}
		s.clock.advance(500 * time.Millisecond)
		sc, err := s.sched.ResumeSchedule(s.ctx, s.pool, "tick", false)
		if err != nil || sc.Paused || !sc.NextFire.Equal(start.Add(6*time.Second)) {
			t.Fatalf("resume: %+v, %v; want next fire %v", sc, err, start.Add(6*time.Second))
		}
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("resuming replayed %+v", fires)
		}
		s.clock.advance(500 * time.Millisecond)
		if got, want := stampsOf(s.fire()), stamps(start.Add(6*time.Second)); !slices.Equal(got, want) {
			t.Errorf("after resuming fired %v, want %v", got, want)
		}
	})

	t.Run("ResumeWithReplay", func(t *testing.T) {
		s := setupSchedules(t)
		settings := appendEach("@every 1s")
		settings.CatchUp = 100
		s.create("tick", settings)
		s.clock.advance(time.Second)
		s.fire()
		if _, err := s.sched.PauseSchedule(s.ctx, s.pool, "tick"); err != nil {
			t.Fatal(err)
		}
		s.clock.advance(5 * time.Second)
		if _, err := s.sched.ResumeSchedule(s.ctx, s.pool, "tick", true); err != nil {
			t.Fatal(err)
		}
		if got, want := stampsOf(s.fire()), stamps(every(start.Add(2*time.Second), time.Second, 5)...); !slices.Equal(got, want) {
			t.Errorf("replayed %v, want %v", got, want)
		}
	})

	t.Run("Unknown", func(t *testing.T) {
		s := setupSchedules(t)
		if _, err := s.sched.PauseSchedule(s.ctx, s.pool, "nope"); !errors.Is(err, repository.ErrUnknownSchedule) {
			t.Errorf("pause unknown: %v", err)
		}
		if _, err := s.sched.Schedule(s.ctx, s.pool, "nope"); !errors.Is(err, repository.ErrUnknownSchedule) {
			t.Errorf("get unknown: %v", err)
		}
		if removed, err := s.sched.RemoveSchedule(s.ctx, s.pool, "nope"); removed || err != nil {
			t.Errorf("remove unknown: %v, %v", removed, err)
		}
	})
}

// stampsOf lists the fire times of fires, formatted as stamps.
func stampsOf(fires []repository.Fire) []string {
	var out []string
	for _, f := range fires {
		out = append(out, stamps(f.Times...)...)
	}
	return out
}

func TestScheduleUpdate(t *testing.T) {
	t.Run("NewSpecRestartsFromNow", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("job", repository.ScheduleSettings{Spec: "@daily"})
		s.clock.advance(30 * time.Second)
		sc, err := s.sched.UpdateSchedule(s.ctx, s.pool, "job", func(c *repository.ScheduleSettings) {
			c.Spec = "@every 1m"
			c.Priority = -2
		})
		if err != nil || sc.Spec != "@every 1m" || sc.Priority != -2 || !sc.NextFire.Equal(start.Add(90*time.Second)) {
			t.Errorf("update: %+v, %v", sc, err)
		}
		same, err := s.sched.UpdateSchedule(s.ctx, s.pool, "job", func(c *repository.ScheduleSettings) { c.Input = "x" })
		if err != nil || !same.NextFire.Equal(sc.NextFire) || same.Input != "x" {
			t.Errorf("an input change moved the next fire: %+v, %v", same, err)
		}
	})

	// A new spec restarts from the transaction's clock (now()), which can lie before a
	// fire another firer committed meanwhile: the restart goes from that fire on, not
	// back to push its time again.
	t.Run("NewSpecNeverRestartsBeforeTheLastFire", func(t *testing.T) {
		f := setup(t)
		repo := f.newRepo("real-clock") // the database's clock
		if _, err := repo.CreateSchedule(f.ctx, f.pool, "job", repository.ScheduleSettings{Topic: f.topic,
			Spec: "@every 1s", Identifier: "job-{time}", Insertion: new(repository.Append), CatchUp: 100}); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.FireSchedules(f.ctx, f.pool); err != nil { // computes the first fire time
			t.Fatal(err)
		}
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := tx.Exec(f.ctx, "SELECT now()"); err != nil { // the transaction's clock starts
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond)
		if fires, err := repo.FireSchedules(f.ctx, f.pool); err != nil || len(fires) == 0 {
			t.Fatalf("fire: %v, %v", fires, err)
		}
		sc, err := repo.UpdateSchedule(f.ctx, tx, "job", func(c *repository.ScheduleSettings) { c.Spec = "@every 1000ms" })
		if err != nil {
			t.Fatal(err)
		}
		if !sc.NextFire.After(sc.LastFire) {
			t.Errorf("after the update: next fire %v, not after the last fire %v", sc.NextFire, sc.LastFire)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		if _, err := repo.FireSchedules(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		tasks, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{}, 0, 1000, repository.Forward)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, task := range tasks {
			if seen[task.Identifier] {
				t.Errorf("fire time %s pushed twice", task.Identifier)
			}
			seen[task.Identifier] = true
		}
	})

	t.Run("BadChangeWritesNothing", func(t *testing.T) {
		s := setupSchedules(t)
		before := s.create("job", repository.ScheduleSettings{Spec: "@daily"})
		for _, c := range []struct {
			change   func(*repository.ScheduleSettings)
			sentinel error
			says     string
		}{
			{func(c *repository.ScheduleSettings) { c.Spec = "@every -1m" }, repository.ErrInvalid, "negative"},
			{func(c *repository.ScheduleSettings) { c.TimeZone = "Nowhere/City" }, repository.ErrInvalid, "time zone"},
			{func(c *repository.ScheduleSettings) { c.Topic = "nope"; c.Priority = 9 }, repository.ErrUnknownTopic, `"nope"`},
		} {
			if _, err := s.sched.UpdateSchedule(s.ctx, s.pool, "job", c.change); !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %v, want %v saying %q", err, c.sentinel, c.says)
			}
		}
		after, err := s.sched.Schedule(s.ctx, s.pool, "job")
		if err != nil || after.Spec != before.Spec || after.Topic != before.Topic || after.Priority != 0 || !after.Updated.Equal(before.Updated) {
			t.Errorf("after refused changes %+v, %v", after, err)
		}
	})

	t.Run("RemoveAndTopicDestroy", func(t *testing.T) {
		s := setupSchedules(t)
		s.create("a", repository.ScheduleSettings{Spec: "@daily"})
		s.createTopic("other")
		s.create("b", repository.ScheduleSettings{Topic: "other", Spec: "@daily"})
		if removed, err := s.sched.RemoveSchedule(s.ctx, s.pool, "a"); !removed || err != nil {
			t.Errorf("remove: %v, %v", removed, err)
		}
		if _, err := s.repo.Destroy(s.ctx, s.pool, "other"); err != nil {
			t.Fatal(err)
		}
		if list, err := s.sched.Schedules(s.ctx, s.pool); err != nil || len(list) != 0 {
			t.Errorf("schedules left: %+v, %v", list, err)
		}
	})

	t.Run("RunNow", func(t *testing.T) {
		s := setupSchedules(t)
		sc := s.create("job", repository.ScheduleSettings{Spec: "@daily", Identifier: "job-{time}", Paused: true})
		s.clock.advance(1500 * time.Millisecond)
		task, err := s.sched.RunSchedule(s.ctx, s.pool, "job")
		if err != nil || task.Identifier != "job-"+stamps(start.Add(time.Second))[0] {
			t.Errorf("run now: %+v, %v", task, err)
		}
		after, _ := s.sched.Schedule(s.ctx, s.pool, "job")
		if !after.NextFire.Equal(sc.NextFire) || after.Fires != 0 {
			t.Errorf("run now changed the schedule: %+v", after)
		}
	})
}

func TestScheduleSQL(t *testing.T) {
	t.Run("DeclareAndFire", func(t *testing.T) {
		s := setupSchedules(t)
		var name string
		if err := s.pool.QueryRow(s.ctx, `SELECT task_schedule('sql', 'topic', '@every 1s', identifier => '{time}', insertion => 'append')`).Scan(&name); err != nil || name != "sql" {
			t.Fatalf("task_schedule: %q, %v", name, err)
		}
		sc, err := s.sched.Schedule(s.ctx, s.pool, "sql")
		if err != nil || !sc.NextFire.IsZero() || *sc.Insertion != repository.Append {
			t.Fatalf("declared: %+v, %v", sc, err)
		}
		// created by the database clock: the first fire time is the first after it
		s.clock.set(sc.Created.Truncate(time.Second))
		if fires := s.fire(); len(fires) != 0 {
			t.Errorf("fired before the first fire time: %+v", fires)
		}
		first := sc.Created.Truncate(time.Second).Add(time.Second)
		if sc, _ := s.sched.Schedule(s.ctx, s.pool, "sql"); !sc.NextFire.Equal(first) {
			t.Errorf("first fire time %v, want %v", sc.NextFire, first)
		}
		s.clock.set(first)
		if got, want := stampsOf(s.fire()), stamps(first); !slices.Equal(got, want) {
			t.Errorf("fired %v, want %v", got, want)
		}
	})

	t.Run("BadInputIsRefusedAndNothingWritten", func(t *testing.T) {
		s := setupSchedules(t)
		if _, err := s.pool.Exec(s.ctx, `SELECT task_schedule('taken', 'topic', '@hourly')`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			call, state, says string
		}{
			{`task_schedule('a', 'topic', '61 * * * *')`, "22023", "minute 61 is out of range 0-59"},
			{`task_schedule('a', 'topic', '* * *')`, "22023", "has 3 fields"},
			{`task_schedule('a', 'topic', '0 0 * foo *')`, "22023", "'foo' is not a number or a month name"},
			{`task_schedule('a', 'topic', '@every -5s')`, "22023", "interval -5s is negative"},
			{`task_schedule('a', 'topic', '@hourly', time_zone => 'Mars/Olympus')`, "22023", "unknown time zone 'Mars/Olympus'"},
			{`task_schedule('a', 'nope', '@hourly')`, "PT001", "unknown topic 'nope'"},
			{`task_schedule('taken', 'topic', '@hourly')`, "PT016", "schedule 'taken' exists"},
			{`task_schedule('a', 'topic', '@hourly', insertion => 'sideways')`, "PT002", "unknown insertion"},
			{`task_schedule('a', 'topic', '@hourly', catch_up => -1)`, "22023", "catch_up -1"},
			{`task_schedule('a', 'topic', '0 0 30 2 *')`, "22023", "spec '0 0 30 2 *' never fires: none of its months has a day 30"},
			{`task_schedule('a', 'topic', '* * , * *')`, "22023", "never fires: its day of month field names no value"},
			{`task_schedule('a', 'topic', '*-5 * * * *')`, "22023", "minute field '*-5' is not a value, a range or a step"},
			{`task_schedule('a', 'topic', repeat('* ', 126))`, "22023", "spec is 252 characters long, at most 250 allowed"},
		} {
			_, err := s.pool.Exec(s.ctx, "SELECT "+c.call)
			if repository.SQLState(err) != c.state || err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %v, want SQLSTATE %s saying %q", c.call, err, c.state, c.says)
			}
		}
		var n int
		if err := s.pool.QueryRow(s.ctx, "SELECT count(*) FROM task_schedule").Scan(&n); err != nil || n != 1 {
			t.Errorf("%d schedules after the refusals (%v), want 1", n, err)
		}
	})

	t.Run("SpecsAgreeWithGo", func(t *testing.T) {
		s := setupSchedules(t)
		for _, spec := range []string{"*/5 * * * *", "0 30 9 * * mon-fri", "0 0 1 jan,jul *", "5/10 * * * *", "@hourly", "@every 1h30m",
			"@every 90s", "@every 1.5s", "@every -5s", "* * *", "61 * * * *", "5-1 * * * *", "*/0 * * * *", "x * * * *",
			"0 0 * foo *", "TZ=UTC * * * * *", "@fortnightly", "", "0 0 * * 7", "0 0 0 * *", "? * * * *",
			"@HOURLY", "@Every 5s", "@every 5S", "0 0 * JAN MON", "@every +5s", "@every 0s", "1,2-3/2 * * * *", "1-2-3 * * * *",
			"0 0 1-31/0 * *", "@every", "* * * * * * *",
			// days of month that none of the months has: never, unless a day of the week is
			// named too (either then matches), or the day of week is * with a step
			"0 0 30 2 *", "0 0 30-31 feb ?", "0 0 0 31 4,6,9,11 *", "0 0 31 apr-jun/2 *", "0 0 31 2-12/2 *",
			"0 0 31 */2 *", "0 0 31 2/2 *", "0 0 29 2 *", "0 0 30 2 mon", "0 0 30 2 */1", "0 0 30 2 */2", "0 0 30 2 1-6",
			"0 0 30,31 2,4 *", "0 0 30/2 2 *", "0 0 * 2 *", "0 0 */2 2 *", "0 0 31 1-2 *", "0 0 31 jan,feb *",
			"0 0 1,31 4 *", "0 0 31/5 4 *", "0 0 ? 2 ?", "0 0 30 2 ?", "*/1000000000 * * * *", "*/0000000001 * * * *"} {
			var problem *string
			if err := s.pool.QueryRow(s.ctx, "SELECT task_schedule_spec_problem($1)", spec).Scan(&problem); err != nil {
				t.Fatal(err)
			}
			goErr := repository.ValidateScheduleSpec(spec, "UTC")
			if (problem == nil) != (goErr == nil) {
				t.Errorf("spec %q: SQL says %v, Go says %v", spec, deref(problem), goErr)
			}
		}
	})

	// A value out of its field's range is named alike by Go and SQL: Go gave the cron
	// library's "above maximum (6)" for a Sunday written 7.
	t.Run("OutOfRangeNamedAlike", func(t *testing.T) {
		s := setupSchedules(t)
		for spec, want := range map[string]string{
			"0 0 * * 7": "day of week 7 is out of range 0-6", "0 0 * * 1-7": "day of week 7 is out of range 0-6",
			"61 * * * *": "minute 61 is out of range 0-59", "0 24 * * *": "hour 24 is out of range 0-23",
			"0 0 0 * *": "day of month 0 is out of range 1-31", "0 0 32 * *": "day of month 32 is out of range 1-31",
			"0 0 * 13 *": "month 13 is out of range 1-12", "60 0 0 * * *": "second 60 is out of range 0-59",
			"0 0 * 0/2 *": "month 0 is out of range 1-12",
		} {
			var problem *string
			if err := s.pool.QueryRow(s.ctx, "SELECT task_schedule_spec_problem($1)", spec).Scan(&problem); err != nil {
				t.Fatal(err)
			}
			goErr := repository.ValidateScheduleSpec(spec, "UTC")
			if problem == nil || !strings.HasSuffix(*problem, ": "+want) {
				t.Errorf("spec %q: SQL says %v, want %q", spec, deref(problem), want)
			}
			if goErr == nil || !strings.HasSuffix(goErr.Error(), ": "+want) {
				t.Errorf("spec %q: Go says %v, want %q", spec, goErr, want)
			}
		}
	})

	// A time zone Go loads but the database does not list (the leap-second zones,
	// right/…) was taken from Go and REST and refused by task_schedule; one both list
	// from the host's files that processors do not read alike (localtime, the host's own
	// zone; posixrules; posix/…, missing from Go's built-in zone database) was taken by
	// both (migration 000038).
	t.Run("TimeZonesAgreeWithGo", func(t *testing.T) {
		s := setupSchedules(t)
		for _, tz := range []string{"UTC", "Europe/Paris", "Etc/GMT+5", "EST5EDT", "posix/Europe/Paris", "Factory",
			"localtime", "posixrules", "posix/UTC", "right/UTC", "right/Europe/Paris", "utc", "Mars/Olympus", "Europe/",
			"/UTC", "Europe//Paris", "../UTC", "zone.tab"} {
			tx, err := s.pool.Begin(s.ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, sqlErr := tx.Exec(s.ctx, "SELECT task_schedule('zone', $1, '@hourly', time_zone => $2)", s.topic, tz)
			_ = tx.Rollback(s.ctx)
			if sqlErr != nil && !strings.Contains(sqlErr.Error(), "time zone") {
				t.Fatalf("time zone %q: task_schedule: %v, want a refusal of the zone or none", tz, sqlErr)
			}
			goErr := repository.ValidateScheduleSpec("@hourly", tz)
			if (sqlErr == nil) != (goErr == nil) {
				t.Errorf("time zone %q: task_schedule says %v; Go says %v", tz, sqlErr, goErr)
			}
		}
	})
}

func deref(p *string) string {
	if p == nil {
		return "<ok>"
	}
	return *p
}

// TestScheduleTimesByTheDatabaseClock: a schedule's fire times are computed by the
// database's clock, the one FireSchedules fires by, at the statement that writes them
// (statement_timestamp(), as task_schedule_check reads it), not at its transaction's
// start: a first fire time, and one restarted by a new spec, follow the statement's.
func TestScheduleTimesByTheDatabaseClock(t *testing.T) {
	f := setup(t)
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	clock := func() time.Time {
		var now time.Time
		if err := tx.QueryRow(f.ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	began := clock()
	time.Sleep(1500 * time.Millisecond) // the transaction's start is a second behind
	// within wants the next fire every after a time between before and after
	within := func(what string, got time.Time, before, after time.Time, every time.Duration) {
		t.Helper()
		lo, hi := before.Truncate(time.Second).Add(every), after.Truncate(time.Second).Add(every)
		if got.Before(lo) || got.After(hi) {
			t.Errorf("%s: next fire %v, want within %v..%v (the transaction began at %v)", what, got, lo, hi, began)
		}
	}
	before := clock()
	sc, err := f.repo.CreateSchedule(f.ctx, tx, "tick", repository.ScheduleSettings{Topic: f.topic, Spec: "@every 1s"})
	if err != nil {
		t.Fatal(err)
	}
	within("created", sc.NextFire, before, clock(), time.Second)
	before = clock()
	sc, err = f.repo.UpdateSchedule(f.ctx, tx, "tick", func(s *repository.ScheduleSettings) { s.Spec = "@every 3s" })
	if err != nil {
		t.Fatal(err)
	}
	within("spec changed", sc.NextFire, before, clock(), 3*time.Second)
}

// TestScheduleSQLIdentifierAfterTheFireTime: task_schedule refuses an identifier that
// fits in 500 characters but whose tasks' identifiers, {time} replaced by the fire time
// (20 characters), do not, as ScheduleSettings.Validate does; such a schedule never
// fired. Nothing is written.
func TestScheduleSQLIdentifierAfterTheFireTime(t *testing.T) {
	s := setupSchedules(t)
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		identifier string
		expanded   int // characters once {time} is replaced; above 500 is refused
	}{
		{x(500), 500},
		{x(480) + "{time}", 500},
		{x(481) + "{time}", 501},
		{x(494) + "{time}", 514},
		{strings.Repeat("{time}", 25), 500},
		{strings.Repeat("{time}", 26), 520},
		{strings.Repeat("é", 480) + "{time}", 500},
		{strings.Repeat("é", 481) + "{time}", 501},
		{"{time" + x(490) + "}", 496}, // no placeholder
	} {
		_, err := s.pool.Exec(s.ctx, "SELECT task_schedule('job', 'topic', '@hourly', identifier => $1)", tc.identifier)
		goErr := repository.ScheduleSettings{Topic: "topic", Spec: "@hourly", Identifier: tc.identifier}.Validate()
		if tc.expanded > 500 {
			if want := fmt.Sprintf("identifier is %d characters long once {time} is replaced", tc.expanded); repository.SQLState(err) != "22023" ||
				!strings.Contains(err.Error(), want) {
				t.Errorf("identifier of %d characters expanded: %v, want 22023 saying %q", tc.expanded, err, want)
			}
			if !errors.Is(goErr, repository.ErrInvalid) {
				t.Errorf("identifier of %d characters expanded: Go says %v, want ErrInvalid", tc.expanded, goErr)
			}
			continue
		}
		if err != nil || goErr != nil {
			t.Errorf("identifier of %d characters expanded: SQL %v, Go %v; want it accepted", tc.expanded, err, goErr)
		}
		if _, err := s.pool.Exec(s.ctx, "DELETE FROM task_schedule"); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.pool.QueryRow(s.ctx, "SELECT count(*) FROM task_schedule").Scan(&n); err != nil || n != 0 {
		t.Errorf("%d schedules after the refusals (%v), want none", n, err)
	}
}

// TestAZoneStoredBeforeTheCheck: a schedule whose zone was stored before the Go API
// refused the leap-second zones (right/…) still fires and can still be changed and
// paused; only a change to such a zone is refused.
func TestAZoneStoredBeforeTheCheck(t *testing.T) {
	s := setupSchedules(t)
	appendMode := repository.Append
	s.create("legacy", repository.ScheduleSettings{Spec: "@every 1s", Identifier: "legacy-{time}", Insertion: &appendMode})
	// stored before the check: written past task_schedule_check (migration 000041),
	// which refuses the zone now
	legacy := []string{
		"BEGIN",
		"SET LOCAL session_replication_role = replica",
		"UPDATE task_schedule SET time_zone = 'right/UTC' WHERE name = 'legacy'",
		"COMMIT",
	}
	conn, err := s.pool.Acquire(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range legacy {
		if _, err := conn.Exec(s.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Release()
	s.fire() // a first fire time
	s.clock.advance(2 * time.Second)
	if fires := s.fire(); len(fires) != 1 || len(fires[0].Tasks) == 0 {
		t.Fatalf("fires of the schedule in right/UTC: %+v, want its tasks", fires)
	}
	sc, err := s.sched.UpdateSchedule(s.ctx, s.pool, "legacy", func(st *repository.ScheduleSettings) { st.Priority = 3 })
	if err != nil || sc.Priority != 3 || sc.TimeZone != "right/UTC" {
		t.Fatalf("update of another setting: %+v, %v", sc, err)
	}
	if _, err := s.sched.PauseSchedule(s.ctx, s.pool, "legacy"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	_, err = s.sched.UpdateSchedule(s.ctx, s.pool, "legacy", func(st *repository.ScheduleSettings) { st.TimeZone = "right/Europe/Paris" })
	if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "counts leap seconds") {
		t.Fatalf("a change to right/Europe/Paris: %v, want ErrInvalid saying it counts leap seconds", err)
	}
}

// TestSchedulePage: schedules come a page at a time, by name after a position, searched
// by name or topic whatever the case.
func TestSchedulePage(t *testing.T) {
	s := setupSchedules(t)
	s.createTopic("Billing")
	for _, name := range []string{"Digest-EU", "digest-us", "invoice", "zeta"} {
		settings := repository.ScheduleSettings{Spec: "@hourly"}
		if name == "invoice" {
			settings.Topic = "Billing"
		}
		s.create(name, settings)
	}
	page := func(search, after string, size int) []string {
		t.Helper()
		list, err := s.repo.SchedulePage(s.ctx, s.pool, search, after, size)
		if err != nil {
			t.Fatalf("SchedulePage(%q, %q, %d): %v", search, after, size, err)
		}
		var names []string
		for _, sc := range list {
			names = append(names, sc.Name)
		}
		return names
	}
	first := page("", "", 2)
	if want := []string{"Digest-EU", "digest-us"}; !slices.Equal(first, want) {
		t.Fatalf("first page = %q, want %q", first, want)
	}
	if got, want := page("", first[1], 10), []string{"invoice", "zeta"}; !slices.Equal(got, want) {
		t.Fatalf("second page = %q, want %q", got, want)
	}
	if got, want := page("DIGEST", "", 10), []string{"Digest-EU", "digest-us"}; !slices.Equal(got, want) {
		t.Fatalf("search by name = %q, want %q", got, want)
	}
	if got, want := page("billing", "", 10), []string{"invoice"}; !slices.Equal(got, want) {
		t.Fatalf("search by topic = %q, want %q", got, want)
	}
	if got := page("%", "", 10); len(got) != 0 {
		t.Fatalf("search %% = %q, want none (no pattern characters)", got)
	}
	for _, size := range []int{0, repository.SchedulePageMax + 1} {
		if _, err := s.repo.SchedulePage(s.ctx, s.pool, "", "", size); !errors.Is(err, repository.ErrInvalid) {
			t.Fatalf("size %d: err = %v, want ErrInvalid", size, err)
		}
	}
	if _, err := s.repo.SchedulePage(s.ctx, s.pool, "a\x00b", "", 10); !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "search") {
		t.Fatalf("a search with a NUL byte: err = %v, want ErrInvalid naming the search", err)
	}
}

// TestScheduleFullTopicDoesNotStarveOthers: once a topic's queue cap refuses one of its
// schedules, a round leaves its other schedules for the next round untried: thousands
// of them, due the longest, took every try of every round, and the schedules of other
// topics never fired while the queue stayed full.
func TestScheduleFullTopicDoesNotStarveOthers(t *testing.T) {
	f := setup(t)
	f.fullTopic("full", "filler")
	f.exec(
		// one schedule by the function (which checks its zone: 25 ms a call), and 2 000
		// copies of its row
		`SELECT task_schedule('full-0', 'full', '@every 1s', identifier => 'f{time}')`,
		`INSERT INTO task_schedule SELECT (jsonb_populate_record(c, jsonb_build_object('name', 'full-' || g))).*
		 FROM task_schedule c, generate_series(1, 2000) g WHERE c.name = 'full-0'`,
		`SELECT task_schedule('healthy', 'topic', '@every 1s', identifier => 'h{time}')`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '10 minutes' WHERE topic = 'full'`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '1 minute' WHERE name = 'healthy'`,
	)
	// a clock that stands still: with the wall clock, a second that turned during the
	// call made the healthy schedule due again, and fired twice
	start := time.Now()
	firer, err := repository.New(repository.Config{Owner: "firer", Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	fires, err := firer.FireSchedules(f.ctx, f.pool)
	if !errors.Is(err, repository.ErrQueueFull) {
		t.Errorf("fire: %v, want the full queue reported", err)
	}
	if len(fires) != 1 || fires[0].Schedule != "healthy" {
		t.Errorf("fired %+v, want the healthy schedule", fires)
	}
	if n := strings.Count(fmt.Sprint(err), "queue length cap reached"); n != 1 {
		t.Errorf("the error names the full queue %d times, want once (one schedule tried)", n)
	}
}

// TestScheduleRefusedLetsItsTopicsOthersGoFirst: a schedule the queue cap refuses, due
// the longest, came first whenever its topic was tried again, and was refused again: a
// schedule of the topic whose push the cap admits (one that supersedes as many READY
// tasks as it adds) was never tried while it was.
func TestScheduleRefusedLetsItsTopicsOthersGoFirst(t *testing.T) {
	f := setup(t)
	f.fullTopic("full", "digest")
	f.exec(
		`SELECT task_schedule('grows', 'full', '@every 1s', identifier => 'g{time}')`,
		`SELECT task_schedule('grows-too', 'full', '@every 1s', identifier => 'h{time}')`,
		`SELECT task_schedule('replaces', 'full', '@every 1s', identifier => 'digest', insertion => 'supersede')`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '10 minutes' WHERE name = 'grows'`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '9 minutes' WHERE name = 'grows-too'`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '1 minute' WHERE name = 'replaces'`,
	)
	start := time.Now()
	var at atomic.Int64 // the firer's clock, moved by hand
	at.Store(start.UnixNano())
	firer, err := repository.New(repository.Config{Owner: "firer", Now: func() time.Time { return time.Unix(0, at.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	var fired []string
	// the topic's waits: 1 s after the first refusal (of grows), 2 s after the second
	// (of grows-too, at 1.5 s): at 4 s both refused ones still wait
	for call, offset := range []time.Duration{0, 1500 * time.Millisecond, 4 * time.Second} {
		at.Store(start.Add(offset).UnixNano())
		fires, err := firer.FireSchedules(f.ctx, f.pool)
		if call == 0 && !errors.Is(err, repository.ErrQueueFull) {
			t.Errorf("first call: %v, want the full queue reported", err)
		}
		for _, fire := range fires {
			fired = append(fired, fire.Schedule)
		}
	}
	if !slices.Contains(fired, "replaces") {
		t.Errorf("fired %v in three calls, want the schedule the cap admits", fired)
	}
}

// TestScheduleFailingOnManyTopicsDoNotStarveOthers: schedules on many full topics (their
// consumers down), whose missed fire times come first, took each call's every try: a
// schedule that could fire never did while they failed. A Repository passes over a
// schedule whose fire failed, for a while, in its later calls.
func TestScheduleFailingOnManyTopicsDoNotStarveOthers(t *testing.T) {
	// Not parallel: the bound of a call's tries is the package's.
	f := fixtureOn(t, pgtest.NewPool(t, schema.Hash(), migrate))
	repository.SetFireRound(t, 5) // as 1 000 tries against thousands of full topics
	const full = 12               // more than a call's tries in its two passes
	for i := range full {
		topic := fmt.Sprintf("full-%d", i)
		f.fullTopic(topic, "filler")
		if _, err := f.pool.Exec(f.ctx, `SELECT task_schedule($1, $1, '@every 1s', identifier => 'f{time}')`, topic); err != nil {
			t.Fatal(err)
		}
	}
	f.exec(
		`SELECT task_schedule('healthy', 'topic', '@every 1s', identifier => 'h{time}')`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '10 minutes' WHERE topic LIKE 'full-%'`,
		`UPDATE task_schedule SET next_fire = date_trunc('second', now()) - interval '1 minute' WHERE name = 'healthy'`,
	)
	// a clock that stands still: the calls come within the first refusals' second
	// however loaded the machine
	start := time.Now()
	firer, err := repository.New(repository.Config{Owner: "firer", Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	var fired []string
	for call := range 3 { // a processor's next heartbeats
		fires, err := firer.FireSchedules(f.ctx, f.pool)
		if call == 0 && !errors.Is(err, repository.ErrQueueFull) {
			t.Errorf("first call: %v, want the full queues reported", err)
		}
		for _, fire := range fires {
			fired = append(fired, fire.Schedule)
		}
	}
	if !slices.Contains(fired, "healthy") {
		t.Errorf("fired %v in three calls, want the healthy schedule among them", fired)
	}
}

// TestScheduleDeclaredInALongTransaction: a schedule declared by task_schedule() in a
// transaction open for a while is created when the statement runs, not when the
// transaction began (migration 000060): its first fire time, counted from created, was
// as old as the transaction, so it fired at once on commit (and a catch_up pushed the
// fire times from before it existed).
func TestScheduleDeclaredInALongTransaction(t *testing.T) {
	s := setupSchedules(t)
	tx, err := s.pool.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(s.ctx)
	var began time.Time
	if err := tx.QueryRow(s.ctx, "SELECT now()").Scan(&began); err != nil {
		t.Fatal(err)
	}
	// fire times are whole seconds: the first is created + 1 h cut to the second, more
	// than open − 1 s after the transaction began
	const open = 2 * time.Second
	if _, err := tx.Exec(s.ctx, "SELECT pg_sleep($1)", open.Seconds()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(s.ctx, "SELECT task_schedule('late', 'topic', '@every 1h', identifier => 'l{time}')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(s.ctx); err != nil {
		t.Fatal(err)
	}
	sc, err := s.sched.Schedule(s.ctx, s.pool, "late")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Created.Sub(began) < open {
		t.Errorf("created %v, %v after its transaction began; want at least %v (the statement's time)", sc.Created, sc.Created.Sub(began), open)
	}
	// an hour after the transaction began, the schedule has not been there an hour
	s.clock.set(began.Add(time.Hour + open/4))
	if fires, err := s.sched.FireSchedules(s.ctx, s.pool); err != nil || len(fires) != 0 {
		t.Errorf("an hour after its transaction began: fired %+v, %v; want nothing", fires, err)
	}
	s.clock.set(sc.Created.Add(time.Hour))
	if fires, err := s.sched.FireSchedules(s.ctx, s.pool); err != nil || len(fires) != 1 {
		t.Errorf("an hour after it was created: fired %+v, %v; want its first fire", fires, err)
	}
}

// TestScheduleCatchUpOfALargeInput: a catch-up pushes at most the fire budget's bytes of
// input and identifiers, its latest times, the older ones missed: 10 000 times of a
// large input in one push could exceed what a statement may carry, and failed every
// round, the schedule never firing again.
func TestScheduleCatchUpOfALargeInput(t *testing.T) {
	// Not parallel (setupSchedules is): the budget is the package's, read by every fire.
	s := &scheduleFixture{fixture: fixtureOn(t, pgtest.NewPool(t, schema.Hash(), migrate)), clock: newClock(start)}
	s.sched = s.firer("firer-1")
	repository.SetFireInputBudget(t, 10_000)
	settings := appendEach("@every 1s")
	settings.Identifier = "c{time}"           // 21 bytes once {time} is written
	settings.Input = strings.Repeat("x", 999) // 1 020 bytes a task: 9 fit
	settings.CatchUp = 100
	s.create("large", settings)
	s.clock.advance(60 * time.Second)
	fires := s.fire()
	if len(fires) != 1 {
		t.Fatalf("fires %+v, want one", fires)
	}
	f := fires[0]
	if len(f.Times) != 9 || len(f.Tasks) != 9 || f.Missed != 51 || !f.Times[8].Equal(s.clock.now()) {
		t.Errorf("pushed %d times (%d tasks, the last %v), %d missed; want the 9 latest up to %v, 51 missed",
			len(f.Times), len(f.Tasks), f.Times[len(f.Times)-1], f.Missed, s.clock.now())
	}
}
