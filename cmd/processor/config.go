package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/pgpool"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// Defaults of the flags that differ from the processor package's.
const (
	workersDefault         = 4
	batchSizeDefault       = 1
	timeoutDefault         = 5 * time.Minute
	retryDelayDefault      = 30 * time.Second
	addrDefault            = "127.0.0.1:9090"
	heartbeatDefault       = processor.HeartbeatIntervalDefault
	pauseIntervalDefault   = processor.PauseIntervalDefault
	shutdownTimeoutDefault = processor.ShutdownTimeoutDefault
	vacuumEveryDefault     = processor.VacuumEveryDefault
)

// Bounds of the duration flags that drive a loop: below them a value makes no sense.
const (
	// heartbeatMin: every heartbeat is a round trip to the database (and each tick
	// expires, purges, re-reads the topic and fires schedules), and the expiry timeout,
	// 5 heartbeats, must outlast a slow one: below it the process hammers the database
	// and its heartbeats fail (at 1ns they could not even connect, and expiry read the
	// timeout as 0 ms, taking back at once the leases of owners that declare none).
	heartbeatMin = 100 * time.Millisecond
	// heartbeatMax: a dead processor's tasks come back after 5 heartbeats, and due
	// schedules fire once per heartbeat. It also keeps the expiry timeout above the
	// heartbeat: past 512409h, 5 heartbeats overflowed to a negative timeout.
	heartbeatMax = time.Hour
	// pauseIntervalMin: an idle manager polls once per interval; notifications and
	// timers start work on time, so a shorter one only polls the database in a loop.
	pauseIntervalMin = 100 * time.Millisecond
	// retryDelayMin: a retry-later uses no attempt, so nothing else ends a program or
	// endpoint answering it at once every time; the least Retry-After gives (webhook.go).
	retryDelayMin = retryAfterMin
)

// config is the parsed and validated command line.
type config struct {
	databaseURL string
	topic       string

	// Exactly one handler: a program (execArgs[0]) with its arguments, or an HTTP URL.
	execArgs []string
	httpURL  string

	workers         int
	batchSize       int
	order           repository.Order
	condition       repository.Condition
	heartbeat       time.Duration
	pauseInterval   time.Duration
	shutdownTimeout time.Duration
	timeout         time.Duration
	retryDelay      time.Duration
	vacuumEvery     int64 // processor.Config.VacuumEvery: negative disables
	initialize      bool
	migrate         bool
	noSchedules     bool // processor.Config.DisableSchedules
	addr            string
	addrOrigin      string // --addr or PGTASK_ADDR: where addr came from, for errors
	logFormat       string
	logLevel        slog.Level
}

// usageError is a bad command line: main prints it with a hint and exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// option is one flag: its name, environment variable, default and help text. Every
// value is read as a string and converted after parsing, so that an error names where
// the bad value came from (--flag or ENV_VAR).
type option struct {
	name, env, def, arg, help string
	isBool                    bool
}

