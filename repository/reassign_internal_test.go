package repository

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/internal/pgtest"
)

// TestReassignAllInBatches: ReassignAll changes a state's tasks a batch per statement
// until none is left (8 FAILED tasks in batches of 3: all 8, none of another state);
// refuses a reassignment to the state the tasks have; and, when a later statement fails
// on a pool, returns with the error the number the earlier ones committed, which is
// what the database holds.
func TestReassignAllInBatches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository test: reassign all in batches", nil)
	migrateTo(t, pool, 0)
	r, err := New(Config{Owner: "reassign-batches"})
	if err != nil {
		t.Fatal(err)
	}
	r.reassignBatch = 3
	fill := func(topic string, failed, succeeded int) {
		t.Helper()
		if _, err := r.CreateTopic(ctx, pool, topic); err != nil {
			t.Fatal(err)
		}
		// pushed, then given their finished state directly: what the test needs is rows
		if _, err := pool.Exec(ctx, `SELECT task_push($1, 'f' || g, '') FROM generate_series(1, $2) g`, topic, failed); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `SELECT task_push($1, 's' || g, '') FROM generate_series(1, $2) g`, topic, succeeded); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE task SET state = CASE WHEN identifier LIKE 'f%' THEN 3 ELSE 6 END, completed = now()
			WHERE topic = $1`, topic); err != nil {
			t.Fatal(err)
		}
	}
	count := func(topic string, state State) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = $1 AND state = $2", topic, int16(state)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	fill("all", 8, 2)
	n, err := r.ReassignAll(ctx, pool, "all", Failed, Filter, MinSequence, MaxSequence)
	if err != nil || n != 8 {
		t.Fatalf("ReassignAll of 8 FAILED in batches of 3: %d, %v; want 8", n, err)
	}
	if f, s, l := count("all", Failed), count("all", Succeeded), count("all", Filtered); f != 0 || s != 2 || l != 8 {
		t.Errorf("after: %d FAILED, %d SUCCEEDED, %d FILTERED; want 0, 2, 8", f, s, l)
	}

	_, err = r.ReassignAll(ctx, pool, "all", Succeeded, Success, MinSequence, MaxSequence)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "have that result already") {
		t.Errorf("ReassignAll of SUCCEEDED to SUCCESS: %v, want ErrInvalid", err)
	}

	fill("boom", 8, 0)
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'boom at %', NEW.identifier; END $$;
		CREATE TRIGGER boom BEFORE UPDATE ON task FOR EACH ROW
		WHEN (NEW.topic = 'boom' AND NEW.identifier = 'f7' AND NEW.state = 6) EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	n, err = r.ReassignAll(ctx, pool, "boom", Failed, Success, MinSequence, MaxSequence)
	if err == nil || !strings.Contains(err.Error(), "boom at f7") {
		t.Fatalf("ReassignAll through a failing row: %d, %v; want the trigger's error", n, err)
	}
	// f1..f8 come in that order whichever way the statement reads them (sequence,
	// identifier or the heap): two batches of 3 commit before f7's
	committed := count("boom", Succeeded)
	if int64(committed) != n || committed != 6 {
		t.Errorf("ReassignAll failing on the 7th row: returned %d, the database holds %d SUCCEEDED; want 6 and 6 (two batches)", n, committed)
	}
	if want := fmt.Sprintf("(after %d reassigned)", n); n > 0 && !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
