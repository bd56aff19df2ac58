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
// and keeps the older seconds it has. One read is under way at a time, without the
// lock: the pages that want the chart meanwhile wait for it (or for their own
// context) and share what it read.
type chartCache struct {
	mu     sync.Mutex
	rows   []repository.Tally // the window as last read, oldest first, one per second
	full   time.Time          // when the whole window was last read
	read   time.Time          // when the window was last read, whole or in part
	flight *chartFlight       // the read under way, nil when none
	now    func() time.Time   // injectable for tests
}

// chartFlight is a read of the every-topic chart under way: done is closed when rows or
// err are set.
type chartFlight struct {
	done chan struct{}
	rows []repository.Tally
	err  error
}

// tallies returns the every-topic chart's window, reading with fetch (Tallies of every
// topic over the window given) what it does not keep. A read under way when it is
// called is waited for and shared; one that failed is tried again.
func (c *chartCache) tallies(ctx context.Context, fetch func(context.Context, time.Duration) ([]repository.Tally, error)) ([]repository.Tally, error) {
	for {
		c.mu.Lock()
		f := c.flight
		if f == nil {
			break // with the lock held
		}
		c.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err == nil {
			return slices.Clone(f.rows), nil
		}
		// the read failed (its page's context ended, say): try again, unless this one's
		// context ended too
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	f := &chartFlight{done: make(chan struct{})}
	c.flight = f
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

	// the read, without the lock: only this flight changes the cache until it lands
	fresh, err := fetch(ctx, window)

	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(f.done)
	c.flight = nil
	if err != nil {
		f.err = err
		return nil, err
	}
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
	f.rows = c.rows
	return slices.Clone(c.rows), nil
}
