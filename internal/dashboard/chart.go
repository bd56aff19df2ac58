package dashboard

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// The every-topic chart's cache (chartCache).
const (
	// chartFullEvery is how often the every-topic chart reads its whole window again:
	// a tally written late into a second already read (a transaction that began then)
	// shows within that time.
	chartFullEvery = time.Minute
	// chartOverlap is how far back before the last read the refresh of the every-topic
	// chart reads, so that a tally written just after that read still shows.
	chartOverlap = 15 * time.Second
)

// chartCache keeps the every-topic chart between refreshes: its window's tallies are
// every topic's rows of task_tally in it (busy topics × seconds × writers; 600 000 rows
// and 0.4 s for 1 000 busy topics), read whole at most every chartFullEvery. A refresh
// in between reads only the seconds since the last read (and chartOverlap before it),
// and keeps the older seconds it has. Pages read it one at a time, sharing it.
type chartCache struct {
	mu   sync.Mutex
	rows []repository.Tally // the window as last read, oldest first, one per second
	full time.Time          // when the whole window was last read
	read time.Time          // when the window was last read, whole or in part
	now  func() time.Time   // injectable for tests
}

// tallies returns the every-topic chart's window, reading with fetch (Tallies of every
// topic over the window given) what it does not keep.
func (c *chartCache) tallies(ctx context.Context, fetch func(context.Context, time.Duration) ([]repository.Tally, error)) ([]repository.Tally, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	if len(c.rows) == 0 || now.Sub(c.full) >= chartFullEvery || now.Before(c.read) {
		rows, err := fetch(ctx, chartWindow)
		if err != nil {
			return nil, err
		}
		c.rows, c.full, c.read = rows, now, now
		return slices.Clone(rows), nil
	}
	recent := min(now.Sub(c.read)+chartOverlap, chartWindow).Truncate(time.Second) + time.Second
	fresh, err := fetch(ctx, recent)
	if err != nil {
		return nil, err
	}
	c.read = now
	if len(fresh) == 0 {
		return slices.Clone(c.rows), nil
	}
	// the seconds kept that the fresh read does not cover, then the fresh ones, within
	// the window that ends with the newest
	cut, _ := slices.BinarySearchFunc(c.rows, fresh[0].Second, func(t repository.Tally, s time.Time) int { return t.Second.Compare(s) })
	rows := append(slices.Clone(c.rows[:cut]), fresh...)
	if n := int(chartWindow / time.Second); len(rows) > n {
		rows = rows[len(rows)-n:]
	}
	c.rows = rows
	return slices.Clone(rows), nil
}
