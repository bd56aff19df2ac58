package bench

import (
	"testing"
	"time"
)

func TestPaceBatch(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name        string
		elapsed     time.Duration
		done, batch int
		linger      time.Duration
		wantN       int
		wantWait    time.Duration
	}{
		// 1 000 tasks a second: task n falls due at n ms.
		{"full batch due", 120 * ms, 0, 100, 50 * ms, 100, 0},
		{"more than a batch due", 900 * ms, 100, 100, 50 * ms, 100, 0},
		{"part due, oldest waited the linger", 70 * ms, 0, 100, 50 * ms, 70, 0},
		{"part due, oldest young: wait for the linger", 30 * ms, 0, 100, 50 * ms, 0, 21 * ms},
		{"part due, the batch fills before the linger", 130 * ms, 100, 100, 500 * ms, 0, 70 * ms},
		{"no linger pushes what is due", 30 * ms, 0, 100, 0, 30, 0},
		{"nothing due: wait for the next task", 100*ms + 500*time.Microsecond, 100, 100, 0, 0, ms},
		{"nothing due for a while", 100 * ms, 110, 100, 0, 0, 11 * ms},
	} {
		n, wait := paceBatch(1000, c.elapsed, c.done, c.batch, c.linger)
		if n != c.wantN || wait != c.wantWait {
			t.Errorf("%s: paceBatch = %d, %s; want %d, %s", c.name, n, wait, c.wantN, c.wantWait)
		}
	}
}
