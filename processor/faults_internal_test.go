package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// logBuffer collects log output safely across goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the logged lines that contain every one of parts.
func (l *logBuffer) lines(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		keep := line != ""
		for _, p := range parts {
			keep = keep && strings.Contains(line, p)
		}
		if keep {
			out = append(out, line)
		}
	}
	return out
}

func TestFaults(t *testing.T) {
	var logs logBuffer
	f := newFaults(slog.New(slog.NewTextHandler(&logs, nil)), time.Minute, 30*time.Second)
	now := time.Unix(1_000_000, 0)
	f.now = func() time.Time { return now }
	ctx := context.Background()
	lockTable := &pgconn.PgError{Code: "53200", Message: "out of shared memory"}

	if err := f.health(); err != nil {
		t.Fatalf("health before any failure: %v", err)
	}
	for range 30 {
		f.fail(ctx, "poll", fmt.Errorf("poll: %w", lockTable))
		now = now.Add(time.Second)
	}
	if got := logs.lines("database operation failing", "operation=poll", `cause="SQLSTATE 53200"`); len(got) != 1 {
		t.Fatalf("30 failures within the interval logged %d times, want once:\n%s", len(got), strings.Join(got, "\n"))
	}
	err := f.health()
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "poll: SQLSTATE 53200 for 30s (30 failures)") {
		t.Fatalf("health while failing = %v", err)
	}

	// Another cause is logged at once; the same cause again once the interval passed.
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	f.fail(ctx, "poll", reset)
	now = now.Add(time.Minute)
	f.fail(ctx, "poll", reset)
	if got := logs.lines("database operation failing", "operation=poll", `cause="connection lost"`); len(got) != 2 {
		t.Fatalf("a new cause, then the interval: logged %d times, want 2", len(got))
	}
	if got := logs.lines("failing_for=1m30s", "failures=32"); len(got) != 1 {
		t.Errorf("the repeated line does not say how long and how often: %s", logs.lines("operation=poll"))
	}

	// Other operations are tracked apart; a success clears one and is logged.
	f.fail(ctx, "heartbeat", lockTable)
	f.ok("poll")
	if got := logs.lines("database operation recovered", "operation=poll", "failures=32"); len(got) != 1 {
		t.Errorf("recovery logged %d times, want once with the failure count", len(got))
	}
	f.ok("poll")
	if got := logs.lines("database operation recovered"); len(got) != 1 {
		t.Errorf("a success of a healthy operation logged a recovery")
	}
	if err := f.health(); err == nil || strings.Contains(err.Error(), "poll") || !strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("health with only the heartbeat failing = %v", err)
	}
	f.ok("heartbeat")
	if err := f.health(); err != nil {
		t.Errorf("health after every operation recovered: %v", err)
	}

	// An operation not tried again within fresh (a VACUUM comes round rarely) no longer
	// makes the processor unhealthy; failing again, it does.
	f.fail(ctx, "vacuum", lockTable)
	if err := f.health(); err == nil || !strings.Contains(err.Error(), "vacuum") {
		t.Errorf("health right after vacuum failed = %v, want it failing", err)
	}
	now = now.Add(31 * time.Second)
	if err := f.health(); err != nil {
		t.Errorf("health 31 s after vacuum last failed = %v, want nil", err)
	}
	f.fail(ctx, "vacuum", lockTable)
	if err := f.health(); err == nil {
		t.Errorf("health after vacuum failed again = nil, want it failing")
	}
	f.ok("vacuum")

	// A failure because the processor is stopping is not one.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	f.fail(stopped, "poll", fmt.Errorf("poll: %w", context.Canceled))
	if err := f.health(); err != nil {
		t.Errorf("health after a cancelled statement at shutdown: %v", err)
	}
}
