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
// closed) killed it at once: `pgtask dev` left its throwaway cluster running.
func runProcess(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// After the first signal, a second one gets the default behaviour (exit at once).
	context.AfterFunc(ctx, stop)
	err := run(ctx, args, os.Stdout, os.Stderr)
	stop()
	return exitCode(err, os.Stderr)
}
