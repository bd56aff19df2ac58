package bench

import (
	"io"
	"os/exec"
	"strings"
	"testing"
)

// TestChildEndsBeforeItListens: a child process that ends before it reports it listens
// (a crash at start, a bad flag) fails the start at once, saying so; it waited the
// whole minute for it before.
func TestChildEndsBeforeItListens(t *testing.T) {
	cfg := &Config{Processes: 2, ChildCommand: func(Child) (*exec.Cmd, error) {
		return exec.Command("sh", "-c", "echo boom >&2; exit 3"), nil
	}}
	c, err := startChildren(t.Context(), cfg, []string{"t"}, &stats{}, io.Discard, false)
	if err == nil {
		_ = c.stop()
		t.Fatal("children that ended at once started")
	}
	if !strings.Contains(err.Error(), "ended before it started listening") {
		t.Errorf("err %v, want it to say a child ended before listening", err)
	}
}
