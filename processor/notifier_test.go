package processor_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// TestNotifierGivesUpAConnectionThatNeverAnswers: an attempt to connect to a peer that
// accepts and never answers (a proxy whose server is gone, say) is given up after its
// timeout (40 s by default), and made again; it waited for as long as the peer kept the connection
// open, every wake-up lost meanwhile.
func TestNotifierGivesUpAConnectionThatNeverAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	cfg, err := pgx.ParseConfig("postgres://nobody@" + ln.Addr().String() + "/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	n := processor.NewNotifier(cfg, slog.New(slog.DiscardHandler))
	processor.SetNotifierConnectTimeout(n, 500*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	for i := range 2 {
		select {
		case c := <-accepted:
			defer c.Close()
		case <-time.After(30 * time.Second):
			t.Fatalf("%d attempts to connect in 30 s: the first, never answered, was not given up", i)
		}
	}
}
