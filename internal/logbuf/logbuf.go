// Package logbuf holds a buffer that a logger or a subprocess writes to from several
// goroutines while a test reads it: the tests of the processor, the REST API and the
// binaries check their log lines with it.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writes and reads. The zero value is
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lines returns the non-empty lines written so far that contain every one of parts.
func (b *Buffer) Lines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		keep := line != ""
		for _, p := range parts {
			keep = keep && strings.Contains(line, p)
		}
		if keep {
			out = append(out, line)
		}
	}
	return out
}
