package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/conntest"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// served is a `pgtask serve` or `pgtask dev` running in this process.
type served struct {
	base   string // http://127.0.0.1:PORT
	out    *lineWatcher
	stderr *logbuf.Buffer
}

// runServer runs the CLI with args (serve or dev) and environ in the background until
// the test ends; it returns once the server listens.
func runServer(t *testing.T, f *fixture, environ map[string]string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	stdoutR, stdoutW := io.Pipe()
	s := &served{stderr: &logbuf.Buffer{}}
	e := &env{stdin: strings.NewReader(""), stdout: stdoutW, stderr: s.stderr, lookupenv: lookupIn(environ)}
	done := make(chan error, 1)
	go func() {
		err := runEnv(ctx, e, append(args, "--database-url", f.url))
		stdoutW.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("pgtask %s: %v\nstderr: %s", args[0], err, s.stderr)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("pgtask %s did not stop within 30s", args[0])
		}
	})
	s.out = watchLines(stdoutR)
	addr := s.out.waitFor(t, regexp.MustCompile(`(?:listening on|REST API\s+) ?(http://[0-9.:\[\]]+)`), time.Minute)[1]
	s.base = strings.NewReplacer("0.0.0.0", "127.0.0.1", "[::]", "127.0.0.1").Replace(addr)
	return s
}

func (f *fixture) count() int {
	f.t.Helper()
	tasks, err := f.repo.Page(f.ctx, f.pool, "t", repository.TaskFilter{}, 0, 1000, repository.Forward)
	if err != nil {
		f.t.Fatal(err)
	}
	return len(tasks)
}

// TestServeWithoutToken drives `pgtask serve` without a token as a web page would.
func TestServeWithoutToken(t *testing.T) {
	f := setup(t)
	s := runServer(t, f, nil, "serve", "--addr", "127.0.0.1:0", "--allow-host", "queue.internal, other.internal")
	json := map[string]string{"Content-Type": "application/json"}
	t.Run("WarnsThatTheAPIIsOpen", func(t *testing.T) {
		if !strings.Contains(s.stderr.String(), "warning: no --token") {
			t.Errorf("stderr %q, want a warning", s.stderr)
		}
	})
	t.Run("CrossSiteWritesAreRefused", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			header map[string]string
			status int
		}{
			{"AFormPost", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
			{"ATextPost", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
			{"NoContentType", nil, http.StatusUnsupportedMediaType},
			{"AFetchFromAnotherSite", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
			{"AnotherOrigin", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, http.StatusForbidden},
			{"ARebindingName", map[string]string{"Content-Type": "application/json", "Host": "evil.example:8080"}, http.StatusForbidden},
		} {
			status, body := send(t, "POST", s.base+"/topics/t/tasks", `{"identifier": "csrf"}`, tc.header)
			if status != tc.status {
				t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
			}
		}
		if status, body := send(t, "POST", s.base+"/topics/t/pause", "", nil); status != http.StatusUnsupportedMediaType {
			t.Errorf("a bodiless pause without Content-Type: %d %s, want 415", status, body)
		}
		if n := f.count(); n != 0 {
			t.Errorf("%d tasks written by refused requests, want none", n)
		}
		if topic, err := f.repo.Topic(f.ctx, f.pool, "t"); err != nil || !topic.Active {
			t.Errorf("topic t after a refused pause: %+v, %v", topic, err)
		}
	})
	t.Run("ARebindingNameCannotRead", func(t *testing.T) {
		if status, body := send(t, "GET", s.base+"/topics", "", map[string]string{"Host": "evil.example"}); status != http.StatusForbidden {
			t.Errorf("GET with Host evil.example: %d %s, want 403", status, body)
		}
	})
	t.Run("LocalJSONClientsAndAllowedHostsAreServed", func(t *testing.T) {
		for _, host := range []string{"", "localhost", "queue.internal:80", "other.internal"} {
			h := map[string]string{"Content-Type": "application/json; charset=utf-8"}
			if host != "" {
				h["Host"] = host
			}
			if status, body := send(t, "POST", s.base+"/topics/t/tasks", `{"identifier": "ok"}`, h); status != http.StatusCreated {
				t.Errorf("Host %q: %d %s, want 201", host, status, body)
			}
		}
		if status, body := send(t, "POST", s.base+"/topics/t/pause", "", json); status != http.StatusOK {
			t.Errorf("pause with Content-Type application/json: %d %s", status, body)
		}
	})
}

func TestServeRefusesAFaultyToken(t *testing.T) {
	f := setup(t)
	for name, tc := range map[string]struct {
		environ map[string]string
		args    []string
		want    string
	}{
		"TrailingNewlineInTheEnvironment": {map[string]string{"PGTASK_TOKEN": "s3cret\n"}, nil, "PGTASK_TOKEN: the token ends with a line break"},
		"TrailingNewlineInTheFlag":        {nil, []string{"--token", "s3cret\r\n"}, "--token: the token ends with a line break"},
		"ASpace":                          {nil, []string{"--token", "s3 cret"}, "--token: the token has ' ' at byte 2"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, cmd := range []string{"serve", "dev"} {
				r := runCLI(f.ctx, "", tc.environ, append([]string{cmd, "--database-url", f.url, "--addr", "127.0.0.1:0"}, tc.args...)...)
				wantUsage(t, r, tc.want)
			}
		})
	}
}