var options = []option{
	{name: "database-url", env: "DATABASE_URL", arg: "URL", help: "PostgreSQL connection string (required)"},
	{name: "topic", env: "PGTASK_TOPIC", arg: "NAME", help: "topic to process (required)"},
	{name: "exec", arg: "PROGRAM [ARGS...]", help: "run PROGRAM per task; must come last: everything after it is the program and its arguments"},
	{name: "http", env: "PGTASK_HTTP", arg: "URL", help: "POST each task as JSON to URL (instead of --exec)"},
	{name: "workers", env: "PGTASK_WORKERS", def: strconv.Itoa(workersDefault), arg: "N", help: "most tasks handled at once"},
	{name: "batch-size", env: "PGTASK_BATCH_SIZE", def: strconv.Itoa(batchSizeDefault), arg: "N", help: "tasks leased per poll; a worker runs the tasks of its batch one after another"},
	{name: "order", env: "PGTASK_ORDER", def: "fifo", arg: "fifo|lifo", help: "poll order"},
	{name: "condition", env: "PGTASK_CONDITION", def: "none", arg: "NAME", help: "poll condition: none, singular_by_identifier, singular_by_identifier_suspend_on_failure, singular_by_identifier_suspend_until_success"},
	{name: "timeout", env: "PGTASK_TIMEOUT", def: timeoutDefault.String(), arg: "DURATION", help: "time limit per task; a task over it is killed and FAILS"},
	{name: "retry-delay", env: "PGTASK_RETRY_DELAY", def: retryDelayDefault.String(), arg: "DURATION", help: "how long a task answered with retry-later (exit 75, HTTP 429/503) waits; at least " + retryDelayMin.String()},
	{name: "heartbeat", env: "PGTASK_HEARTBEAT", def: heartbeatDefault.String(), arg: "DURATION", help: "owner heartbeat interval; leases of an owner silent for 5 intervals are taken back; " + heartbeatMin.String() + " to " + shortDuration(heartbeatMax)},
	{name: "pause-interval", env: "PGTASK_PAUSE_INTERVAL", def: pauseIntervalDefault.String(), arg: "DURATION", help: "how often an idle processor polls when no notification arrives; at least " + pauseIntervalMin.String()},
	{name: "shutdown-timeout", env: "PGTASK_SHUTDOWN_TIMEOUT", def: shutdownTimeoutDefault.String(), arg: "DURATION", help: "how long running tasks may finish after SIGTERM before they are killed"},
	{name: "vacuum-every", env: "PGTASK_VACUUM_EVERY", def: strconv.Itoa(vacuumEveryDefault), arg: "N", help: "VACUUM the table holding the topic after every N tasks leased (a quarter of its rows when more); 0 leaves it to autovacuum"},
	{name: "init", env: "PGTASK_INIT", def: "false", isBool: true, help: "register the topic if it is missing"},
	{name: "migrate", env: "PGTASK_MIGRATE", def: "false", isBool: true, help: "apply pending schema migrations first"},
	{name: "no-schedules", env: "PGTASK_NO_SCHEDULES", def: "false", isBool: true, help: "do not fire the database's schedules (leave them to other processes: with many processors, a few firing them are enough)"},
	{name: "addr", env: "PGTASK_ADDR", def: addrDefault, arg: "HOST:PORT", help: "address of the /metrics and /healthz server (port 0 picks a free one); empty disables it"},
	{name: "log-format", env: "PGTASK_LOG_FORMAT", def: "text", arg: "text|json", help: "log format (logs go to stderr)"},
	{name: "log-level", env: "PGTASK_LOG_LEVEL", def: "info", arg: "LEVEL", help: "least level logged: debug, info, warn, error"},
}

// usage writes the help text.
func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: processor --topic NAME [FLAGS] --exec PROGRAM [ARGS...]
       processor --topic NAME [FLAGS] --http URL

Processes the tasks of one pgtask topic: runs PROGRAM once per task (input on stdin,
exit code -> result) or POSTs each task to URL (status -> result). Stops gracefully on
SIGTERM or SIGINT. See docs/processor.md.

Flags (environment variable in brackets; a flag beats its variable, and a variable
set to the empty string means what the flag given '' means, e.g. PGTASK_ADDR= disables
the server; unset it for the default):
`)
	for _, o := range options {
		left := "  --" + o.name
		if o.arg != "" {
			left += " " + o.arg
		}
		right := o.help
		if o.env != "" {
			right += " [" + o.env + "]"
		}
		if o.def != "" && !o.isBool {
			right += " (default " + o.def + ")"
		}
		fmt.Fprintf(w, "%s\n      %s\n", left, right)
	}
	fmt.Fprint(w, `
