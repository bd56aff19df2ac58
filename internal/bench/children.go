package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"
)

// childLine is one line a child process writes on its standard output.
type childLine struct {
	Ready     bool     `json:"ready,omitempty"`
	Processed int64    `json:"n,omitempty"`
	Starts    []int64  `json:"start,omitempty"`
	Dones     []int64  `json:"done,omitempty"`
	Errors    int64    `json:"errors,omitempty"`
	Timings   [5]int64 `json:"timings,omitzero"` // polls, poll ns, empty polls, flushes, flush ns
	PeakRSS   float64  `json:"peak_rss_mb,omitempty"`
	Exit      bool     `json:"exit,omitempty"`
}

type children struct {
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
	read  sync.WaitGroup

	once sync.Once
	err  error
}

// startChildren starts cfg.Processes child processes with cfg.ChildCommand, child i
// running cfg.Managers processors on topic i mod len(topics), and waits until all listen.
func startChildren(ctx context.Context, cfg *Config, topics []string, s *stats, stderr io.Writer, record bool) (*children, error) {
	if cfg.ChildCommand == nil {
		return nil, errors.New("child processes: no command to start them with")
	}
	c := &children{}
	ready := make(chan struct{}, cfg.Processes)
	gone := make(chan struct{}, cfg.Processes) // a child's output ended before it was ready
	for i := range cfg.Processes {
		cmd, err := cfg.ChildCommand(Child{Processing: cfg.Processing, Topic: topics[i%len(topics)], Record: record})
		if err != nil {
			_ = c.stop()
			return nil, err
		}
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			_ = c.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			_ = c.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			_ = c.stop()
			return nil, fmt.Errorf("start child process: %w", err)
		}
		c.cmds = append(c.cmds, cmd)
		c.stdin = append(c.stdin, in)
		c.read.Go(func() {
			wasReady := false
			defer func() {
				if !wasReady {
					gone <- struct{}{}
				}
			}()
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 64<<20)
			for sc.Scan() {
				var l childLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					continue
				}
				if l.Ready && !wasReady {
					wasReady = true
					ready <- struct{}{}
				}
				s.mu.Lock()
				for _, d := range l.Starts {
					s.starts.add(d)
				}
				for _, d := range l.Dones {
					s.dones.add(d)
					s.window.add(d)
				}
				s.childRSS = max(s.childRSS, l.PeakRSS)
				s.mu.Unlock()
				if l.Errors > 0 {
					s.errors.Add(l.Errors)
				}
				s.polls.Add(l.Timings[0])
				s.pollNs.Add(l.Timings[1])
				s.empties.Add(l.Timings[2])
				s.flushes.Add(l.Timings[3])
				s.flushNs.Add(l.Timings[4])
				if l.Processed > 0 {
					s.processed.Add(l.Processed)
					s.signal()
				}
			}
		})
	}
	timeout := time.After(60 * time.Second)
	for range cfg.Processes {
		select {
		case <-ready:
		case <-gone:
			_ = c.stop()
			return nil, errors.New("a child process ended before it started listening (its standard error above says why)")
		case <-timeout:
			_ = c.stop()
			return nil, errors.New("child processes did not start listening within 60s")
		case <-ctx.Done():
			_ = c.stop()
			return nil, ctx.Err()
		}
	}
	return c, nil
}

// stop closes the children's standard input (their signal to shut down gracefully) and
// waits for them, killing those that take longer than 30 s.
func (c *children) stop() error {
	c.once.Do(func() { c.err = c.stopOnce() })
	return c.err
}

func (c *children) stopOnce() error {
	for _, in := range c.stdin {
		_ = in.Close()
	}
	// Their reports read to the end before Wait, which closes the pipes they come
	// through: a last line still in a pipe (the peak RSS) would be lost.
	read := make(chan struct{})
	go func() { c.read.Wait(); close(read) }()
	killed := false
	select {
	case <-read:
	case <-time.After(30 * time.Second):
		killed = true
		for _, cmd := range c.cmds {
			_ = cmd.Process.Kill() // its stdout closes: the reading ends
		}
		<-read
	}
	var errs []error
	for _, cmd := range c.cmds {
		err := cmd.Wait()
		if killed && err != nil {
			err = fmt.Errorf("child %d killed after 30s: %w", cmd.Process.Pid, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RunChild is the main of one child process of Config.Processes: it runs c.Managers
// processors on c.Topic, with pools from connect, until stdin closes (the parent's
// signal to stop) or ctx is done, reporting what they did as JSON lines on stdout.
// stderr takes the processors' warnings and errors; it must be safe for concurrent
// writes (an *os.File is).
func RunChild(ctx context.Context, c Child, connect Connect, stdin io.Reader, stdout, stderr io.Writer) error {
	s := newStats(stderr)
	var (
		outMu    sync.Mutex
		reported int64
		errs     int64
		timings  [5]int64
	)
	w := bufio.NewWriter(stdout)
	emit := func(l childLine) {
		b, _ := json.Marshal(l)
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = w.Write(append(b, '\n'))
		_ = w.Flush()
	}
	report := func() {
		l := childLine{}
		s.mu.Lock()
		l.Starts, s.starts = s.starts.v, samples{}
		l.Dones, s.dones = s.dones.v, samples{}
		s.mu.Unlock()
		outMu.Lock()
		n := s.processed.Load()
		l.Processed, reported = n-reported, n
		en := s.errors.Load()
		l.Errors, errs = en-errs, en
		now := [5]int64{s.polls.Load(), s.pollNs.Load(), s.empties.Load(), s.flushes.Load(), s.flushNs.Load()}
		for i := range now {
			l.Timings[i], timings[i] = now[i]-timings[i], now[i]
		}
		outMu.Unlock()
		if l.Processed != 0 || l.Errors != 0 || len(l.Starts) != 0 || len(l.Dones) != 0 || l.Timings != [5]int64{} {
			emit(l)
		}
	}
	ip, err := startProcessors(ctx, c.Processing, connect, []string{c.Topic}, s, warnLogger(stderr), c.Record, report)
	if err != nil {
		return err
	}
	emit(childLine{Ready: true})
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	err = ip.stop()
	report()
	emit(childLine{PeakRSS: peakRSSMB(), Exit: true})
	return err
}
