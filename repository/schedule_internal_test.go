package repository

import (
	"testing"
	"time"
)

// TestDueFromCenturiesAgo: a next fire time stored centuries ago (by hand, in SQL)
// with a sparse spec and a large catch-up: due widened its window by doubling until the
// duration overflowed, and then never returned.
func TestDueFromCenturiesAgo(t *testing.T) {
	c, err := parseSchedule("0 0 1 1 *", "UTC") // yearly
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		n          int
		first      int // the year of the first time due
		missed     int64
		wantLength int
	}{
		{1000, 1700, 0, 327}, // every year from 1700 to 2026
		{3, 2024, 324, 3},
	} {
		done := make(chan struct{})
		var (
			times  []time.Time
			missed int64
			next   time.Time
		)
		go func() {
			defer close(done)
			times, missed, next = c.due(start, now, tc.n)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("catch-up %d: due did not return within 30 s", tc.n)
		}
		if len(times) != tc.wantLength || times[0].Year() != tc.first || times[len(times)-1].Year() != 2026 || missed != tc.missed ||
			!next.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("catch-up %d: %d times from %v, %d missed, next %v; want %d from %d to 2026, %d missed, next 2027",
				tc.n, len(times), times[0], missed, next, tc.wantLength, tc.first, tc.missed)
		}
	}
}

// TestDueEveryFromCenturiesAgo: the same for an @every spec, whose arithmetic overflowed
// past 292 years and moved the next fire time back by as much at each round.
func TestDueEveryFromCenturiesAgo(t *testing.T) {
	c, err := parseSchedule("@every 1h", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 12, 4, 0, 30, 0, 0, time.UTC)
	times, missed, next := c.due(start, now, 3)
	want := []time.Time{now.Add(-150 * time.Minute), now.Add(-90 * time.Minute), now.Add(-30 * time.Minute)}
	hours := int64(now.Sub(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC))/time.Hour) + int64(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).Sub(start)/time.Hour)
	if len(times) != 3 || !times[0].Equal(want[0]) || !times[2].Equal(want[2]) || !next.Equal(now.Add(30*time.Minute)) || missed != hours+1-3 {
		t.Errorf("due = %v, %d missed, next %v; want %v, %d missed, next %v", times, missed, next, want, hours+1-3, now.Add(30*time.Minute))
	}
}
