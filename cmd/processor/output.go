package main

import (
	"strings"
	"sync"
)

// outputLimit caps the text kept from a program's stdout or stderr, or an HTTP response
// body, as a task's output.
const outputLimit = 4 << 10

// truncated marks where kept text was cut.
const truncated = "…"

// headBuffer keeps the first limit bytes written to it and counts the rest, so a
// chatty program never blocks on a full pipe nor fills memory.
type headBuffer struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped bool
}

func (b *headBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - len(b.buf)
	if room >= len(p) {
		b.buf = append(b.buf, p...)
	} else {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.dropped = true
	}
	return len(p), nil
}

// String returns the kept text, trimmed and made storable, marked when cut.
func (b *headBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := storable(string(b.buf))
	if b.dropped {
		s = strings.TrimSpace(s) + truncated
	}
	return strings.TrimSpace(s)
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if len(p) >= b.limit {
		b.dropped = b.dropped || len(b.buf) > 0 || len(p) > b.limit
		b.buf = append(b.buf[:0], p[len(p)-b.limit:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.dropped = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns the kept text, trimmed and made storable, marked when cut.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(storable(string(b.buf)))
	if b.dropped && s != "" {
		s = truncated + s
	}
	return s
}

// storable makes text safe for a PostgreSQL text column: invalid UTF-8 (also a rune cut
// in half at a buffer's edge) becomes U+FFFD and NUL bytes are dropped. Output a
// database would refuse must not fail the completion of a whole batch.
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
