package repository_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestScheduleFireIdleTimeout: a fire in a transaction of its own runs with
// idle_in_transaction_session_timeout set, so that a firer whose host dies mid-fire
// frees the schedule's row lock when the server ends its session (10 s), not when TCP
// keepalive notices (two hours); a fire in the caller's transaction leaves the caller's
// setting alone. A trigger on task records the setting the fire's push runs with.
func TestScheduleFireIdleTimeout(t *testing.T) {
	s := setupSchedules(t)
	s.exec(`CREATE TABLE test_seen (setting text)`,
		`CREATE FUNCTION test_seen() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO test_seen VALUES (current_setting('idle_in_transaction_session_timeout'));
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER test_seen BEFORE INSERT ON task FOR EACH ROW EXECUTE FUNCTION test_seen()`)
	s.create("tick", appendEach("@every 1s"))
	s.clock.advance(time.Second)
	if fires := s.fire(); len(fires) != 1 {
		t.Fatalf("fires %+v, want one", fires)
	}
	if got := textRowsOf(t, s, "SELECT setting FROM test_seen"); len(got) != 1 || got[0] != "10s" {
		t.Errorf("idle_in_transaction_session_timeout in the fire: %v, want 10s", got)
	}

	tx, err := s.pool.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(s.ctx) }()
	s.clock.advance(time.Second)
	if fires, err := s.sched.FireSchedules(s.ctx, tx); err != nil || len(fires) != 1 {
		t.Fatalf("fire in the caller's transaction: %+v, %v", fires, err)
	}
	var setting string
	if err := tx.QueryRow(s.ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&setting); err != nil || setting != "0" {
		t.Errorf("the caller's transaction after the fire: idle_in_transaction_session_timeout %q (%v), want its own 0", setting, err)
	}
}

// TestScheduleGrace: a fire time due within the grace (SetScheduleGrace; processors set
// twice their heartbeat) before a fire is on time, not missed: a spec faster than the
// firers' interval loses no fire time while they run, whatever its CatchUp. Before, a
// catch-up of 0 pushed the latest due time of each call only. Times older than the grace
// are missed as before: after a downtime, catch-up 0 pushes those within the grace.
func TestScheduleGrace(t *testing.T) {
	for _, spec := range []string{"@every 1s", "* * * * * *"} {
		t.Run("FiredEveryThreeSeconds/"+spec, func(t *testing.T) {
			s := setupSchedules(t)
			if err := s.sched.SetScheduleGrace(3 * time.Second); err != nil {
				t.Fatal(err)
			}
			s.create("fast", appendEach(spec))
			var got []string
			var missed int64
			for range 4 {
				s.clock.advance(3 * time.Second)
				for _, f := range s.fire() {
					got = append(got, stamps(f.Times...)...)
					missed += f.Missed
				}
			}
			if want := stamps(every(start.Add(time.Second), time.Second, 12)...); !slices.Equal(got, want) || missed != 0 {
				t.Errorf("pushed %v (missed %d), want every second %v", got, missed, want)
			}
		})
	}

	t.Run("ADowntimePushesTheTimesWithinTheGrace", func(t *testing.T) {
		s := setupSchedules(t) // ScheduleGraceDefault: 2s
		s.create("fast", appendEach("@every 1s"))
		s.clock.advance(time.Hour)
		fires := s.fire()
		if got, want := stampsOf(fires), stamps(start.Add(time.Hour-time.Second), start.Add(time.Hour)); !slices.Equal(got, want) || fires[0].Missed != 3598 {
			t.Errorf("after an hour: %v (missed %d), want %v (3598 missed)", got, fires[0].Missed, want)
		}
	})

	t.Run("NegativeIsRefused", func(t *testing.T) {
		s := setupSchedules(t)
		if err := s.sched.SetScheduleGrace(-time.Second); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("SetScheduleGrace(-1s) = %v, want ErrInvalid", err)
		}
	})
}
