package bench

import (
	"bytes"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// stats gathers what the processors did, in-process or reported by children.
type stats struct {
	processed atomic.Int64
	errors    atomic.Int64
	// Statement timings seen by the managers: polls that leased tasks, empty polls and
	// completion flushes (count and total ns).
	polls, pollNs, empties, flushes, flushNs atomic.Int64
	progress                                 chan struct{} // capacity 1: signalled on every completion
	logErr                                   func(err error)

	mu       sync.Mutex
	starts   samples // push → handler start, ns
	dones    samples // push → completed, ns
	window   samples // push → completed since the last progress line, ns
	childRSS float64 // highest peak RSS reported by a child, MB
}

func newStats(stderr io.Writer) *stats {
	s := &stats{progress: make(chan struct{}, 1)}
	var mu sync.Mutex
	s.logErr = func(err error) {
		if n := s.errors.Add(1); n <= 5 {
			mu.Lock()
			fmt.Fprintf(stderr, "pgtask bench: processor error: %v\n", err)
			mu.Unlock()
		}
	}
	return s
}

func (s *stats) signal() {
	select {
	case s.progress <- struct{}{}:
	default:
	}
}

// samples keeps at most sampleCap latencies, a uniform sample of all it was offered,
// and the largest of them all (the sample's own may have left it out).
type samples struct {
	seen int64
	max  int64
	v    []int64
}

const sampleCap = 1 << 18

func (s *samples) add(ns int64) {
	s.seen++
	s.max = max(s.max, ns)
	if len(s.v) < sampleCap {
		s.v = append(s.v, ns)
		return
	}
	if i := mrand.Int64N(s.seen); i < sampleCap {
		s.v[i] = ns
	}
}

// takeWindow returns the q-quantile of the push → completed latencies since the last
// call, in ms (0 when there were none), and starts a new window.
func (s *stats) takeWindow(q float64) float64 {
	s.mu.Lock()
	v := s.window.v
	s.window = samples{}
	s.mu.Unlock()
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return float64(v[max(int(math.Ceil(q*float64(len(v))))-1, 0)]) / 1e6
}

// pushStamp decodes the push time a task's input holds; zero when it holds none.
func pushStamp(input string) int64 {
	n, err := strconv.ParseInt(input, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// listener counts completed tasks (those no longer READY) and, when record is set, their
// push → completed latencies. onDone, when set, runs after each commit (the child uses
// it to report).
func (s *stats) listener(record bool, onDone func()) processor.Listener {
	return processor.Listener{
		OnDispatch: func(_ string, _ []repository.Task, poll time.Duration) {
			s.polls.Add(1)
			s.pollNs.Add(int64(poll))
		},
		OnEmpty: func(string, time.Duration) { s.empties.Add(1) },
		OnComplete: func(_ string, tasks []repository.Task, flush time.Duration) {
			s.flushes.Add(1)
			s.flushNs.Add(int64(flush))
			now := time.Now().UnixNano()
			n := 0
			if record {
				s.mu.Lock()
			}
			for _, t := range tasks {
				if t.State == repository.Ready {
					continue
				}
				n++
				if record {
					if at := pushStamp(t.Input); at != 0 {
						s.dones.add(now - at)
						s.window.add(now - at)
					}
				}
			}
			if record {
				s.mu.Unlock()
			}
			s.processed.Add(int64(n))
			s.signal()
			if onDone != nil {
				onDone()
			}
		},
		OnError: func(_ string, err error) { s.logErr(err) },
		OnFatal: func(_ string, err error) { s.logErr(fmt.Errorf("fatal: %w", err)) },
	}
}

// latencies adds the percentiles to result and prints them on out; primary names the
// handler-start figures p50_ms… (latency mode).
func (s *stats) latencies(result map[string]any, out io.Writer, primary bool) {
	s.mu.Lock()
	starts, dones := slices.Clone(s.starts.v), slices.Clone(s.dones.v)
	startsMax, donesMax, startsSeen, donesSeen := s.starts.max, s.dones.max, s.starts.seen, s.dones.seen
	s.mu.Unlock()
	for _, l := range []struct {
		name, what string
		v          []int64
		max, seen  int64
	}{{"start", "push → handler start", starts, startsMax, startsSeen}, {"completed", "push → completed", dones, donesMax, donesSeen}} {
		if len(l.v) == 0 {
			continue
		}
		slices.Sort(l.v)
		p := func(q float64) float64 {
			i := int(math.Ceil(q*float64(len(l.v)))) - 1
			return round(float64(l.v[max(i, 0)])/1e6, 3)
		}
		prefix := l.name + "_"
		if primary && l.name == "start" {
			prefix = ""
		}
		result[prefix+"p50_ms"] = p(0.50)
		result[prefix+"p95_ms"] = p(0.95)
		result[prefix+"p99_ms"] = p(0.99)
		// the largest of all, not of the sample: a run of millions keeps a few percent
		largest := round(float64(l.max)/1e6, 3)
		result[prefix+"max_ms"] = largest
		fmt.Fprintf(out, "%-22s p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms  max %8.2f ms  (%d samples of %d)\n",
			l.what, p(0.50), p(0.95), p(0.99), largest, len(l.v), l.seen)
	}
}

// sampleHeap records the highest Go heap in use in highest until the returned function
// is called.
func sampleHeap(highest *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		for {
			old := highest.Load()
			if m.HeapInuse <= old || highest.CompareAndSwap(old, m.HeapInuse) {
				return
			}
		}
	}
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				sample()
				return
			case <-t.C:
				sample()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// peakRSSMB is this process's peak resident set size (VmHWM) in MB, or the memory the Go
// runtime obtained from the OS where /proc is not available.
func peakRSSMB() float64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 64)
				if err == nil {
					return kb / 1024
				}
			}
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.Sys) / (1 << 20)
}

func ms(d time.Duration) float64 { return round(float64(d)/1e6, 3) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
