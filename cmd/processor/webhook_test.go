package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

func TestHTTPDecision(t *testing.T) {
	t.Parallel()
	const retryDelay = 30 * time.Second
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		res  httpResponse
		want repository.Decision
	}{
		{"200SucceedsWithBody", httpResponse{status: 200, head: "sent", tail: "sent"}, repository.Succeed("sent")},
		{"204SucceedsWithoutMessage", httpResponse{status: 204}, repository.Succeed("")},
		{"422Filters", httpResponse{status: 422, head: "irrelevant"}, repository.Skip("irrelevant")},
		{"409Suspends", httpResponse{status: 409, head: "later, by hand"}, repository.Suspend("later, by hand")},
		{"429RetriesAfterDefaultDelay", httpResponse{status: 429}, repository.SnoozeFor(retryDelay)},
		{"503HonoursRetryAfterSeconds", httpResponse{status: 503, retryAfter: "120"}, repository.SnoozeFor(2 * time.Minute)},
		{"429HonoursRetryAfterDate", httpResponse{status: 429, retryAfter: now.Add(time.Hour).Format(http.TimeFormat)}, repository.SnoozeFor(time.Hour)},
		{"500FailsWithBodyTail", httpResponse{status: 500, head: "x", tail: "db down"}, repository.Fail(errors.New("HTTP 500 Internal Server Error: db down"))},
		{"404FailsWithoutBody", httpResponse{status: 404}, repository.Fail(errors.New("HTTP 404 Not Found"))},
		{"400Fails", httpResponse{status: 400, tail: "bad input"}, repository.Fail(errors.New("HTTP 400 Bad Request: bad input"))},
		{"RedirectFails", httpResponse{status: 302}, repository.Fail(errors.New("HTTP 302 Found"))},
		{"UnknownStatusFails", httpResponse{status: 599}, repository.Fail(errors.New("HTTP 599"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := httpDecision(tc.res, retryDelay, now); got != tc.want {
				t.Errorf("decision %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const fallback = 30 * time.Second
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", fallback},
		{"0", retryAfterMin}, // not at once: an endpoint saying so every time had the task posted in a loop
		{" 15 ", 15 * time.Second},
		{"-5", fallback},
		{"soon", fallback},
		{"99999999999", retryAfterMax},
		{now.Add(-time.Hour).Format(http.TimeFormat), retryAfterMin},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(1000 * time.Hour).Format(http.TimeFormat), retryAfterMax},
	} {
		if got := retryAfter(tc.header, fallback, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.header, got, tc.want)
		}
	}
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	task := repository.Task{Topic: "mail", Sequence: 7, Identifier: "user-1", Input: `{"to":"a@b"}`, Reference: "r", Attempt: 2, Created: created}
	logger := slog.New(slog.DiscardHandler)

	// Workers posting at once reuse their connections: the default transport kept 2 idle
	// a host, so that 8 workers opened connections again and again.
	t.Run("WorkersReuseTheirConnections", func(t *testing.T) {
		t.Parallel()
		var opened atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Millisecond)
			fmt.Fprint(w, "ok")
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				opened.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		const workers = 8
		h := newHTTPHandler(srv.URL, time.Minute, time.Second, workers, logger)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range 100 {
					if d := h.handle(t.Context(), task); d.Result != repository.Success {
						t.Errorf("decision %v", d)
					}
				}
			})
		}
		wg.Wait()
		// The count depends on timing (a request may dial while a connection is being
		// handed back, and the transport keeps the one it did not use), so it is logged;
		// what decides it is checked: the transport keeps an idle connection a worker.
		t.Logf("%d workers posting 100 tasks each opened %d connections", workers, opened.Load())
		tr, ok := h.client.Transport.(*http.Transport)
		if !ok {
			t.Fatalf("the handler's transport is a %T, want its own *http.Transport", h.client.Transport)
		}
		if tr.MaxIdleConnsPerHost < workers || tr.MaxIdleConns < workers {
			t.Errorf("the handler's transport keeps %d idle connections a host, %d in all; want at least the %d workers", tr.MaxIdleConnsPerHost, tr.MaxIdleConns, workers)
		}
	})
	t.Run("PostsTheTaskAsJSON", func(t *testing.T) {
		t.Parallel()
		var got map[string]any
		var contentType string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			contentType = r.Header.Get("Content-Type")
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				t.Errorf("decode: %v", err)
			}
			fmt.Fprint(w, strings.Repeat("y", 2*outputLimit))
		}))
		defer srv.Close()
		d := newHTTPHandler(srv.URL, time.Minute, time.Second, 1, logger).handle(t.Context(), task)
		if want := repository.Succeed(strings.Repeat("y", outputLimit) + truncated); d != want {
			t.Errorf("decision: %v with %d-byte message, want SUCCESS with the body's first %d bytes", d.Result, len(d.Message), outputLimit)
		}
		if contentType != "application/json" {
			t.Errorf("Content-Type %q, want application/json", contentType)
		}
		want := map[string]any{"topic": "mail", "sequence": 7.0, "identifier": "user-1", "input": `{"to":"a@b"}`,
			"reference": "r", "attempt": 2.0, "created": "2026-05-06T07:08:09Z"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("body %v, want %v", got, want)
		}
	})

	t.Run("TimeoutFails", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer srv.Close()
		defer close(release)
		d := newHTTPHandler(srv.URL, 200*time.Millisecond, time.Second, 1, logger).handle(t.Context(), task)
		if want := repository.Fail(errors.New("timed out after 200ms")); d != want {
			t.Errorf("decision %+v, want %+v", d, want)
		}
	})

	t.Run("TransportErrorFails", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		// the endpoint's path and query (a webhook's secret) are not in the task's error,
		// which every reader of the tasks sees
		d := newHTTPHandler(url+"/T0/SECRET?token=SECRET", time.Minute, time.Second, 1, logger).handle(t.Context(), task)
		if d.Result != repository.Failure || d.Snooze || !strings.Contains(d.Message, "connection refused") ||
			strings.Contains(d.Message, "SECRET") || !strings.Contains(d.Message, url+"/…") {
			t.Errorf("decision %+v, want FAILURE saying the connection to %s/… was refused, without the path and query", d, url)
		}
	})

	// A 101 answer's body is the connection itself, which the request's context does not
	// close: --timeout did not bound it, and the worker waited for the endpoint (or the
	// shutdown deadline).
	t.Run("TimeoutBoundsASwitchedProtocol", func(t *testing.T) {
		t.Parallel()
		addr := answerOnce(t, func(conn net.Conn) {
			_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n")
			_, _ = conn.Read(make([]byte, 4096)) // silent until the client goes
		})
		done := make(chan repository.Decision, 1)
		go func() {
			done <- newHTTPHandler("http://"+addr+"/t", 300*time.Millisecond, time.Second, 1, logger).handle(t.Context(), task)
		}()
		select {
		case d := <-done:
			if want := repository.Fail(errors.New("timed out after 300ms")); d != want {
				t.Errorf("decision %+v, want %+v", d, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler still waits 10 s after its 300 ms timeout")
		}
	})

	// An answer whose body breaks off after its status: a success stands (the endpoint
	// did the work; it ran again, and with --max-attempts 1 it became a failure), with
	// what was read; a failing status is the failure it was.
	t.Run("AnAnswerCutShortAfterItsStatus", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			status string
			want   repository.Result
		}{{"200 OK", repository.Success}, {"422 Unprocessable Entity", repository.Filter}, {"500 Internal Server Error", repository.Failure}} {
			addr := answerOnce(t, func(conn net.Conn) {
				// 100 bytes promised, 4 sent, then the connection closes
				_, _ = io.WriteString(conn, "HTTP/1.1 "+tc.status+"\r\nContent-Length: 100\r\n\r\nsent")
			})
			d := newHTTPHandler("http://"+addr+"/t", time.Minute, time.Second, 1, logger).handle(t.Context(), task)
			if d.Result != tc.want || d.Snooze || !strings.Contains(d.Message, "unexpected EOF") ||
				tc.want != repository.Failure && !strings.HasPrefix(d.Message, "sent (answer cut short: read response of HTTP") {
				t.Errorf("HTTP %s cut short: decision %+v, want %v saying what was read and that it was cut short", tc.status, d, tc.want)
			}
		}
	})

	// An endpoint answering 503 to every task (a load balancer without a healthy
	// backend) retried them later for ever, no attempt used, /healthz ok and the
	// snoozes logged at DEBUG: after streakLimit tasks in a row over a while, the
	// processor is unhealthy until the endpoint answers anything else.
	t.Run("AnEndpointAnswering503MakesItUnhealthy", func(t *testing.T) {
		t.Parallel()
		var status atomic.Int64
		status.Store(http.StatusServiceUnavailable)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(int(status.Load()))
		}))
		defer srv.Close()
		h := newHTTPHandler(srv.URL, time.Minute, time.Second, 1, logger)
		h.unavailable.after = 300 * time.Millisecond
		for i := range streakLimit {
			if err := h.health(); err != nil {
				t.Fatalf("health after %d answers 503: %v, want healthy", i, err)
			}
			if d := h.handle(t.Context(), task); !d.Snooze {
				t.Fatalf("decision on a 503: %+v, want retried later", d)
			}
		}
		if err := h.health(); err != nil {
			t.Fatalf("health right after %d answers 503: %v, want healthy until they have gone on for a while", streakLimit, err)
		}
		// a burst that ended (the endpoint's own redeploy, its tasks retried later) is
		// no streak, however long ago it began
		time.Sleep(h.unavailable.after)
		if err := h.health(); err != nil {
			t.Fatalf("health %v after a burst of %d answers 503: %v, want healthy", h.unavailable.after, streakLimit, err)
		}
		h.handle(t.Context(), task) // the 503s go on
		if err := h.health(); err == nil || !strings.Contains(err.Error(), "answered 503 Service Unavailable for the last 4 tasks") {
			t.Fatalf("health after 4 answers 503 over %v: %v, want unhealthy saying so", h.unavailable.after, err)
		}
		status.Store(http.StatusOK)
		if d := h.handle(t.Context(), task); d.Result != repository.Success {
			t.Fatalf("decision once the endpoint answers 200: %+v", d)
		}
		if err := h.health(); err != nil {
			t.Errorf("health once the endpoint answered 200: %v, want healthy", err)
		}
	})

	// An endpoint that sent its status and is still answering when --timeout ends it
	// (a streamed answer) had not finished: its status does not decide.
	t.Run("AnAnswerTheTimeoutCutAfterItsStatusFails", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "started")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}))
		defer srv.Close()
		d := newHTTPHandler(srv.URL, 300*time.Millisecond, time.Second, 1, logger).handle(t.Context(), task)
		if want := repository.Fail(errors.New("timed out after 300ms")); d != want {
			t.Errorf("decision %+v, want %+v", d, want)
		}
		// a "retry later" asks for no work done: it stands, and uses no attempt
		unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "busy")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}))
		defer unavailable.Close()
		if d := newHTTPHandler(unavailable.URL, 300*time.Millisecond, time.Second, 1, logger).handle(t.Context(), task); !d.Snooze {
			t.Errorf("a 503 whose body the timeout cut: decision %+v, want retried later", d)
		}
	})

	t.Run("RedirectIsNotFollowed", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}))
		defer srv.Close()
		d := newHTTPHandler(srv.URL, time.Minute, time.Second, 1, logger).handle(t.Context(), task)
		if d.Result != repository.Failure || !strings.HasPrefix(d.Message, "HTTP 302 Found") {
			t.Errorf("decision %+v, want FAILURE HTTP 302", d)
		}
	})
}

// answerOnce listens on a port of its own until the test ends and answers the first
// connection by hand: answer writes to it once its request has been read (one read),
// and the connection closes when answer returns. It returns the address.
func answerOnce(t *testing.T, answer func(conn net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = conn.Read(make([]byte, 4096))
		answer(conn)
	}()
	return ln.Addr().String()
}
