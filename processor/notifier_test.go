package processor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
)

// TestNotifierPingsASilentConnection: a listening connection that stops answering
// without being reset (here: the proxy holds every request for 5 s) is pinged after a
// wait without notifications, taken for lost when the ping does not answer in time, and
// made again. Before, the notifier waited on it for as long as TCP keepalive took to
// give up (minutes), every wake-up lost meanwhile.
func TestNotifierPingsASilentConnection(t *testing.T) {
	f := setup(t)
	proxy := f.startProxy()
	cfg, err := proxy.PoolConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	n := processor.NewNotifier(cfg.ConnConfig, slog.New(slog.DiscardHandler))
	processor.SetNotifierPing(n, 200*time.Millisecond, 500*time.Millisecond)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	first := n.Connected()
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the notifier did not connect")
	}
	// a few pings answered: the connection is kept
	pid := n.PID()
	time.Sleep(time.Second)
	if got := n.PID(); got != pid {
		t.Fatalf("the listening connection changed (%d to %d) while it answered its pings", pid, got)
	}
	again := n.Connected()
	proxy.Delay(5 * time.Second)
	select {
	case <-again:
	case <-time.After(30 * time.Second):
		t.Fatal("the notifier did not give up a connection that stopped answering, and connect again")
	}
	proxy.Delay(0)
	if got := n.PID(); got == pid {
		t.Errorf("still listening on backend %d, the silent connection", got)
	}
}
