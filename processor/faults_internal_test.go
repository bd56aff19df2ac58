package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/internal/logbuf"
)

func TestFaults(t *testing.T) {
	var logs logbuf.Buffer
	f := newFaults(slog.New(slog.NewTextHandler(&logs, nil)), time.Minute, 30*time.Second)
	now := time.Unix(1_000_000, 0)
	f.now = func() time.Time { return now }
	ctx := context.Background()
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	lockTable := &pgconn.PgError{Code: "53200", Message: "out of shared memory"}
	failing := func(parts ...string) []string {
		return logs.Lines(append([]string{"level=ERROR", `msg="database operations failing"`}, parts...)...)
	}
	recovered := func(parts ...string) []string {
		return logs.Lines(append([]string{"level=INFO", `msg="database operations recovered"`}, parts...)...)
	}

	if err := f.health(); err != nil {
		t.Fatalf("health before any failure: %v", err)
	}

	// An outage: five operations fail with one cause, every second for 30 s. One line, at
	// the first failure, naming the operation that failed first.
	ops := []string{"heartbeat", "expire dead owners' leases", "purge dead owners", "list cancelled leases", `poll topic "a"`}
	for range 30 {
		for _, op := range ops {
			f.fail(ctx, op, fmt.Errorf("%s: %w", op, reset))
		}
		now = now.Add(time.Second)
	}
	if got := failing(); len(got) != 1 {
		t.Fatalf("5 operations failing 30 times with one cause within the interval logged %d lines, want 1:\n%s", len(got), logs.String())
	}
	if got := failing(`cause="connection lost"`, "operations=heartbeat", "failing_for=0s", "failures=1", "connection reset by peer"); len(got) != 1 {
		t.Errorf("the first line does not name the cause, the operation and the error:\n%s", logs.String())
	}
	err := f.health()
	for _, op := range ops {
		if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), op+": connection lost for 30s (30 failures)") {
			t.Errorf("health while failing = %v, want it to name %s", err, op)
		}
	}

	// Once the interval has passed since the cause was logged: one more line, naming the
	// five operations (sorted), with how long and how often.
	now = now.Add(30 * time.Second)
	for _, op := range ops {
		f.fail(ctx, op, reset)
	}
	if got := failing(); len(got) != 2 {
		t.Fatalf("after the interval: %d lines, want 2:\n%s", len(got), logs.String())
	}
	all := `operations="expire dead owners' leases, heartbeat, list cancelled leases, poll topic \"a\", purge dead owners"`
	if got := failing(`cause="connection lost"`, all, "failing_for=1m0s", "failures=151"); len(got) != 1 {
		t.Errorf("the repeated line does not say how long and how often:\n%s", logs.String())
	}

	// A second cause has its own line at once, naming only its operations; the operation
	// that moved to it leaves the first cause, which does not recover while others fail.
	f.fail(ctx, "read topic activation", lockTable)
	f.fail(ctx, `poll topic "a"`, lockTable)
	if got := failing(`cause="SQLSTATE 53200"`, `operations="read topic activation"`, "failures=1"); len(got) != 1 {
		t.Errorf("a second cause is not logged at once on its own:\n%s", logs.String())
	}
	if got := failing(); len(got) != 3 {
		t.Errorf("%d lines, want 3 (an operation joining a cause already logged logs nothing):\n%s", len(got), logs.String())
	}
	err = f.health()
	if !strings.Contains(err.Error(), `poll topic "a": SQLSTATE 53200`) || !strings.Contains(err.Error(), "read topic activation: SQLSTATE 53200") ||
		!strings.Contains(err.Error(), "heartbeat: connection lost") {
		t.Errorf("health with two causes = %v", err)
	}

	// Recovery: nothing while some operations still fail with a cause; one INFO line when
	// the last one succeeds, naming every operation that failed with it.
	for _, op := range ops[:3] {
		f.ok(op)
	}
	f.ok("heartbeat") // not failing any more
	if got := recovered(); len(got) != 0 {
		t.Fatalf("recovery of some operations logged:\n%s", strings.Join(got, "\n"))
	}
	now = now.Add(time.Second)
	f.ok("list cancelled leases")
	if got := recovered(`cause="connection lost"`, all, "failed_for=1m1s", "failures=155"); len(got) != 1 {
		t.Errorf("recovery of the last operation: %d lines, want 1:\n%s", len(got), logs.String())
	}
	f.ok("list cancelled leases")
	if got := recovered(); len(got) != 1 {
		t.Errorf("a success of a healthy operation logged a recovery:\n%s", logs.String())
	}
	if err := f.health(); err == nil || strings.Contains(err.Error(), "heartbeat") || !strings.Contains(err.Error(), "read topic activation") {
		t.Errorf("health with only the SQLSTATE 53200 operations failing = %v", err)
	}
	f.ok(`poll topic "a"`)
	f.ok("read topic activation")
	if got := recovered(`cause="SQLSTATE 53200"`, `operations="poll topic \"a\", read topic activation"`, "failures=2"); len(got) != 1 {
		t.Errorf("recovery of the second cause: %d lines, want 1:\n%s", len(got), logs.String())
	}
	if err := f.health(); err != nil {
		t.Errorf("health after every operation recovered: %v", err)
	}

	// A cause that clears because its only operation now fails with another is logged as
	// recovered; the new cause as failing.
	f.fail(ctx, "heartbeat", reset)
	f.fail(ctx, "heartbeat", lockTable)
	if len(recovered(`cause="connection lost"`, `operations=heartbeat`, "failures=1")) != 1 ||
		len(failing(`cause="SQLSTATE 53200"`, `operations=heartbeat`, "failures=1")) != 1 {
		t.Errorf("a change of cause is not logged as the old one's recovery and the new one's failure:\n%s", logs.String())
	}
	if err := f.health(); err == nil || !strings.Contains(err.Error(), "heartbeat: SQLSTATE 53200 for 0s (2 failures)") {
		t.Errorf("health after a change of cause = %v", err)
	}
	f.ok("heartbeat")

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
	before := logs.String()
	f.fail(stopped, "poll", fmt.Errorf("poll: %w", context.Canceled))
	if err := f.health(); err != nil {
		t.Errorf("health after a cancelled statement at shutdown: %v", err)
	}
	if logs.String() != before {
		t.Errorf("a cancelled statement at shutdown was logged:\n%s", strings.TrimPrefix(logs.String(), before))
	}
}

func TestFaultLevels(t *testing.T) {
	// Contention a retry resolves is a warning; the rest are errors.
	var logs logbuf.Buffer
	f := newFaults(slog.New(slog.NewTextHandler(&logs, nil)), time.Minute, 30*time.Second)
	ctx := context.Background()
	for _, c := range []struct {
		err   error
		level string
	}{
		{&pgconn.PgError{Code: "40P01", Message: "deadlock detected"}, "level=WARN"},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, "level=WARN"},
		{&pgconn.PgError{Code: "55P03", Message: "lock not available"}, "level=WARN"},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, "level=ERROR"},
		{&pgconn.PgError{Code: "53200", Message: "out of shared memory"}, "level=ERROR"},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, "level=ERROR"},
	} {
		f.fail(ctx, "poll "+c.err.Error(), c.err)
		if got := logs.Lines(c.level, `msg="database operations failing"`, c.err.Error()); len(got) != 1 {
			t.Errorf("%v: not logged once at %s:\n%s", c.err, c.level, logs.String())
		}
	}
}
