package main

import (
	"errors"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// env is an environment of the variables vars (name, value, name, value…) for
// parseConfig, as os.LookupEnv reads it: a variable given as "" is set but empty.
func env(vars ...string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		for i := 0; i+1 < len(vars); i += 2 {
			if vars[i] == key {
				return vars[i+1], true
			}
		}
		return "", false
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	base := []string{"--database-url", "postgres://localhost/db", "--topic", "mail"}

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := parseConfig(append(base, "--exec", "true"), env())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.workers != workersDefault || cfg.batchSize != batchSizeDefault || cfg.order != repository.FIFO ||
			cfg.condition != repository.None || cfg.timeout != 5*time.Minute || cfg.retryDelay != 30*time.Second ||
			cfg.addr != "127.0.0.1:9090" || cfg.logFormat != "text" || cfg.logLevel != slog.LevelInfo ||
			cfg.initialize || cfg.migrate || cfg.noSchedules || cfg.httpURL != "" || cfg.vacuumEvery != processor.VacuumEveryDefault {
			t.Errorf("defaults: %+v", cfg)
		}
		if cfg, err := parseConfig(append(base, "--exec", "true"), env("PGTASK_NO_SCHEDULES", "true")); err != nil || !cfg.noSchedules {
			t.Errorf("PGTASK_NO_SCHEDULES=true: %v, %v; want schedules off", cfg.noSchedules, err)
		}
		if cfg, err := parseConfig(append(base, "--no-schedules", "--exec", "true"), env()); err != nil || !cfg.noSchedules {
			t.Errorf("--no-schedules: %v, %v; want schedules off", cfg.noSchedules, err)
		}
		cfg, err = parseConfig(append(base, "--vacuum-every", "250000", "--exec", "true"), env("PGTASK_VACUUM_EVERY", "0"))
		if err != nil || cfg.vacuumEvery != 250000 {
			t.Errorf("--vacuum-every 250000: %d, %v", cfg.vacuumEvery, err)
		}
	})

	t.Run("EverythingAfterExecIsTheProgram", func(t *testing.T) {
		t.Parallel()
		cfg, err := parseConfig(append(base, "--workers", "2", "--exec", "sh", "-c", "cat", "--workers", "9"), env())
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"sh", "-c", "cat", "--workers", "9"}; !slices.Equal(cfg.execArgs, want) || cfg.workers != 2 {
			t.Errorf("exec %q workers %d, want %q and 2", cfg.execArgs, cfg.workers, want)
		}
		cfg, err = parseConfig(append(base, "-exec=sh", "-c", "cat"), env())
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"sh", "-c", "cat"}; !slices.Equal(cfg.execArgs, want) {
			t.Errorf("-exec=sh: exec %q, want %q", cfg.execArgs, want)
		}
	})

	t.Run("EnvironmentFallsBackFlagsWin", func(t *testing.T) {
		t.Parallel()
		getenv := env("DATABASE_URL", "postgres://env/db", "PGTASK_TOPIC", "envtopic", "PGTASK_WORKERS", "8",
			"PGTASK_ORDER", "lifo", "PGTASK_CONDITION", "singular-by-identifier", "PGTASK_INIT", "true",
			"PGTASK_TIMEOUT", "10s", "PGTASK_HTTP", "http://env.example/hook", "PGTASK_LOG_LEVEL", "debug",
			"PGTASK_VACUUM_EVERY", "0")
		cfg, err := parseConfig([]string{"--workers", "3"}, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.databaseURL != "postgres://env/db" || cfg.topic != "envtopic" || cfg.workers != 3 || cfg.order != repository.LIFO ||
			cfg.condition != repository.SingularByIdentifier || !cfg.initialize || cfg.timeout != 10*time.Second ||
			cfg.addr != addrDefault || cfg.httpURL != "http://env.example/hook" || cfg.logLevel != slog.LevelDebug ||
			cfg.vacuumEvery != -1 {
			t.Errorf("from environment: %+v", cfg)
		}
		// --exec on the command line beats PGTASK_HTTP from the environment.
		cfg, err = parseConfig([]string{"--exec", "true"}, getenv)
		if err != nil || cfg.httpURL != "" || len(cfg.execArgs) != 1 {
			t.Errorf("--exec with PGTASK_HTTP set: %+v, %v; want the exec handler", cfg, err)
		}
		// An empty --addr disables the server even with PGTASK_ADDR set.
		cfg, err = parseConfig(append(base, "--addr", "", "--exec", "true"), env("PGTASK_ADDR", "127.0.0.1:1"))
		if err != nil || cfg.addr != "" {
			t.Errorf("--addr '': addr %q, %v; want empty", cfg.addr, err)
		}
	})

	// A variable set to the empty string means what its flag given '' means; only an
	// unset one gives the default. PGTASK_ADDR= could not disable the server.
	t.Run("EmptyVariableIsAnEmptyValue", func(t *testing.T) {
		t.Parallel()
		cfg, err := parseConfig(append(base, "--exec", "true"), env("PGTASK_ADDR", ""))
		if err != nil || cfg.addr != "" {
			t.Errorf("PGTASK_ADDR='': addr %q, %v; want empty (no server), as with --addr ''", cfg.addr, err)
		}
		cfg, err = parseConfig(append(base, "--addr", "127.0.0.1:0", "--exec", "true"), env("PGTASK_ADDR", ""))
		if err != nil || cfg.addr != "127.0.0.1:0" {
			t.Errorf("--addr 127.0.0.1:0 with PGTASK_ADDR='': addr %q, %v; want the flag's", cfg.addr, err)
		}
		cfg, err = parseConfig(append(base, "--exec", "true"), env("PGTASK_HTTP", ""))
		if err != nil || cfg.httpURL != "" || len(cfg.execArgs) != 1 {
			t.Errorf("--exec with PGTASK_HTTP='': %+v, %v; want the exec handler", cfg, err)
		}
		for _, tc := range []struct {
			args []string
			env  []string
			want string
		}{
			{[]string{"--topic", "t", "--exec", "true"}, []string{"DATABASE_URL", ""}, "DATABASE_URL: a database URL is required: the variable is set but empty"},
			// a URL that does not parse is blamed on where it came from, its password left out
			{[]string{"--topic", "t", "--exec", "true"}, []string{"DATABASE_URL", "postgres://u:se@cret@h:port/db"}, "DATABASE_URL: cannot parse the URL: invalid port"},
			{[]string{"--database-url", "x", "--exec", "true"}, []string{"PGTASK_TOPIC", ""}, "PGTASK_TOPIC: a topic is required: the variable is set but empty"},
			{base, []string{"PGTASK_HTTP", ""}, "a handler is required"},
			{append(base, "--exec", "true"), []string{"PGTASK_WORKERS", ""}, `PGTASK_WORKERS: invalid value ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_BATCH_SIZE", ""}, `PGTASK_BATCH_SIZE: invalid value ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_ORDER", ""}, `PGTASK_ORDER: unknown order ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_CONDITION", ""}, `PGTASK_CONDITION: unknown condition ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_TIMEOUT", ""}, `PGTASK_TIMEOUT: invalid duration ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_RETRY_DELAY", ""}, `PGTASK_RETRY_DELAY: invalid duration ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_HEARTBEAT", ""}, `PGTASK_HEARTBEAT: invalid duration ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_PAUSE_INTERVAL", ""}, `PGTASK_PAUSE_INTERVAL: invalid duration ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_SHUTDOWN_TIMEOUT", ""}, `PGTASK_SHUTDOWN_TIMEOUT: invalid duration ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_VACUUM_EVERY", ""}, `PGTASK_VACUUM_EVERY: invalid value ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_INIT", ""}, `PGTASK_INIT: invalid value "" (want true or false)`},
			{append(base, "--exec", "true"), []string{"PGTASK_MIGRATE", ""}, `PGTASK_MIGRATE: invalid value "" (want true or false)`},
			{append(base, "--exec", "true"), []string{"PGTASK_LOG_FORMAT", ""}, `PGTASK_LOG_FORMAT: unknown log format ""`},
			{append(base, "--exec", "true"), []string{"PGTASK_LOG_LEVEL", ""}, `PGTASK_LOG_LEVEL: unknown log level ""`},
		} {
			_, err := parseConfig(tc.args, env(tc.env...))
			var usageErr *usageError
			if !errors.As(err, &usageErr) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s=%q: error %v, want a usage error containing %q", tc.env[0], tc.env[1], err, tc.want)
			}
		}
		// The same values given to the flags: the same errors, naming the flag.
		for _, name := range []string{"workers", "timeout", "heartbeat", "log-format"} {
			_, err := parseConfig(append(base, "--"+name, "", "--exec", "true"), env())
			if err == nil || !strings.Contains(err.Error(), "--"+name+": ") {
				t.Errorf("--%s '': error %v, want one naming --%s", name, err, name)
			}
		}
	})

	// The bounds of the duration flags and the forms of --addr that are accepted.
	t.Run("GoodBoundsAndAddresses", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"--heartbeat", "100ms", "--pause-interval", "100ms", "--retry-delay", "1s"},
			{"--heartbeat", "1h", "--pause-interval", "24h", "--retry-delay", "1000h", "--timeout", "1ns", "--shutdown-timeout", "1ns"},
			{"--addr", ":0"},
			{"--addr", "0.0.0.0:65535"},
			{"--addr", "[::1]:9090"},
			{"--addr", "localhost:9090"},
			{"--addr", "127.0.0.1:http"},
		} {
			if _, err := parseConfig(append(append(base, args...), "--exec", "true"), env()); err != nil {
				t.Errorf("%q: %v, want it accepted", args, err)
			}
		}
	})

	t.Run("HelpIsNotAnError", func(t *testing.T) {
		t.Parallel()
		if _, err := parseConfig([]string{"--help"}, env()); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("--help: %v, want flag.ErrHelp", err)
		}
	})

	t.Run("BadInputNamesFlagOrVariable", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args   []string
			getenv func(string) (string, bool)
			want   string
		}{
			{append(base, "--order", "x", "--exec", "true"), env(), `--order: unknown order "x" (want FIFO or LIFO)`},
			{append(base, "--condition", "sometimes", "--exec", "true"), env(), `--condition: unknown condition "sometimes" (want one of NONE, SINGULAR_BY_IDENTIFIER`},
			{append(base, "--workers", "0", "--exec", "true"), env(), `--workers: invalid value "0" (want a whole number of at least 1)`},
			{append(base, "--batch-size", "many", "--exec", "true"), env(), `--batch-size: invalid value "many"`},
			{append(base, "--vacuum-every", "-5", "--exec", "true"), env(), `--vacuum-every: invalid value "-5"`},
			{append(base, "--exec", "true"), env("PGTASK_VACUUM_EVERY", "often"), `PGTASK_VACUUM_EVERY: invalid value "often"`},
			{append(base, "--exec", "true"), env("PGTASK_WORKERS", "lots"), `PGTASK_WORKERS: invalid value "lots"`},
			{append(base, "--timeout", "soon", "--exec", "true"), env(), `--timeout: invalid duration "soon"`},
			{append(base, "--timeout", "0s", "--exec", "true"), env(), `--timeout: duration "0s" must be positive`},
			{append(base, "--shutdown-timeout", "-1s", "--exec", "true"), env(), `--shutdown-timeout: duration "-1s" must be positive`},
			{append(base, "--heartbeat", "-1s", "--exec", "true"), env(), `--heartbeat: duration "-1s" is too short: at least 100ms`},
			{append(base, "--heartbeat", "0s", "--exec", "true"), env(), `--heartbeat: duration "0s" is too short: at least 100ms`},
			{append(base, "--heartbeat", "1ns", "--exec", "true"), env(), `--heartbeat: duration "1ns" is too short: at least 100ms (each heartbeat is a round trip`},
			{append(base, "--heartbeat", "99ms", "--exec", "true"), env(), `--heartbeat: duration "99ms" is too short: at least 100ms`},
			{append(base, "--heartbeat", "61m", "--exec", "true"), env(), `--heartbeat: duration "61m" is too long: at most 1h`},
			{append(base, "--exec", "true"), env("PGTASK_HEARTBEAT", "600000h"), `PGTASK_HEARTBEAT: duration "600000h" is too long: at most 1h`},
			{append(base, "--pause-interval", "1ns", "--exec", "true"), env(), `--pause-interval: duration "1ns" is too short: at least 100ms`},
			{append(base, "--pause-interval", "0s", "--exec", "true"), env(), `--pause-interval: duration "0s" is too short: at least 100ms`},
			{append(base, "--retry-delay", "0s", "--exec", "true"), env(), `--retry-delay: duration "0s" is too short: at least 1s (a retry-later uses no attempt`},
			{append(base, "--exec", "true"), env("PGTASK_RETRY_DELAY", "999ms"), `PGTASK_RETRY_DELAY: duration "999ms" is too short: at least 1s`},
			{append(base, "--exec", "true"), env("PGTASK_INIT", "maybe"), `PGTASK_INIT: invalid value "maybe" (want true or false)`},
			{append(base, "--addr", "9090", "--exec", "true"), env(), `--addr: invalid address "9090": want HOST:PORT`},
			{append(base, "--addr", "127.0.0.1:", "--exec", "true"), env(), `--addr: invalid address "127.0.0.1:": want HOST:PORT`},
			{append(base, "--addr", ":99999", "--exec", "true"), env(), `--addr: invalid address ":99999": port 99999 out of range (want 0 to 65535`},
			{append(base, "--addr", ":65536", "--exec", "true"), env(), `--addr: invalid address ":65536": port 65536 out of range`},
			{append(base, "--addr", ":-1", "--exec", "true"), env(), `--addr: invalid address ":-1": port -1 out of range`},
			{append(base, "--addr", ":99999999999999999999999", "--exec", "true"), env(), `port 99999999999999999999999 out of range`},
			{append(base, "--addr", "127.0.0.1:9090/metrics", "--exec", "true"), env(), `--addr: invalid address "127.0.0.1:9090/metrics": unknown port "9090/metrics"`},
			{append(base, "--addr", "http://127.0.0.1:9090", "--exec", "true"), env(), `--addr: invalid address "http://127.0.0.1:9090": want HOST:PORT`},
			{append(base, "--exec", "true"), env("PGTASK_ADDR", "localhost:70000"), `PGTASK_ADDR: invalid address "localhost:70000": port 70000 out of range`},
			{append(base, "--log-format", "xml", "--exec", "true"), env(), `--log-format: unknown log format "xml"`},
			{append(base, "--log-level", "loud", "--exec", "true"), env(), `--log-level: unknown log level "loud"`},
			{append(base, "--http", "ftp://x/y"), env(), `--http: invalid URL ftp://x/… (want http://HOST/PATH`},
			{append(base, "--http", "http://localhost:80800/hook"), env(), `--http: invalid URL http://localhost:80800/…: port 80800 out of range (want 1 to 65535)`},
			{append(base, "--http", "http://localhost:0/hook"), env(), `port 0 out of range`},
			{[]string{"--database-url", "x", "--topic", ".", "--init", "--exec", "true"}, env(), `--topic: topic "." is a path segment of its own`},
			{append(base, "--http", "http://x/y", "--exec", "true"), env(), "--exec: give either --exec or --http, not both"},
			{append(base, "--exec"), env(), "--exec: missing program"},
			{append(base, "--exec", "/no/such/program"), env(), `--exec: program "/no/such/program" not found`},
			{base, env(), "a handler is required: --exec PROGRAM [ARGS...] or --http URL"},
			{[]string{"--topic", "t", "--exec", "true"}, env(), "--database-url: a database URL is required"},
			{[]string{"--database-url", "x", "--exec", "true"}, env(), "--topic: a topic is required"},
			{append(base, "--topic", strings.Repeat("t", 251), "--exec", "true"), env(), "--topic: topic is 251 characters long"},
			{append(base, "stray", "--exec", "true"), env(), `unexpected argument "stray"`},
			{append(base, "--bogus", "--exec", "true"), env(), "flag provided but not defined: --bogus"},
			{[]string{"--topic"}, env(), "flag needs an argument: --topic"},
		} {
			_, err := parseConfig(tc.args, tc.getenv)
			var usageErr *usageError
			if !errors.As(err, &usageErr) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: error %v, want a usage error containing %q", tc.args, err, tc.want)
			}
		}
	})

	t.Run("AWebhookURLsSecretsAreNotShown", func(t *testing.T) {
		// a refused URL, and the start-up log's handler, show the scheme and host only:
		// a webhook's secret is in its path, its query or its password
		t.Parallel()
		for _, raw := range []string{"ftp://u:pw@hooks.example/T0/SECRETPATH?key=SECRETKEY", "http://u:pw@hooks.example:99999/SECRETPATH?key=SECRETKEY"} {
			_, err := parseConfig(append(slices.Clone(base), "--http", raw), env())
			if err == nil || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "pw") || !strings.Contains(err.Error(), "hooks.example") {
				t.Errorf("--http %s: %v; want it refused naming the host, not the path, query or password", raw, err)
			}
		}
		cfg, err := parseConfig(append(slices.Clone(base), "--http", "https://u:pw@hooks.example/T0/SECRETPATH?key=SECRETKEY"), env())
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.handlerName(); got != "http https://hooks.example/…" {
			t.Errorf("the handler as logged at start-up: %q, want %q", got, "http https://hooks.example/…")
		}
	})

	t.Run("EveryProblemIsReported", func(t *testing.T) {
		t.Parallel()
		_, err := parseConfig([]string{"--order", "x", "--workers", "-1"}, env())
		for _, want := range []string{"--database-url:", "--topic:", "--order:", "--workers:", "a handler is required"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want it to mention %q", err, want)
			}
		}
	})
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{usagef("--order: bad\n--workers: bad"), 2, "processor: --order: bad\nprocessor: --workers: bad\nRun 'processor --help' for usage.\n"},
		{errors.New("connect to database: refused"), 1, "processor: connect to database: refused\n"},
	} {
		var stderr strings.Builder
		if code := exitCode(tc.err, &stderr); code != tc.code || stderr.String() != tc.stderr {
			t.Errorf("exitCode(%v) = %d, stderr %q; want %d, %q", tc.err, code, stderr.String(), tc.code, tc.stderr)
		}
	}
}
