package repository_test

import (
	"testing"
	"time"
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
