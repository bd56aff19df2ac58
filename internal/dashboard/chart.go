package dashboard

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

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
// and keeps the older seconds it has. One read is under way at a time (flight), without
// the lock: the pages that want the chart meanwhile wait for it (or for their own
// context) and share what it read.
type chartCache struct {
	mu     sync.Mutex
	rows   []repository.Tally // the window as last read, oldest first, one per second
	full   time.Time          // when the whole window was last read
	read   time.Time          // when the window was last read, whole or in part
	flight singleflight.Group // the read under way
	now    func() time.Time   // injectable for tests
}

// tallies returns the every-topic chart's window, reading with fetch (Tallies of every
// topic over the window given) what it does not keep. A read under way when it is
// called is waited for and shared; one that failed is tried again, unless ctx has ended.
func (c *chartCache) tallies(ctx context.Context, fetch func(context.Context, time.Duration) ([]repository.Tally, error)) ([]repository.Tally, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		led := false // whether this call made the read, or shared another's
		read := c.flight.DoChan("chart", func() (any, error) {
			led = true
			return c.refresh(ctx, fetch)
		})
		select {
		case res := <-read:
			if res.Err == nil {
				return slices.Clone(res.Val.([]repository.Tally)), nil
			}
			if led || ctx.Err() != nil {
				return nil, res.Err
			}
			// another page's read failed (its request ended, say): try again
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// refresh reads what the cache does not keep and returns the window. The read is made
// without the lock: only the flight under way changes the cache until it lands.
func (c *chartCache) refresh(ctx context.Context, fetch func(context.Context, time.Duration) ([]repository.Tally, error)) ([]repository.Tally, error) {
	c.mu.Lock()
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	whole := len(c.rows) == 0 || now.Sub(c.full) >= chartFullEvery || now.Before(c.read)
	window := chartWindow
	if !whole {
		window = min(now.Sub(c.read)+chartOverlap, chartWindow).Truncate(time.Second) + time.Second
	}
	c.mu.Unlock()

	fresh, err := fetch(ctx, window)
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case whole:
		c.rows, c.full, c.read = fresh, now, now
	case len(fresh) == 0:
		c.read = now
	default:
		// the seconds kept that the fresh read does not cover, then the fresh ones,
		// within the window that ends with the newest
		c.read = now
		cut, _ := slices.BinarySearchFunc(c.rows, fresh[0].Second, func(t repository.Tally, s time.Time) int { return t.Second.Compare(s) })
		rows := append(slices.Clone(c.rows[:cut]), fresh...)
		if n := int(chartWindow / time.Second); len(rows) > n {
			rows = rows[len(rows)-n:]
		}
		c.rows = rows
	}
	return c.rows, nil
}