// TestServeRefusesAnEmptySetting runs `pgtask serve` and `pgtask dev` with a flag given an
// empty value or a variable set to the empty string (a secret that came out empty): a
// usage error naming it, before anything connects, starts or listens. An empty token
// was taken as none, and the API served without authentication.
func TestServeRefusesAnEmptySetting(t *testing.T) {
	f := setup(t)
	const noToken = "give a token, or leave --token and PGTASK_TOKEN unset to serve without authentication"
	url := []string{"--database-url", f.url}
	for name, tc := range map[string]struct {
		environ map[string]string
		args    []string
		want    string
	}{
		"TokenFlag":                {nil, append([]string{"--token", ""}, url...), "--token is empty: " + noToken},
		"TokenFlagBeforeAVariable": {map[string]string{"PGTASK_TOKEN": "s3cret"}, append([]string{"--token", ""}, url...), "--token is empty: " + noToken},
		"TokenVariable":            {map[string]string{"PGTASK_TOKEN": ""}, url, "PGTASK_TOKEN is set but empty: " + noToken},
		// Taken as unset, these fell back on the variable, or dev on a throwaway cluster.
		"DatabaseURLFlag":                {nil, []string{"--database-url", ""}, "--database-url is empty: give a connection string"},
		"DatabaseURLFlagBeforeAVariable": {map[string]string{"DATABASE_URL": f.url}, []string{"--database-url", ""}, "--database-url is empty: give a connection string"},
		"DatabaseURLVariable":            {map[string]string{"DATABASE_URL": ""}, nil, "DATABASE_URL is set but empty: give a connection string"},
		// net.Listen took it as a random port on every interface.
		"Addr": {nil, append([]string{"--addr", ""}, url...), "--addr is empty: give HOST:PORT"},
		// Refused by net.Listen only after the command had connected to the database (exit 1).
		"AddrPortOutOfRange": {nil, append([]string{"--addr", ":99999"}, url...), `--addr: invalid address ":99999": port 99999 out of range`},
		"AddrWithoutPort":    {nil, append([]string{"--addr", "127.0.0.1"}, url...), `--addr: invalid address "127.0.0.1": want HOST:PORT`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, cmd := range []string{"serve", "dev"} {
				// A command that went on to serve would return only when this ends.
				ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
				args := append([]string{cmd}, tc.args...)
				if !slices.Contains(tc.args, "--addr") {
					args = append(args, "--addr", "127.0.0.1:0")
				}
				r := runCLI(ctx, "", tc.environ, args...)
				cancel()
				wantUsage(t, r, cmd+": "+tc.want)
				if r.stdout != "" {
					t.Errorf("%s started: stdout %q, want nothing", cmd, r.stdout)
				}
			}
		})
	}
	// The flag beats its variable, as everywhere: a token given there serves with it.
	t.Run("ATokenFlagBeatsAnEmptyVariable", func(t *testing.T) {
		t.Parallel()
		s := runServer(t, f, map[string]string{"PGTASK_TOKEN": ""}, "serve", "--addr", "127.0.0.1:0", "--token", "s3cret")
		// accepted, and warned of: nothing limits the guesses of a token
		if !strings.Contains(s.stderr.String(), "warning: the token is 6 characters long") {
			t.Errorf("serve with a 6-character token did not warn of it; stderr:\n%s", s.stderr)
		}
		if status, body := request(t, http.MethodGet, s.base+"/topics", "", ""); status != http.StatusUnauthorized {
			t.Errorf("GET /topics without the token: %d %s, want 401", status, body)
		}
		if status, body := request(t, http.MethodGet, s.base+"/topics", "s3cret", ""); status != http.StatusOK {
			t.Errorf("GET /topics with the token: %d %s, want 200", status, body)
		}
	})
}

