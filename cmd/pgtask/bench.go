package main

import (
	"context"
	"errors"
	"io"
)

// runBench is a STUB: the real "pgtask bench" subcommand (throughput measurement) is
// written separately and will replace this file. It only reports that it is missing.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("bench: not implemented yet")
}
