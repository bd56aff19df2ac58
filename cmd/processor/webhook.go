package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// bodyLimit is the most of a response body read: its head is the message of a success,
// its tail the error of a failure.
const bodyLimit = 1 << 20

// retryAfterMax caps a Retry-After delay, so a confused endpoint cannot park a task for
// years; retryAfterMin is the least it gives, so that one answering "429, Retry-After: 0"
// again and again does not have the task posted in a loop as fast as it answers (a
// snooze uses no attempt: nothing else would end it).
const (
	retryAfterMax = 24 * time.Hour
	retryAfterMin = time.Second
)

// httpTask is the JSON body POSTed per task.
type httpTask struct {
	Topic      string    `json:"topic"`
	Sequence   int64     `json:"sequence"`
	Identifier string    `json:"identifier"`
	Input      string    `json:"input"`
	Reference  string    `json:"reference"`
	Attempt    int32     `json:"attempt"`
	Created    time.Time `json:"created"`
}

// httpHandler POSTs each task to a URL (processor --http).
type httpHandler struct {
	url        string
	client     *http.Client
	timeout    time.Duration
	retryDelay time.Duration
	logger     *slog.Logger
	// unavailable counts the tasks in a row the endpoint answered 503 (health)
	unavailable streak
}

// health reports the endpoint answering 503 Service Unavailable to the last
// streakLimit tasks or more, over streakForDefault or more (a load balancer without a
// healthy backend: every task is retried later without using an attempt, for ever),
// until it answers anything else.
func (h *httpHandler) health() error {
	return h.unavailable.health("the endpoint answered 503 Service Unavailable")
}

// newHTTPHandler POSTs to url from up to workers tasks at once: it keeps as many idle
// connections to the endpoint (http.DefaultTransport keeps 2 a host, so that busy
// workers opened a connection, and its TLS handshake, per task).
func newHTTPHandler(url string, timeout, retryDelay time.Duration, workers int, logger *slog.Logger) *httpHandler {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = max(workers, 2)
	transport.MaxIdleConns = max(transport.MaxIdleConns, workers)
	return &httpHandler{
		url: url,
		client: &http.Client{
			Transport: transport,
			// A redirect is answered as the status it is (FAILURE), not followed: a
			// POST silently turned into a GET would lose the task.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeout:     timeout,
		retryDelay:  retryDelay,
		logger:      logger,
		unavailable: streak{after: streakForDefault},
	}
}

// httpResponse is what an endpoint answered.
type httpResponse struct {
	status     int
	retryAfter string
	head, tail string // the body's first and last outputLimit bytes, trimmed
	// cut: the processor broke the answer off after its status (--timeout, a cancel,
	// the shutdown): the endpoint had not finished answering
	cut bool
}

func (h *httpHandler) handle(ctx context.Context, task repository.Task) repository.Decision {
	start := time.Now()
	resp, err := h.post(ctx, task)
	var d repository.Decision
	switch {
	case err == nil:
		d = httpDecision(resp, h.retryDelay, time.Now())
	case resp.status != 0:
		// The answer broke off after its status. The peer's break (a reset, a proxy
		// cutting it): a status that decides other than FAILURE stands, with what was
		// read, since the endpoint did the work it answers for (it ran again, and with
		// --max-attempts 1 a success became a failure). The processor's (--timeout):
		// the endpoint had not finished, and only a "retry later" stands, as it asks
		// for no work done. Any other is the error.
		d = httpDecision(resp, h.retryDelay, time.Now())
		switch {
		case d.Snooze:
		case d.Result == repository.Failure || resp.cut:
			d = repository.Fail(err)
		default:
			d.Message = strings.TrimSpace(d.Message + " (answer cut short: " + err.Error() + ")")
		}
	default:
		d = repository.Fail(err)
	}
	if resp.status != 0 || ctx.Err() == nil {
		unavailable := resp.status == http.StatusServiceUnavailable
		if h.unavailable.add(unavailable) == streakLimit {
			h.logger.Warn("the endpoint answers 503 Service Unavailable to every task: they are retried later, no attempt used",
				slog.String("endpoint", shownURL(h.url)), slog.Int("tasks", streakLimit), slog.Duration("retry_delay", h.retryDelay))
		}
	}
	logTask(h.logger, task, d, time.Since(start), slog.Int("status", resp.status))
	return d
}

// post sends the task and reads the answer; an error says why there is none, or, with
// the answer's status, why it broke off (what was read is returned).
func (h *httpHandler) post(ctx context.Context, task repository.Task) (httpResponse, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, h.timeout, errTimedOut)
	defer cancel()
	body, err := json.Marshal(httpTask{
		Topic: task.Topic, Sequence: task.Sequence, Identifier: task.Identifier, Input: task.Input,
		Reference: task.Reference, Attempt: attempt(task), Created: task.Created,
	})
	if err != nil {
		return httpResponse{}, fmt.Errorf("encode task: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return httpResponse{}, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "pgtask-processor")
	res, err := h.client.Do(req)
	if err != nil {
		return httpResponse{}, h.transportError(ctx, err)
	}
	defer res.Body.Close()
	// The timeout bounds the body too: a 101 answer's body is the connection itself,
	// which the request's context does not close.
	defer context.AfterFunc(ctx, func() { _ = res.Body.Close() })()
	head := &headBuffer{limit: outputLimit}
	tail := &tailBuffer{limit: outputLimit}
	if _, err = io.Copy(io.MultiWriter(head, tail), io.LimitReader(res.Body, bodyLimit)); err != nil {
		err = h.transportError(ctx, fmt.Errorf("read response of HTTP %d: %w", res.StatusCode, err))
	}
	// cut by the processor (--timeout, a cancel, the shutdown), not by the peer: the
	// endpoint had not finished answering, whatever its status said
	cut := err != nil && ctx.Err() != nil
	return httpResponse{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), head: head.String(), tail: tail.String(), cut: cut}, err
}

// leaseLostReason says why a task was stopped when the processor's heartbeat went stale
// (processor.ErrLeaseLost).
const leaseLostReason = "lease may be lost: the processor's heartbeat has failed, and other processors may run the task again"

// transportError names a timeout or a cancel as such, or else keeps err.
func (h *httpHandler) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errTimedOut):
			return fmt.Errorf("timed out after %v", h.timeout)
		case errors.Is(cause, processor.ErrTaskCancelled):
			return errors.New("cancelled")
		case errors.Is(cause, processor.ErrLeaseLost):
			return errors.New("aborted: " + leaseLostReason)
		default:
			return errors.New("aborted at processor shutdown")
		}
	}
	return withoutURL(err)
}