// TestAnAddressInUseIsSaidBeforeMigrating: serve --migrate and dev on an address
// another server listens on say so before they touch the database (dev made its
// throwaway cluster, or migrated the user's database, then found the address taken).
func TestAnAddressInUseIsSaidBeforeMigrating(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() }) // after the parallel subtests
	for _, args := range [][]string{{"serve", "--migrate"}, {"dev"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t, "pgtask-cli-empty", nil)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			r := runCLI(ctx, "", nil, append(args, "--addr", taken.Addr().String(), "--ui=false", "--database-url", url)...)
			if r.err == nil || !strings.Contains(r.err.Error(), "address already in use") {
				t.Errorf("%s on an address in use: %v, want it said", args[0], r.err)
			}
			version := runCLI(t.Context(), "", nil, "migrate", "version", "--database-url", url)
			if version.err != nil || version.stdout != "0\n" {
				t.Errorf("migrate version after %s refused the address: %q, %v; want 0 (nothing migrated)", args[0], version.stdout, version.err)
			}
		})
	}
}

// TestServeRefusesABadAllowHostBeforeMigrating: a bad or empty --allow-host is a usage
// error naming it that leaves an empty database as it was. The hosts were checked when
// the server was about to listen, after `serve --migrate` and `dev` had migrated it, and
// an empty one was skipped as if not given.
func TestServeRefusesABadAllowHostBeforeMigrating(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"ServeURL":   {[]string{"serve", "--migrate", "--allow-host", "http://x/"}, `serve: --allow-host: allowed host "http://x/" is not a host name or IP address`},
		"ServeEmpty": {[]string{"serve", "--migrate", "--allow-host", ""}, `serve: --allow-host: invalid value "": an empty item`},
		"DevSpace":   {[]string{"dev", "--allow-host", "x y"}, `dev: --allow-host: allowed host "x y" is not a host name or IP address`},
		"DevEmpty":   {[]string{"dev", "--allow-host", "ok.internal", "--allow-host", " "}, `dev: --allow-host: invalid value " ": an empty item`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t, "pgtask-cli-empty", nil)
			// A command that went on to serve would return only when this ends.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			r := runCLI(ctx, "", nil, append(tc.args, "--addr", "127.0.0.1:0", "--ui=false", "--database-url", url)...)
			wantUsage(t, r, tc.want)
			if r.stdout != "" {
				t.Errorf("%s started: stdout %q, want nothing", tc.args[0], r.stdout)
			}
			version := runCLI(t.Context(), "", nil, "migrate", "version", "--database-url", url)
			if version.err != nil || version.stdout != "0\n" {
				t.Errorf("migrate version after the refusal: %q, %v; want 0 (nothing migrated)", version.stdout, version.err)
			}
		})
	}
}

// TestDevWarnsWhenOpenToTheNetwork runs `pgtask dev --addr 0.0.0.0:0` without a token.
func TestDevWarnsWhenOpenToTheNetwork(t *testing.T) {
	f := setup(t)
	s := runServer(t, f, nil, "dev", "--addr", "0.0.0.0:0")
	s.out.waitFor(t, regexp.MustCompile(`^pgtask dev ready$`), time.Minute)
	if got := s.stderr.String(); !regexp.MustCompile(`pgtask dev: WARNING: listening on (0\.0\.0\.0|\[::\]):\d+ without a token`).MatchString(got) {
		t.Errorf("stderr %q, want a warning about 0.0.0.0 without a token", got)
	}
	t.Run("ButNotOnLoopback", func(t *testing.T) {
		local := runServer(t, f, nil, "dev", "--addr", "127.0.0.1:0")
		local.out.waitFor(t, regexp.MustCompile(`^pgtask dev ready$`), time.Minute)
		if strings.Contains(local.stderr.String(), "WARNING") {
			t.Errorf("dev on 127.0.0.1 warns: %s", local.stderr)
		}
	})
}

