package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestHeartbeatWhileThePoolIsBusy: the owner row stays fresh while every connection of
// the processor's pool is taken for three expiry timeouts (polls slowed by a held
// snapshot, a pool smaller than the statements in flight): the heartbeat has a
// connection of its own. On the pool, it waited for one, and other processors would
// have taken the live processor's leases back.
func TestHeartbeatWhileThePoolIsBusy(t *testing.T) {
	f := setup(t)
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const expiry = time.Second
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
	p, _ := f.processor("busy", processor.Config{Pool: pool, ExpiryTimeout: expiry}, processor.ManagerConfig{Handler: handler})
	f.start(p)
	age := func() time.Duration {
		t.Helper()
		var ms float64
		if err := f.pool.QueryRow(f.ctx, `SELECT extract(epoch FROM clock_timestamp() - heartbeat) * 1000 FROM task_owner WHERE owner = 'busy'`).Scan(&ms); err != nil {
			t.Fatalf("read the heartbeat: %v", err)
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	f.eventually("the processor registered and beat", func() bool {
		var n int
		_ = f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task_owner WHERE owner = 'busy'`).Scan(&n)
		return n == 1 && age() < expiry/2
	})
	actx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	for range cfg.MaxConns {
		c, err := pool.Acquire(actx)
		if err != nil {
			t.Fatalf("take the pool's connections: %v", err)
		}
		defer c.Release()
	}
	// The heartbeat goes on (every 100 ms) while the pool is taken: one that waited for
	// a connection of the pool would not move at all. How old it gets is logged, not
	// bounded: a loaded machine can hold one up for a while, which is not what this
	// test is after.
	var worst time.Duration
	beats := 0
	var last float64
	for end := time.Now().Add(3 * expiry); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		worst = max(worst, age())
		var at float64
		if err := f.pool.QueryRow(f.ctx, `SELECT extract(epoch FROM heartbeat) FROM task_owner WHERE owner = 'busy'`).Scan(&at); err != nil {
			t.Fatalf("read the heartbeat: %v", err)
		}
		if at != last {
			beats++
			last = at
		}
	}
	t.Logf("%d heartbeats seen in %v with the pool taken, the heartbeat at most %v old", beats-1, 3*expiry, worst)
	if beats-1 < 3 {
		t.Errorf("%d heartbeats in %v with the pool's connections taken: the heartbeat waits for the pool, and the leases would expire (timeout %v)", beats-1, 3*expiry, expiry)
	}
}
