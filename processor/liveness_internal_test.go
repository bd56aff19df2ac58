package processor

import (
	"testing"
	"time"
)

// TestOrphansDue: the look for orphaned leases comes every expiry timeout while it is
// quick, and no sooner than twenty times its own duration once it is slow (a long-held
// snapshot makes it read for seconds).
func TestOrphansDue(t *testing.T) {
	const expiry = 5 * time.Second
	for _, tc := range []struct {
		since, took time.Duration
		want        bool
	}{
		{0, 0, false},
		{expiry - time.Millisecond, 10 * time.Millisecond, false},
		{expiry, 10 * time.Millisecond, true},
		{expiry, 0, true},
		{expiry, 2 * time.Second, false}, // slow: 40 s apart
		{39 * time.Second, 2 * time.Second, false},
		{40 * time.Second, 2 * time.Second, true},
	} {
		if got := orphansDue(tc.since, expiry, tc.took); got != tc.want {
			t.Errorf("orphansDue(%v since, took %v) = %v, want %v", tc.since, tc.took, got, tc.want)
		}
	}
}
