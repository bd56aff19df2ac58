// Package gctune sets the garbage collector's default for pgtask's binaries.
//
// A processor's live heap is small (a few megabytes: the leased batches and the
// decisions waiting to be committed) while it allocates a few kilobytes per task it
// moves, so at Go's default GOGC of 100 it collects many times a second, and on a machine
// it shares with PostgreSQL that CPU is the database's. At 400 a processor moving small
// tasks as fast as the database allows used about a third less CPU in all, with a peak
// RSS of 44–49 MB (BENCHMARKS.md, "The processor's side"). The heap may grow to about five times
// the live data instead of twice: with large inputs, set GOGC lower or GOMEMLIMIT.
package gctune

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
)

// Percent is the GOGC the binaries run with when the environment sets none.
const Percent = 400

// Apply sets the collector to Percent unless the GOGC environment variable is set to
// something (an empty GOGC means Go's default, as for the runtime), which keeps its usual
// meaning, off included. It returns the GOGC in effect, -1 for off.
func Apply() int {
	if os.Getenv("GOGC") != "" {
		return Current()
	}
	debug.SetGCPercent(Percent)
	return Percent
}

// Current returns the GOGC in effect, -1 for off, without changing it.
func Current() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0 // not reported by this runtime
	}
	return int(int64(s[0].Value.Uint64())) // off reads as the largest uint64
}