Exit codes of PROGRAM: 0 SUCCESS (stdout is the output), 1 FAILURE (stderr is the
error), 2 FILTER, 3 SUSPENSION, 65 FAILURE without retry, 75 retry later (no attempt
used), other FAILURE. PROGRAM gets the environment without DATABASE_URL, PGPASSWORD,
PGSSLPASSWORD and the PGTASK_ variables above.
HTTP statuses: 2xx SUCCESS, 422 FILTER, 409 SUSPENSION, 429/503 retry later
(Retry-After honoured), others FAILURE.
`)
}

// parseConfig parses the command line, falling back to environment variables (read
// with lookupEnv, as os.LookupEnv) for flags not given, and validates everything. A
// variable that is set counts even when empty: it means what its flag given an empty
// value means (PGTASK_ADDR= disables the server, PGTASK_WORKERS= is an error); only
// an unset one leaves the default. It returns flag.ErrHelp for --help and a
// *usageError for bad input.
func parseConfig(args []string, lookupEnv func(string) (string, bool)) (config, error) {
	var cfg config
	// Everything after --exec belongs to the program, so split it off before the flag
	// package sees it.
	flagArgs := args
	execGiven := false
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "exec" {
			continue
		}
		execGiven = true
		flagArgs = args[:i]
		if hasValue {
			cfg.execArgs = append([]string{value}, args[i+1:]...)
		} else {
			cfg.execArgs = args[i+1:]
		}
		break
	}

	fs := flag.NewFlagSet("processor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	values := make(map[string]*string, len(options))
	bools := make(map[string]*bool)
	for _, o := range options {
		if o.name == "exec" {
			continue
		}
		if o.isBool {
			bools[o.name] = fs.Bool(o.name, false, o.help)
		} else {
			values[o.name] = fs.String(o.name, o.def, o.help)
		}
	}
	if err := fs.Parse(flagArgs); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, flag.ErrHelp
		}
		return cfg, usagef("%s", strings.Replace(err.Error(), " -", " --", 1))
	}
	if fs.NArg() > 0 {
		return cfg, usagef("unexpected argument %q (the program and its arguments go after --exec)", fs.Arg(0))
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	// lookup returns a flag's value and where it came from: the flag, its environment
	// variable, or the default.
	lookup := func(name string) (value, origin string) {
		o := optionNamed(name)
		if given[name] {
			if o.isBool {
				return strconv.FormatBool(*bools[name]), "--" + name
			}
			return *values[name], "--" + name
		}
		if o.env != "" {
			if v, ok := lookupEnv(o.env); ok {
				return v, o.env
			}
		}
		return o.def, "--" + name
	}
	var errs []error
	bad := func(origin, format string, args ...any) {
		errs = append(errs, usagef("%s: %s", origin, fmt.Sprintf(format, args...)))
	}

	var origin string
	// required names the variable too when the flag was not given.
	required := func(origin, what, env string) {
		if origin == env {
			bad(origin, "%s is required: the variable is set but empty", what)
		} else {
			bad(origin, "%s is required (or set %s)", what, env)
		}
	}
	cfg.databaseURL, origin = lookup("database-url")
	if cfg.databaseURL == "" {
		required(origin, "a database URL", "DATABASE_URL")
	} else if _, err := pgpool.ParseConfig(cfg.databaseURL); err != nil {
		bad(origin, "%v", err)
	}
	cfg.topic, origin = lookup("topic")
	switch n := utf8.RuneCountInString(cfg.topic); {
	case cfg.topic == "":
		required(origin, "a topic", "PGTASK_TOPIC")
	case n > repository.MaxTopicLength:
		bad(origin, "topic is %d characters long, at most %d allowed", n, repository.MaxTopicLength)
	case !utf8.ValidString(cfg.topic):
		bad(origin, "topic is not valid UTF-8")
	}

	cfg.httpURL, origin = lookup("http")
	switch {
	case execGiven && cfg.httpURL != "" && given["http"]:
		bad("--exec", "give either --exec or --http, not both")
	case execGiven:
		cfg.httpURL = "" // a flag beats an environment variable
		if len(cfg.execArgs) == 0 || cfg.execArgs[0] == "" {
			bad("--exec", "missing program (--exec PROGRAM [ARGS...] must come last)")
		} else if _, err := exec.LookPath(cfg.execArgs[0]); err != nil {
			bad("--exec", "program %q not found or not executable", cfg.execArgs[0])
		}
	case cfg.httpURL != "":
		u, err := url.Parse(cfg.httpURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// not quoted whole: its path or password may be a secret (shownURL)
			bad(origin, "invalid URL %s (want http://HOST/PATH or https://HOST/PATH)", shownURL(cfg.httpURL))
		} else if p := u.Port(); p != "" {
			// url.Parse takes any digits: each task would fail at its dial, an attempt
			// used, until the topic's tasks were all FAILED
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				bad(origin, "invalid URL %s: port %s out of range (want 1 to 65535)", shownURL(cfg.httpURL), p)
			}
		}
	default:
		errs = append(errs, usagef("a handler is required: --exec PROGRAM [ARGS...] or --http URL"))
	}

	positive := func(name string) int {
		v, origin := lookup(name)
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad(origin, "invalid value %q (want a whole number of at least 1)", v)
		}
		return n
	}
	cfg.workers = positive("workers")
	cfg.batchSize = positive("batch-size")
	v, origin := lookup("vacuum-every")
	switch n, err := strconv.ParseInt(v, 10, 64); {
	case err != nil || n < 0:
		bad(origin, "invalid value %q (want a whole number; 0 turns the processor's VACUUM off)", v)
	case n == 0:
		cfg.vacuumEvery = -1
	default:
		cfg.vacuumEvery = n
	}

	v, origin = lookup("order")
	order, err := repository.ParseOrder(v)
	if err != nil {
		bad(origin, "%s", plain(err))
	}
	cfg.order = order
	v, origin = lookup("condition")
	condition, err := repository.ParseCondition(v)
	if err != nil {
		bad(origin, "%s", plain(err))
	}
	cfg.condition = condition

	// duration reads a duration of at least least (positive when 0) and, when most is
	// not 0, at most most; whyLeast and whyMost say what the bounds protect.
	duration := func(name string, least time.Duration, whyLeast string, most time.Duration, whyMost string) time.Duration {
		v, origin := lookup(name)
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad(origin, "invalid duration %q (want e.g. 500ms, 30s, 5m)", v)
		case least == 0 && d <= 0:
			bad(origin, "duration %q must be positive", v)
		case d < least:
			bad(origin, "duration %q is too short: at least %v (%s)", v, least, whyLeast)
		case most != 0 && d > most:
			bad(origin, "duration %q is too long: at most %s (%s)", v, shortDuration(most), whyMost)
		}
		return d
	}
	cfg.timeout = duration("timeout", 0, "", 0, "")
	cfg.retryDelay = duration("retry-delay",
		retryDelayMin, "a retry-later uses no attempt: a shorter delay runs the task again as fast as it answers",
		0, "")
	cfg.heartbeat = duration("heartbeat",
		heartbeatMin, "each heartbeat is a round trip to the database, and a process silent for 5 of them is taken for dead",
		heartbeatMax, "a dead processor's tasks come back after 5 heartbeats, and due schedules fire once per heartbeat")
	cfg.pauseInterval = duration("pause-interval",
		pauseIntervalMin, "notifications and timers start work on time: a shorter interval only polls the database in a loop",
		0, "")
	cfg.shutdownTimeout = duration("shutdown-timeout", 0, "", 0, "")

	boolean := func(name string) bool {
		v, origin := lookup(name)
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(origin, "invalid value %q (want true or false)", v)
		}
		return b
	}
	cfg.initialize = boolean("init")
	cfg.migrate = boolean("migrate")
	cfg.noSchedules = boolean("no-schedules")
	if cfg.initialize && cfg.topic != "" && utf8.ValidString(cfg.topic) && utf8.RuneCountInString(cfg.topic) <= repository.MaxTopicLength {
		// a name the topic could not be created under fails here, before anything starts
		if err := repository.ValidateNewTopic(cfg.topic); err != nil {
			_, origin := lookup("topic")
			bad(origin, "%s (with --init, the topic must be one that can be created)", plain(err))
		}
	}

	cfg.addr, cfg.addrOrigin = lookup("addr")
	if cfg.addr != "" {
		if err := httpguard.CheckAddr(cfg.addr); err != nil {
			bad(cfg.addrOrigin, "invalid address %q: %v (or empty to disable the server)", cfg.addr, err)
		}
	}
	cfg.logFormat, origin = lookup("log-format")
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		bad(origin, "unknown log format %q (want text or json)", cfg.logFormat)
	}
	v, origin = lookup("log-level")
	if err := cfg.logLevel.UnmarshalText([]byte(v)); err != nil {
		bad(origin, "unknown log level %q (want debug, info, warn or error)", v)
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return cfg, &usageError{msg: strings.Join(msgs, "\n")}
	}
	return cfg, nil
}

// shortDuration is d as time.Duration.String writes it, without zero minutes and
// seconds: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func optionNamed(name string) option {
	for _, o := range options {
		if o.name == name {
			return o
		}
	}
	panic("unknown option " + name)
}

// plain strips the repository's "invalid argument: " prefix from a parse error.
func plain(err error) string {
	return strings.TrimPrefix(err.Error(), repository.ErrInvalid.Error()+": ")
}