// withoutURL hides the endpoint's path and query in an error of the HTTP client, which
// names the URL whole: a webhook's secret is often there (the processor has no other
// place for one), and the error becomes the task's, which every reader of the tasks
// sees and the log shows.
func withoutURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%s %s: %w", ue.Op, shownURL(ue.URL), ue.Err)
}

// shownURL is how the endpoint's URL is shown in errors and the log: its scheme and
// host, and "/…" for a path or query, where a webhook's secret usually is; never the
// user and password. "the endpoint" when it does not parse as a URL with a host.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the endpoint"
	}
	shown := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Opaque != "" {
		shown += "/…"
	}
	return shown
}

// httpDecision maps an endpoint's answer to the task's decision (docs/processor.md):
// 2xx SUCCESS with the body as message, 422 FILTER, 409 SUSPENSION, 429 and 503 retry
// later (after Retry-After, else retryDelay) without using an attempt, anything else
// FAILURE with the body's tail in the error.
func httpDecision(r httpResponse, retryDelay time.Duration, now time.Time) repository.Decision {
	switch {
	case r.status >= 200 && r.status <= 299:
		return repository.Succeed(r.head)
	case r.status == http.StatusUnprocessableEntity:
		return repository.Skip(r.head)
	case r.status == http.StatusConflict:
		return repository.Suspend(r.head)
	case r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable:
		return repository.SnoozeFor(retryAfter(r.retryAfter, retryDelay, now))
	}
	reason := "HTTP " + strconv.Itoa(r.status)
	if text := http.StatusText(r.status); text != "" {
		reason += " " + text
	}
	return repository.Fail(withTail(reason, r.tail))
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date. A missing or
// unreadable header gives fallback; the delay is at least retryAfterMin (0, or a date
// past, included) and at most retryAfterMax.
func retryAfter(header string, fallback time.Duration, now time.Time) time.Duration {
	header = strings.TrimSpace(header)
	if header == "" {
		return fallback
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(header, 10, 64); err == nil {
		if secs < 0 {
			return fallback
		}
		if secs > int64(retryAfterMax/time.Second) {
			return retryAfterMax
		}
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(header); err == nil {
		d = max(at.Sub(now), 0)
	} else {
		return fallback
	}
	return min(max(d, retryAfterMin), retryAfterMax)
}
