package gctune

import (
	"os"
	"runtime/debug"
	"testing"
)

// restore puts the collector back as it was when the test started.
func restore(t *testing.T) {
	before := debug.SetGCPercent(100)
	debug.SetGCPercent(before)
	t.Cleanup(func() { debug.SetGCPercent(before) })
}

func TestApply(t *testing.T) {
	t.Run("DefaultWithoutGOGC", func(t *testing.T) {
		restore(t)
		t.Setenv("GOGC", "") // restores the earlier value at the end
		if err := os.Unsetenv("GOGC"); err != nil {
			t.Fatal(err)
		}
		debug.SetGCPercent(100)
		if got := Apply(); got != Percent {
			t.Errorf("Apply() = %d, want %d", got, Percent)
		}
		if got := debug.SetGCPercent(100); got != Percent {
			t.Errorf("collector at %d, want %d", got, Percent)
		}
	})
	t.Run("GOGCSetIsKept", func(t *testing.T) {
		restore(t)
		t.Setenv("GOGC", "150")
		debug.SetGCPercent(150) // what the runtime read from GOGC at start
		if got := Apply(); got != 150 {
			t.Errorf("Apply() = %d, want the environment's 150", got)
		}
		if got := debug.SetGCPercent(100); got != 150 {
			t.Errorf("collector at %d, want 150", got)
		}
	})
	t.Run("EmptyGOGCIsUnset", func(t *testing.T) {
		restore(t)
		t.Setenv("GOGC", "") // the runtime reads an empty GOGC as its default
		debug.SetGCPercent(100)
		if got := Apply(); got != Percent {
			t.Errorf("Apply() = %d, want %d", got, Percent)
		}
		if got := Current(); got != Percent {
			t.Errorf("Current() = %d, want %d", got, Percent)
		}
	})
	t.Run("GOGCOffIsKept", func(t *testing.T) {
		restore(t)
		t.Setenv("GOGC", "off")
		debug.SetGCPercent(-1)
		if got := Apply(); got != -1 {
			t.Errorf("Apply() = %d, want -1 (off)", got)
		}
		if got := debug.SetGCPercent(100); got != -1 {
			t.Errorf("collector at %d, want off", got)
		}
	})
}
