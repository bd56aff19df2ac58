// Command pgtask is the operator's command line for pgtask: migrations, topics, pushing
// and inspecting tasks, revival, housekeeping, the REST server and a one-command local
// development setup. Run "pgtask help" for the list of commands; docs/cli.md has an
// example of each.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgtask/pgtask/internal/gctune"
)

func main() {
	gctune.Apply()
	os.Exit(runProcess(os.Args[1:]))
}

// runProcess runs the command line args as this process's command, with SIGINT,
// SIGTERM and SIGHUP cancelling it, and returns the exit code. SIGHUP (the terminal
// closed) killed it at once: `pgtask dev` left its throwaway cluster running. A process
// started with SIGHUP ignored (nohup) keeps ignoring it.
func runProcess(args []string) int {
	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	hangup := !signal.Ignored(syscall.SIGHUP)
	if hangup {
		signals = append(signals, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	// After the first signal, a second SIGINT or SIGTERM gets the default behaviour
	// (exit at once); a second SIGHUP (a shell's, then the kernel's as the session ends)
	// is ignored, so that the graceful stop the first began finishes.
	// (Ignored before stop: stop lets go of SIGHUP, and one arriving in between would
	// kill the process.)
	context.AfterFunc(ctx, func() {
		if hangup {
			signal.Ignore(syscall.SIGHUP)
		}
		stop()
	})
	err := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	return exitCode(err, os.Stderr)
}
