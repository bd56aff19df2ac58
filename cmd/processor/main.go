// Command processor processes the tasks of one pgtask topic by running a program per
// task or POSTing each task to an HTTP endpoint. See docs/processor.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgtask/pgtask/internal/gctune"
)

func main() {
	if isGuard(os.Args) {
		runGuard() // the guard of a program's process group (guard.go)
	}
	gctune.Apply()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	context.AfterFunc(ctx, stop) // a second signal ends the process at once
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}