// dialRaw opens a connection to the server at base and writes text on it.
func dialRaw(t *testing.T, base, text string) net.Conn {
	t.Helper()
	return conntest.Dial(t, strings.TrimPrefix(base, "http://"), text)
}

// untilClosed reads conn until the server closes it, failing the test if that takes
// a minute: far beyond the timeouts under test.
func untilClosed(t *testing.T, conn net.Conn) string {
	t.Helper()
	return conntest.ReadUntilClosed(t, conn, time.Minute)
}

// TestServeTimeouts checks that `pgtask serve` applies its timeouts: a slow body and an
// idle connection are cut while a normal request succeeds.
func TestServeTimeouts(t *testing.T) {
	f := setup(t)
	s := runServer(t, f, map[string]string{"PGTASK_TOKEN": "s3cret"},
		"serve", "--addr", "127.0.0.1:0", "--read-timeout", "500ms", "--idle-timeout", "500ms")
	auth := map[string]string{"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
	t.Run("ASlowBodyIsCut", func(t *testing.T) {
		conn := dialRaw(t, s.base, "POST /topics/t/tasks HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"identifier\": \"slow\"")
		if status, body := send(t, "POST", s.base+"/topics/t/tasks", `{"identifier": "fast"}`, auth); status != http.StatusCreated {
			t.Errorf("a normal push beside the slow one: %d %s", status, body)
		}
		if answer := untilClosed(t, conn); answer != "" && !strings.HasPrefix(answer, "HTTP/1.1 400") {
			t.Errorf("answer to the slow body: %q, want a 400 or none", answer)
		}
	})
	t.Run("ATruncatedBodyIs400", func(t *testing.T) {
		conn := dialRaw(t, s.base, "POST /topics/t/tasks HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\n"+
			"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"identifier\": \"cut\"}")
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if answer := untilClosed(t, conn); !strings.HasPrefix(answer, "HTTP/1.1 400") || !strings.Contains(answer, "ended before") {
			t.Errorf("answer %q, want 400", answer)
		}
		if strings.Contains(s.stderr.String(), "level=ERROR") {
			t.Errorf("a client's truncated body was logged as an error:\n%s", s.stderr)
		}
	})
	t.Run("AnIdleConnectionIsClosed", func(t *testing.T) {
		conn := dialRaw(t, s.base, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("health: %d, close %v", resp.StatusCode, resp.Close)
		}
		untilClosed(t, conn)
	})
	if tasks := f.count(); tasks != 1 {
		t.Errorf("%d tasks, want only the normal push", tasks)
	}
}

// memory returns the resident set size and its peak (VmRSS, VmHWM) of a process, in
// bytes, from /proc/PID/status.
func memory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the server's memory: %v (this test needs Linux's /proc)", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		t.Fatalf("no VmRSS or VmHWM in /proc/%d/status", pid)
	}
	return rss, peak
}

