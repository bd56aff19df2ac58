package httpguard_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/conntest"
	"github.com/pgtask/pgtask/internal/httpguard"
)

// short are the timeouts of these tests: long enough for a request on the loopback
// interface, short enough to wait for.
var short = httpguard.Timeouts{ReadHeader: 300 * time.Millisecond, Read: 500 * time.Millisecond, Write: 5 * time.Second, Idle: 500 * time.Millisecond}

// guardTime bounds how long a test waits for the server to cut a connection it must
// cut: far beyond the configured timeouts, so reaching it means the cut never came.
const guardTime = 10 * time.Second

// echo answers POST /echo with the length of the body it read with ReadBody, 400 or
// 413 when that failed; GET /ok answers 200.
func echo() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := httpguard.ReadBody(w, r, 1<<20)
		var bodyErr *httpguard.BodyError
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &bodyErr):
			httpguard.WriteError(w, http.StatusBadRequest, err.Error())
		case errors.As(err, &tooLarge):
			httpguard.WriteError(w, http.StatusRequestEntityTooLarge, err.Error())
		case err != nil:
			httpguard.WriteError(w, http.StatusInternalServerError, err.Error())
		default:
			fmt.Fprintf(w, "%d bytes\n", len(b))
		}
	})
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// start serves h with the timeouts on a free loopback port and returns its address.
func start(t *testing.T, h http.Handler, timeouts httpguard.Timeouts) string {
	t.Helper()
	if err := timeouts.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpguard.NewServer(h, timeouts, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// waitClosed reads conn until the server closes it, failing the test if guardTime
// passes first.
func waitClosed(t *testing.T, conn net.Conn) string {
	t.Helper()
	return conntest.ReadUntilClosed(t, conn, guardTime)
}

// get sends GET /ok on a fresh connection through the standard client.
func get(t *testing.T, addr string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: guardTime}
	resp, err := client.Get("http://" + addr + "/ok")
	if err != nil {
		t.Fatalf("a normal request failed: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a normal request: status %d", resp.StatusCode)
	}
}

func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	t.Run("CutsABodySentSlowlyWhileANormalRequestSucceeds", func(t *testing.T) {
		t.Parallel()
		addr := start(t, echo(), short)
		conn := conntest.Dial(t, addr, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\nab")
		// A byte every 20 ms: never idle long, never done within the read timeout.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := conn.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		get(t, addr)
		answer := waitClosed(t, conn)
		if answer != "" && !strings.HasPrefix(answer, "HTTP/1.1 400") {
			t.Errorf("answer to the slow body %q, want a 400 or none", answer)
		}
		get(t, addr)
	})
	t.Run("CutsSlowHeaders", func(t *testing.T) {
		t.Parallel()
		addr := start(t, echo(), short)
		conn := conntest.Dial(t, addr, "GET /ok HTTP/1.1\r\nHost: localhost\r\n")
		get(t, addr)
		if answer := waitClosed(t, conn); strings.Contains(answer, "200 OK") {
			t.Errorf("a request whose headers never ended was answered: %q", answer)
		}
	})
	t.Run("ClosesIdleKeepAliveConnections", func(t *testing.T) {
		t.Parallel()
		addr := start(t, echo(), short)
		conn := conntest.Dial(t, addr, "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n")
		rd := bufio.NewReader(conn)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("first request: %d, close %v, %v", resp.StatusCode, resp.Close, err)
		}
		if rest := waitClosed(t, conn); rest != "" {
			t.Errorf("after the answer the idle connection carried %q", rest)
		}
	})
	t.Run("AnswersATruncatedBodyWith400", func(t *testing.T) {
		t.Parallel()
		addr := start(t, echo(), short)
		conn := conntest.Dial(t, addr, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("x", 20))
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		answer := waitClosed(t, conn)
		if !strings.HasPrefix(answer, "HTTP/1.1 400") || !strings.Contains(answer, "ended before its announced length") {
			t.Errorf("answer %q, want 400 saying the body ended early", answer)
		}
	})
	t.Run("AnswersABadChunkWith400", func(t *testing.T) {
		t.Parallel()
		addr := start(t, echo(), short)
		conn := conntest.Dial(t, addr, "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
		answer := waitClosed(t, conn)
		if !strings.HasPrefix(answer, "HTTP/1.1 400") || !strings.Contains(answer, "could not read the request body") {
			t.Errorf("answer %q, want 400 naming the body", answer)
		}
	})
	t.Run("AnswersAnUnauthenticatedSlowBodyAtOnce", func(t *testing.T) {
		t.Parallel()
		g := guard(t, httpguard.Config{Token: "s3cret"})
		// Timeouts far beyond guardTime: only the refusal can close the connection in time.
		addr := start(t, g.Protect(g.Authenticate(echo())), httpguard.Timeouts{Read: time.Hour, Write: time.Hour, Idle: time.Hour})
		conn := conntest.Dial(t, addr, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		if answer := waitClosed(t, conn); !strings.HasPrefix(answer, "HTTP/1.1 401") {
			t.Errorf("answer %q, want 401", answer)
		}
	})
	// net/http lifts the read deadline once the body is read (at once for a GET): the
	// handler's context was cancelled only by its client going away.
	t.Run("StopsAHandlerStillWorkingAtTheReadTimeout", func(t *testing.T) {
		t.Parallel()
		mux := http.NewServeMux()
		mux.HandleFunc("GET /wait", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
				httpguard.WriteError(w, http.StatusServiceUnavailable, "stopped")
			case <-time.After(guardTime):
				fmt.Fprintln(w, "never stopped")
			}
		})
		addr := start(t, mux, short)
		conn := conntest.Dial(t, addr, "GET /wait HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
		if answer := waitClosed(t, conn); !strings.HasPrefix(answer, "HTTP/1.1 503") || !strings.Contains(answer, "stopped") {
			t.Errorf("answer %q, want 503 stopped", answer)
		}
	})
	t.Run("ExtendGivesOneRouteMoreTime", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		mux := http.NewServeMux()
		mux.Handle("/", echo())
		mux.HandleFunc("GET /long", func(w http.ResponseWriter, r *http.Request) {
			if err := httpguard.Extend(w, r, time.Minute); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			select {
			case <-release:
				fmt.Fprintln(w, "done")
			case <-r.Context().Done(): // the extended context must outlive the read timeout
				fmt.Fprintln(w, "stopped")
			}
		})
		addr := start(t, mux, short)
		long := conntest.Dial(t, addr, "GET /long HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
		// A slow body sent after the long request started is cut by the read timeout:
		// when it is, the long request's own deadline has passed too.
		slow := conntest.Dial(t, addr, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n")
		waitClosed(t, slow)
		close(release)
		if answer := waitClosed(t, long); !strings.HasPrefix(answer, "HTTP/1.1 200") || !strings.HasSuffix(answer, "done\n") {
			t.Errorf("the extended request got %q, want 200 done", answer)
		}
	})
}

func TestTimeoutsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		t  httpguard.Timeouts
		ok bool
	}{
		{httpguard.Timeouts{}, true},
		{httpguard.Timeouts{Read: time.Second}, true}, // the header timeout follows it down
		{httpguard.Timeouts{Read: -1}, false},
		{httpguard.Timeouts{Idle: -time.Second}, false},
		{httpguard.Timeouts{ReadHeader: time.Minute, Read: time.Second}, false},
		{httpguard.Timeouts{Read: 2 * time.Minute}, false}, // past the default write timeout
		{httpguard.Timeouts{Read: 2 * time.Minute, Write: 2 * time.Minute}, true},
		{httpguard.Timeouts{Read: time.Minute, Write: time.Second}, false},
	} {
		if err := tc.t.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.t, err, tc.ok)
		}
	}
	srv := httpguard.NewServer(http.NotFoundHandler(), httpguard.Timeouts{}, slog.New(slog.DiscardHandler))
	if srv.ReadHeaderTimeout != httpguard.ReadHeaderTimeoutDefault || srv.ReadTimeout != httpguard.ReadTimeoutDefault ||
		srv.WriteTimeout != httpguard.WriteTimeoutDefault || srv.IdleTimeout != httpguard.IdleTimeoutDefault {
		t.Errorf("server timeouts %v %v %v %v, want the defaults", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
}
