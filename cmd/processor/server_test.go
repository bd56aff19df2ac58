package main

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/internal/conntest"
	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/logbuf"
)

// deadPool returns a pool on a port nothing listens on, with recognisable user and
// database names, and the port.
func deadPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	port := conntest.ClosedPort(t)
	pool, err := pgxpool.New(t.Context(), "postgres://secretuser@127.0.0.1:"+port+"/secretdb?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, port
}

func TestServer(t *testing.T) {
	t.Parallel()
	pool, port := deadPool(t)
	var running atomic.Bool
	running.Store(true)
	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	mux := newMux(prometheus.NewRegistry(), pool, &running, func() error { return nil }, logger)
	short := httpguard.Timeouts{ReadHeader: 300 * time.Millisecond, Read: 500 * time.Millisecond, Idle: 500 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serve(ln, mux, short, logger))
	addr := loggedAddr(t, logs.String())

	t.Run("HealthzRevealsNoConnectionDetails", func(t *testing.T) {
		code, body := httpGet(t, "http://"+addr+"/healthz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "database not answering") {
			t.Fatalf("/healthz with the database down: %d %q", code, body)
		}
		for _, secret := range []string{"secretuser", "secretdb", "127.0.0.1", port, "refused"} {
			if strings.Contains(body, secret) {
				t.Errorf("/healthz body %q reveals %q", body, secret)
			}
		}
		if !strings.Contains(logs.String(), "secretdb") {
			t.Errorf("the log lacks the ping's error:\n%s", logs)
		}
	})
	t.Run("SlowHeadersAndIdleConnectionsAreCut", func(t *testing.T) {
		slow := conntest.Dial(t, addr, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
		idle := conntest.Dial(t, addr, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
		if code, _ := httpGet(t, "http://"+addr+"/metrics"); code != http.StatusOK {
			t.Errorf("a normal request beside them: %d", code)
		}
		if answer := conntest.ReadUntilClosed(t, slow, time.Minute); strings.Contains(answer, "200 OK") {
			t.Errorf("a request whose headers never ended was answered: %q", answer)
		}
		if answer := conntest.ReadUntilClosed(t, idle, time.Minute); !strings.HasPrefix(answer, "HTTP/1.1 200") {
			t.Errorf("the idle connection's one answer: %.100q", answer)
		}
	})
}

// loggedAddr finds the address serve logged.
func loggedAddr(t *testing.T, logs string) string {
	t.Helper()
	_, after, ok := strings.Cut(logs, "addr=")
	if !ok {
		t.Fatalf("serve logged no address:\n%s", logs)
	}
	return strings.Fields(after)[0]
}
