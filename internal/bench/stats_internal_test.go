package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestLatenciesMaxOfAll: the max reported is the largest latency seen, not the largest
// the sample kept: a run of millions keeps a few percent of them, and the max printed
// was that few percent's.
func TestLatenciesMaxOfAll(t *testing.T) {
	var s stats
	s.dones.add(9_000_000_000)      // 9 s, first: the sample replaces most of the early ones
	for i := range 20 * sampleCap { // the first kept with a chance of 1 in 21
		s.dones.add(int64(1_000_000 + i%1000))
	}
	result := map[string]any{}
	var out bytes.Buffer
	s.latencies(result, &out, false)
	if got := result["completed_max_ms"]; got != 9000.0 {
		t.Errorf("completed_max_ms %v, want 9000 (the largest seen)", got)
	}
	if want := "(262144 samples of 5242881)"; !strings.Contains(out.String(), want) {
		t.Errorf("printed %q, want it to say %s", out.String(), want)
	}
}