// TestListingMemory lists 100 tasks of 1 MB inputs through a `pgtask serve` of its own
// (a child process, so that nothing else grows its memory) and checks that the
// server's peak resident memory grows by less than 50 MB. A listing that read the
// inputs whole, or built its 100 MB answer in memory, would grow it by 100 MB or more.
func TestListingMemory(t *testing.T) {
	f := setup(t)
	const tasks, inputBytes = 100, 1 << 20
	input := strings.Repeat("0123456789abcdef", inputBytes/16)
	for range tasks {
		if _, err := f.repo.Push(f.ctx, f.pool, "t", repository.Append, repository.Creation{Identifier: "big", Input: input}); err != nil {
			t.Fatal(err)
		}
	}
	c := startChild(t, buildPgtask(t), append(os.Environ(), "PGTASK_TOKEN=s3cret"), "serve", "--database-url", f.url, "--addr", "127.0.0.1:0")
	base := c.out.waitFor(t, regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`), time.Minute)[1]
	auth := map[string]string{"Authorization": "Bearer s3cret"}

	// Warm up: the first listing sets up what every later one reuses.
	if status, body := send(t, "GET", base+"/topics/t/tasks?limit=1", "", auth); status != http.StatusOK {
		t.Fatalf("warm-up listing: %d %.200s", status, body)
	}
	_, before := memory(t, c.cmd.Process.Pid)
	status, body := send(t, "GET", base+"/topics/t/tasks?limit=100", "", auth)
	_, after := memory(t, c.cmd.Process.Pid)
	if status != http.StatusOK || strings.Count(body, `"sequence"`) != tasks {
		t.Fatalf("listing: status %d, %d tasks, want %d", status, strings.Count(body, `"sequence"`), tasks)
	}
	grown := after - before
	t.Logf("listing %d tasks of %d MB inputs: answer %d KB, server peak RSS %d MB -> %d MB", tasks, inputBytes>>20, len(body)>>10, before>>20, after>>20)
	if grown >= 50<<20 {
		t.Errorf("the server's peak RSS grew by %d MB listing %d tasks of 1 MB inputs, want less than 50 MB", grown>>20, tasks)
	}
	// The answer is bounded too, and the task's own URL still serves the input whole.
	if len(body) > tasks*(repository.ExcerptLength+2048) {
		t.Errorf("the listing is %d bytes, want at most about %d", len(body), tasks*(repository.ExcerptLength+2048))
	}
	if status, one := send(t, "GET", base+"/topics/t/tasks/1", "", auth); status != http.StatusOK || !strings.Contains(one, input) {
		t.Errorf("GET one task: status %d, %d bytes, want the whole input", status, len(one))
	}
}

// A statement whose context ends stops in the database, whichever pool runs it: a purge
// interrupted by ^C must not commit later, unseen. pgx (5.12) does so by default too, on
// closing the connection (it sends a cancel request first), so the pools of commands and
// of serve differ from a processor's (dev) in one thing: they keep the connection, which
// the pool hands out again, where pgx's default closes it.
func TestPoolCancelsInServer(t *testing.T) {
	f := setup(t)
	for _, tc := range []struct {
		name    string
		options poolOptions
		kept    bool // the connection serves the next statement
	}{
		{"Commands", poolOptions{maxConns: 1, cancelInServer: true}, true},
		{"Processors", poolOptions{maxConns: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			application := "cancel-" + strings.ToLower(tc.name)
			pool, err := openPool(f.ctx, f.url, application, tc.options)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			// connected first: on a loaded machine the connection took the statement's
			// 200 ms, and no statement ever ran
			var before int
			if err := pool.QueryRow(f.ctx, "SELECT pg_backend_pid()").Scan(&before); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(f.ctx, 200*time.Millisecond)
			defer cancel()
			if _, err := pool.Exec(ctx, "SELECT pg_sleep(3)"); err == nil {
				t.Fatal("a statement of 3 s ended within its 200 ms")
			}
			eventually(t, 2*time.Second, "the statement stopped in the database", func() bool {
				var n int
				if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND state = 'active' AND query LIKE '%pg_sleep%'`, application).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 0
			})
			var after int
			if err := pool.QueryRow(f.ctx, "SELECT pg_backend_pid()").Scan(&after); err != nil {
				t.Fatal(err)
			}
			if kept := after == before; kept != tc.kept {
				t.Errorf("the connection kept after the cancel: %v, want %v (backend %d, then %d)", kept, tc.kept, before, after)
			}
		})
	}
}

// TestPoolIsReadCommitted: the pools of pgtask's commands, of serve and of dev's
// processors begin READ COMMITTED transactions on a database whose default is
// REPEATABLE READ (processor.Run refuses a pool without it), unless the URL sets the
// isolation itself.
func TestPoolIsReadCommitted(t *testing.T) {
	f := setup(t)
	// on a database of READ COMMITTED, nothing more is sent (a pooler such as PgBouncer
	// refuses a connection parameter it does not know)
	pool, err := openPool(f.ctx, f.url, "isolation", poolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sent, ok := pool.Config().ConnConfig.RuntimeParams["default_transaction_isolation"]; ok {
		t.Errorf("the pool on a database of READ COMMITTED sends default_transaction_isolation = %q", sent)
	}
	pool.Close()
	if _, err := f.pool.Exec(f.ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read'); END $$`); err != nil {
		t.Fatal(err)
	}
	for url, want := range map[string]string{
		f.url: "read committed",
		withParam(f.url, "default_transaction_isolation=serializable"): "serializable",
	} {
		pool, err := openPool(f.ctx, url, "isolation", poolOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var level string
		err = pool.QueryRow(f.ctx, "SHOW transaction_isolation").Scan(&level)
		pool.Close()
		if err != nil || level != want {
			t.Errorf("a statement of the pool of %s: %q, %v; want %q", url, level, err, want)
		}
	}
}

// withParam adds the query parameter param (key=value) to url.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}
