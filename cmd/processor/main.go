// Command processor processes the tasks of one pgtask topic by running a program per
// task or POSTing each task to an HTTP endpoint. See docs/processor.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pgtask/pgtask/internal/gctune"
)

func main() {
	if isGuard(os.Args) {
		runGuard() // the guard of a program's process group (guard.go)
	}
	gctune.Apply()
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2) // two sent at once are two
	// SIGHUP (the terminal of an interactive start closed) stops it gracefully too: by
	// default it ended the process at once, its leases left to expire (an attempt used
	// each). One started with SIGHUP ignored (nohup) keeps ignoring it.
	if signal.Ignored(syscall.SIGHUP) {
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	} else {
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	}
	go func() {
		<-signals
		// a pipe the logs go to may be gone with the terminal (| tee): its writes
		// fail rather than end the process by SIGPIPE during the graceful stop
		signal.Ignore(syscall.SIGPIPE)
		cancel() // the first: a graceful stop
		for {
			s := (<-signals).(syscall.Signal)
			if s != syscall.SIGHUP {
				endNow(s)
			}
			// a second SIGHUP (a shell's, then the kernel's as the session ends) lets
			// the graceful stop finish
		}
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(exitCode(err, os.Stderr))
}

// endNow ends the process at once on a second signal s, as s would without a handler:
// it dies by s; a SIGINT ignored when the process started (a background job of a
// script), which Notify had handled, exits 128+s as a shell reports a death by it. The
// programs it runs die with it (their guards, guard.go).
func endNow(s syscall.Signal) {
	signal.Reset(s)
	_ = syscall.Kill(os.Getpid(), s)
	time.Sleep(100 * time.Millisecond) // not reached unless s is ignored
	os.Exit(128 + int(s))
}
