package httpguard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of Timeouts.
const (
	// ReadHeaderTimeoutDefault bounds the reading of a request's headers.
	ReadHeaderTimeoutDefault = 10 * time.Second
	// ReadTimeoutDefault bounds the reading of a whole request, headers and body, from
	// its first byte: a 1 MiB body must arrive at 35 KB/s or more.
	ReadTimeoutDefault = 30 * time.Second
	// WriteTimeoutDefault bounds a request from the end of its headers to the end of the
	// response: the handler's work and the writing of its answer.
	WriteTimeoutDefault = 60 * time.Second
	// IdleTimeoutDefault is how long a keep-alive connection may wait for its next request.
	IdleTimeoutDefault = 60 * time.Second
)

// Timeouts bound the phases of a connection; a zero field takes its default.
type Timeouts struct {
	// ReadHeader bounds the reading of a request's headers.
	ReadHeader time.Duration
	// Read bounds the reading of a whole request, headers and body, and the work of
	// its handler: the request's context is cancelled when Read has passed since the
	// handler started (Extend moves that deadline).
	Read time.Duration
	// Write bounds a request from the end of its headers to the end of its response.
	Write time.Duration
	// Idle is how long a keep-alive connection may wait for its next request.
	Idle time.Duration
}

// Validate refuses negative timeouts, a header timeout longer than the whole read, and
// a read timeout longer than the write timeout.
func (t Timeouts) Validate() error {
	t = t.withDefaults()
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read header", t.ReadHeader}, {"read", t.Read}, {"write", t.Write}, {"idle", t.Idle}} {
		if d.v < 0 {
			return fmt.Errorf("%s timeout %v is negative", d.name, d.v)
		}
	}
	if t.ReadHeader > t.Read {
		return fmt.Errorf("read header timeout %v is longer than the read timeout %v", t.ReadHeader, t.Read)
	}
	// A handler's context ends at the read deadline, so its database work does too; an
	// answer is written until the write deadline. With the write deadline first, a
	// request could work on past the point where its answer can no longer be sent.
	if t.Read > t.Write {
		return fmt.Errorf("read timeout %v is longer than the write timeout %v: a request's work goes on until the read timeout, and its answer could not be sent after the write timeout; give a write timeout at least as long", t.Read, t.Write)
	}
	return nil
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Read == 0 {
		t.Read = ReadTimeoutDefault
	}
	if t.ReadHeader == 0 {
		t.ReadHeader = min(ReadHeaderTimeoutDefault, t.Read)
	}
	if t.Write == 0 {
		t.Write = WriteTimeoutDefault
	}
	if t.Idle == 0 {
		t.Idle = IdleTimeoutDefault
	}
	return t
}

// NewServer returns a server of h with the timeouts (zero fields take their defaults);
// its own errors (a failed TLS handshake, a panic in a handler) go to logger at WARN.
// Call Timeouts.Validate first: NewServer does not check them.
func NewServer(h http.Handler, t Timeouts, logger *slog.Logger) *http.Server {
	t = t.withDefaults()
	return &http.Server{
		Handler:           withDeadline(h, t.Read),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// maxHeaderBytes bounds a request's headers: 64 KiB, well above any the API needs and a
// sixteenth of net/http's default.
const maxHeaderBytes = 64 << 10

// withDeadline cancels each request's context once d has passed since its handler
// started, unless Extend moves that time. net/http's read deadline does not: it is
// lifted once the body has been read (at once for a GET), so a handler waiting on a
// database statement or a lock ran on until its client went away, holding a
// connection of the pool, its answer lost at the write deadline.
func withDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := time.AfterFunc(d, cancel)
		defer stop.Stop()
		h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, deadlineKey{}, stop)))
	})
}

// deadlineKey keys the timer that cancels a request's context (withDeadline).
type deadlineKey struct{}

// Extend gives the request being served d more time, from now, to be read, to be
// worked on (its context's end) and to be answered, beyond the server's Timeouts. A route
// that holds requests longer than those (a long poll, a stream of events, a large
// upload) calls it first; other routes stay bounded by the server's settings.
func Extend(w http.ResponseWriter, r *http.Request, d time.Duration) error {
	rc := http.NewResponseController(w)
	until := time.Now().Add(d)
	if err := rc.SetReadDeadline(until); err != nil {
		return fmt.Errorf("extend read deadline: %w", err)
	}
	if err := rc.SetWriteDeadline(until); err != nil {
		return fmt.Errorf("extend write deadline: %w", err)
	}
	if stop, ok := r.Context().Value(deadlineKey{}).(*time.Timer); ok {
		stop.Reset(d)
	}
	return nil
}
