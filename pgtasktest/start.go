package pgtasktest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/pgtask/pgtask/processor"
)

// Start runs p until the test ends, or until the returned stop is called: stop cancels
// Run's context (a graceful shutdown) and returns Run's error. If Run fails before
// anything stopped it (an unknown topic, a database that refuses it), the test fails
// at once with Run's error, and the processor's Wait returns it, so that a test waiting
// on the processor ends and says why. If the
// test did not call stop, Start stops p when the test ends and fails it if Run returned
// an error; an error the test got from stop is the test's to judge.
func Start(tb testing.TB, p *processor.Processor) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(tb.Context()))
	var (
		mu       sync.Mutex
		stopping bool // stop was called: Run's error is the caller's
		reported bool // Run failed on its own, and the test was told
	)
	done := make(chan error, 1)
	go func() {
		err := p.Run(ctx)
		mu.Lock()
		if err != nil && !stopping {
			reported = true
			tb.Errorf("pgtasktest.Start: processor run ended before the test stopped it: %v", err)
		}
		mu.Unlock()
		done <- err
	}()
	var (
		once   sync.Once
		result error
	)
	halt := func() error {
		once.Do(func() {
			mu.Lock()
			stopping = true
			mu.Unlock()
			cancel()
			result = <-done
		})
		return result
	}
	var called bool // the test called stop
	tb.Cleanup(func() {
		mu.Lock()
		byTest := called
		mu.Unlock()
		if err := halt(); err != nil && !byTest {
			mu.Lock()
			already := reported
			mu.Unlock()
			if !already {
				tb.Errorf("pgtasktest.Start: processor run: %v", err)
			}
		}
	})
	return func() error {
		mu.Lock()
		called = true
		mu.Unlock()
		return halt()
	}
}

// Logger returns a logger that writes to the test's log (testing.TB.Log) from level up,
// as text, until the test ends: give it to a processor (processor.Config.Logger) to see
// what it says in the test's output.
func Logger(tb testing.TB, level slog.Level) *slog.Logger {
	w := &testWriter{tb: tb}
	tb.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// testWriter writes log lines to a test's log until the test ends (testing.TB.Log
// panics after).
type testWriter struct {
	mu     sync.Mutex
	tb     testing.TB
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, io.ErrClosedPipe
	}
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
