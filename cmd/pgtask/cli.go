package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// env is what a command may use of the outside world. run wires it to the process;
// tests give their own, so they can run in parallel without touching the real
// environment.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// lookupenv reads an environment variable as os.LookupEnv does: whether it is set
	// tells a variable set to the empty string from an unset one.
	lookupenv func(string) (string, bool)
}

// getenv is the value of the environment variable key, "" when it is unset.
func (e *env) getenv(key string) string {
	v, _ := e.lookupenv(key)
	return v
}

// run runs the pgtask command line args (without the program name). A usage error
// (bad flag or value) is a *usageError; --help returns nil after printing usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runEnv(ctx, &env{stdin: os.Stdin, stdout: stdout, stderr: stderr, lookupenv: os.LookupEnv}, args)
}

func runEnv(ctx context.Context, e *env, args []string) error {
	out := &firstError{w: e.stdout}
	e.stdout = out
	err := dispatch(ctx, e, "pgtask", commands(), args)
	if errors.Is(err, flag.ErrHelp) {
		err = nil
	}
	if err == nil && out.err != nil {
		// a command that printed with fmt.Fprint and went on (show, schedule show,
		// migrate version) exited 0 with nothing written on a full disk
		return out.err
	}
	return err
}

// firstError is a writer that keeps the first error of its writes.
type firstError struct {
	w   io.Writer
	err error
}

func (f *firstError) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil && f.err == nil {
		f.err = err
	}
	return n, err
}

// exitCode reports err on w the way the shell expects: nothing and 0 on success, a
// usage error and 2, any other error and 1.
func exitCode(err error, w io.Writer) int {
	if err == nil {
		return 0
	}
	// An error may quote the database (a task's identifier, PostgreSQL's message):
	// never raw to the terminal.
	fmt.Fprintf(w, "pgtask: %s\n", escape(err.Error(), true))
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", ue.cmd)
		return 2
	}
	return 1
}

// usageError is a mistake in the command line: the process exits 2.
type usageError struct {
	cmd string // the command whose --help explains it, e.g. "pgtask push"
	err error
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// command is one node of the command tree: a leaf with run, or a group with sub.
type command struct {
	name    string
	args    string // synopsis after the name, for the group's list
	summary string
	run     func(ctx context.Context, e *env, args []string) error
	sub     []*command
}

// commands is the command tree. The names and flags are documented in docs/cli.md.
func commands() []*command {
	return []*command{
		{name: "migrate", summary: "apply, revert or show the database schema", sub: []*command{
			{name: "up", args: "[--to N]", summary: "apply every pending migration, or those up to version N", run: runMigrateUp},
			{name: "down", args: "--yes [--to N]", summary: "revert every migration (dropping all pgtask tables), or those above version N", run: runMigrateDown},
			{name: "version", summary: "print the applied migration version", run: runMigrateVersion},
		}},
		{name: "topic", summary: "register, configure, list and destroy topics", sub: []*command{
			{name: "add", args: "NAME", summary: "register a topic (idempotent), optionally with settings", run: runTopicAdd},
			{name: "list", summary: "list topics and their settings", run: runTopicList},
			{name: "show", args: "NAME", summary: "show a topic: settings, limits and their use, task counts", run: runTopicShow},
			{name: "set", args: "NAME", summary: "change some settings of a topic", run: runTopicSet},
			{name: "destroy", args: "NAME", summary: "remove a topic with all its tasks", run: runTopicDestroy},
			{name: "dedicate", args: "NAME", summary: "give a topic a table of its own", run: runTopicDedicate},
		}},
		{name: "schedule", summary: "add, change, list, pause and remove schedules (periodic tasks)", sub: []*command{
			{name: "add", args: "NAME --topic T --spec SPEC", summary: "create a schedule", run: runScheduleAdd},
			{name: "list", summary: "list schedules and their next fire times", run: runScheduleList},
			{name: "show", args: "NAME", summary: "show one schedule and its coming fire times", run: runScheduleShow},
			{name: "set", args: "NAME", summary: "change some settings of a schedule", run: runScheduleSet},
			{name: "pause", args: "NAME", summary: "stop a schedule firing", run: runSchedulePause},
			{name: "resume", args: "NAME", summary: "let a paused schedule fire again", run: runScheduleResume},
			{name: "remove", args: "NAME", summary: "remove a schedule (alias: rm)", run: runScheduleRemove},
			{name: "rm", args: "NAME", summary: "remove a schedule", run: runScheduleRm},
			{name: "run-now", args: "NAME", summary: "push a schedule's task now", run: runScheduleRunNow},
		}},
		{name: "push", args: "--topic T [IDENTIFIER [INPUT]]", summary: "push a task, or many from stdin", run: runPush},
		{name: "list", args: "--topic T", summary: "list the tasks of a topic, page by page", run: runList},
		{name: "show", args: "--topic T SEQUENCE", summary: "show one task in full", run: runShow},
		{name: "stats", summary: "show per-topic counts of unfinished and broken tasks", run: runStats},
		{name: "revive", args: "--topic T MODE (SEQUENCE...|--state S)", summary: "reset, recreate or reassign finished tasks", run: runRevive},
		{name: "cancel", args: "--topic T SEQUENCE...", summary: "cancel tasks", run: runCancel},
		{name: "pause", args: "TOPIC", summary: "stop every processor of a topic from polling", run: runPause},
		{name: "resume", args: "TOPIC", summary: "let the processors of a topic poll again", run: runResume},
		{name: "purge", args: "--topic T", summary: "delete finished tasks", run: runPurge},
		{name: "expire", summary: "take back the leases of dead processes", run: runExpire},
		{name: "serve", args: "[--addr HOST:PORT]", summary: "serve the REST API and /metrics", run: runServe},
		{name: "bench", summary: "measure throughput against a database", run: runBench},
		{name: "citus", summary: "distribute the database over a Citus cluster", sub: []*command{
			{name: "enable", summary: "distribute the tables by topic, keeping the tasks", run: runCitusEnable},
		}},
		{name: "dev", summary: "run the whole system locally, with a throwaway PostgreSQL if needed", run: runDev},
	}
}

// dispatch finds the command named by args[0] among cmds and runs it.
func dispatch(ctx context.Context, e *env, path string, cmds []*command, args []string) error {
	if len(args) == 0 {
		printGroupUsage(e.stderr, path, cmds)
		return &usageError{cmd: path, err: fmt.Errorf("%smissing command", prefix(path))}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printGroupUsage(e.stdout, path, cmds)
		return flag.ErrHelp
	case "help":
		if len(args) == 1 {
			printGroupUsage(e.stdout, path, cmds)
			return flag.ErrHelp
		}
		return dispatch(ctx, e, path, cmds, append(args[1:len(args):len(args)], "--help"))
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		if c.sub != nil {
			return dispatch(ctx, e, path+" "+c.name, c.sub, args[1:])
		}
		return c.run(ctx, e, args[1:])
	}
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	return &usageError{cmd: path, err: fmt.Errorf("%sunknown command %q (want one of %s)", prefix(path), args[0], strings.Join(names, ", "))}
}

// prefix turns "pgtask topic" into "topic: " (and "pgtask" into "") for messages.
func prefix(path string) string {
	name := strings.TrimPrefix(strings.TrimPrefix(path, "pgtask"), " ")
	if name == "" {
		return ""
	}
	return name + ": "
}

func printGroupUsage(w io.Writer, path string, cmds []*command) {
	fmt.Fprintf(w, "Usage: %s COMMAND [flags] [arguments]\n\n", path)
	if path == "pgtask" {
		fmt.Fprint(w, "pgtask is the operator's command line for the pgtask queue. Commands that need a\n"+
			"database take --database-url, falling back to the DATABASE_URL environment variable\n"+
			"(either given empty is an error).\n\n")
	}
	fmt.Fprintln(w, "Commands:")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range cmds {
		name := c.name
		if c.args != "" {
			name += " " + c.args
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nRun '%s COMMAND --help' for the flags of a command.\n", path)
}

// flags is the flag set of one command. It accepts flags before, between and after
// positional arguments ("topic add NAME --max-attempts 3"); "--" ends the flags.
type flags struct {
	*flag.FlagSet
	e        *env
	path     string // "pgtask topic add"
	synopsis string // after the path, e.g. "NAME [flags]"
	about    string
}

func newFlags(e *env, path, synopsis, about string) *flags {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, e: e, path: path, synopsis: synopsis, about: about}
}

// name is the command's name in messages, e.g. "topic add".
func (f *flags) name() string { return strings.TrimSuffix(prefix(f.path), ": ") }

// usagef returns a usage error of this command.
func (f *flags) usagef(format string, args ...any) error {
	return &usageError{cmd: f.path, err: fmt.Errorf("%s: %s", f.name(), fmt.Sprintf(format, args...))}
}

// Int, Int64, IntVar and Int64Var define integer flags read in base 10 only. The flag
// package's own read 010 as octal 8 and 0x10 as 16: "migrate down --to 000016", a
// version written as the tool shows it, reverted 000016 and 000015 too (to 14).
func (f *flags) Int(name string, value int, usage string) *int {
	p := new(int)
	f.IntVar(p, name, value, usage)
	return p
}

func (f *flags) Int64(name string, value int64, usage string) *int64 {
	p := new(int64)
	f.Int64Var(p, name, value, usage)
	return p
}

func (f *flags) IntVar(p *int, name string, value int, usage string) {
	*p = value
	f.Var(decimal[int]{p}, name, usage)
}

func (f *flags) Int64Var(p *int64, name string, value int64, usage string) {
	*p = value
	f.Var(decimal[int64]{p}, name, usage)
}

// decimal is the value of an integer flag, read in base 10 (leading zeros allowed).
type decimal[T int | int64] struct{ p *T }

func (d decimal[T]) String() string {
	if d.p == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*d.p), 10)
}

func (d decimal[T]) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) || err == nil && int64(T(n)) != n {
		return errors.New("value out of range") // flagMessage: "out of range"
	}
	if err != nil {
		return errors.New("parse error") // flagMessage: "not a valid value"
	}
	*d.p = T(n)
	return nil
}

// repeatable is implemented by the value of a flag that may be given more than once.
type repeatable interface{ repeatable() }

// parse parses args and returns the positional arguments. --help prints the usage on
// stdout and returns flag.ErrHelp; a bad flag returns a usage error naming it.
func (f *flags) parse(args []string) ([]string, error) {
	if err := f.boolWithValue(args); err != nil {
		return nil, err
	}
	if err := f.givenOnce(args); err != nil {
		return nil, err
	}
	var positional []string
	for {
		err := f.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			f.printUsage(f.e.stdout)
			return nil, flag.ErrHelp
		}
		if err != nil {
			return nil, f.usagef("%s", flagMessage(err))
		}
		rest := f.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// boolWithValue refuses a boolean flag followed by true or false as its own argument
// (--suspended false): the flag takes no value, so the word would be a positional
// argument, and "pgtask push --suspended false user-42" pushed a SUSPENDED task named
// "false" whose input was "user-42".
func (f *flags) boolWithValue(args []string) error {
	for i, arg := range args {
		if arg == "--" {
			return nil
		}
		if !strings.HasPrefix(arg, "-") || i+1 == len(args) {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		fl := f.Lookup(name)
		if fl == nil {
			continue
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			continue
		}
		if next := strings.ToLower(args[i+1]); next == "true" || next == "false" {
			return f.usagef("--%s takes no value: write --%s=%s, or leave the flag out for false", name, name, next)
		}
	}
	return nil
}

// givenOnce refuses a flag given twice (but one whose value is a list): the flag
// package keeps the last value, and "purge --topic prod --topic staging" purged staging
// without a word.
func (f *flags) givenOnce(args []string) error {
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return nil
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			continue
		}
		name, _, withValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		fl := f.Lookup(name)
		if fl == nil {
			continue // a negative number given as a value, or unknown (Parse says so)
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !withValue && (!ok || !b.IsBoolFlag()) {
			i++ // its value, which may begin with a dash (--priority -5)
		}
		if _, ok := fl.Value.(repeatable); ok {
			continue
		}
		if seen[name] {
			return f.usagef("--%s is given more than once", name)
		}
		seen[name] = true
	}
	return nil
}

// given reports whether the flag was set on the command line.
func (f *flags) given(name string) bool {
	found := false
	f.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			found = true
		}
	})
	return found
}

// setting returns the value of flag name (value, as parsed) when the flag was given,
// else that of the environment variable when it is set, with which of them gave it:
// "--name" or the variable; "" when neither is set. A flag given an empty value, or a
// variable set to the empty string, is a usage error naming it and ending with hint
// (what to do instead): an empty value, such as a secret that came out empty, is never
// taken as unset.
func (f *flags) setting(name, value, variable, hint string) (string, string, error) {
	if f.given(name) {
		if value == "" {
			return "", "", f.usagef("--%s is empty: %s", name, hint)
		}
		return value, "--" + name, nil
	}
	if v, ok := f.e.lookupenv(variable); ok {
		if v == "" {
			return "", "", f.usagef("%s is set but empty: %s", variable, hint)
		}
		return v, variable, nil
	}
	return "", "", nil
}

var (
	reUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	reNeedsArg  = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	// "invalid value V for flag -name: …", or for a boolean flag given a value (--fair=maybe)
	// "invalid boolean value V for -name: …"
	reInvalid     = regexp.MustCompile(`^invalid (boolean )?value (".*") for (?:flag )?-+([^:]+): (.*)$`)
	reInvalidBool = regexp.MustCompile(`^invalid boolean flag -*([^:]+): (.*)$`)
)

// flagMessage rewrites the flag package's messages into "--name: problem" form.
func flagMessage(err error) string {
	msg := err.Error()
	if m := reUndefined.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown flag --%s", m[1])
	}
	if m := reNeedsArg.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s: missing value", m[1])
	}
	if m := reInvalid.FindStringSubmatch(msg); m != nil {
		problem := m[4]
		switch {
		case problem == "parse error" && m[1] != "":
			problem = "want true or false"
		case problem == "parse error":
			problem = "not a valid value"
		case problem == "value out of range":
			problem = "out of range"
		}
		return fmt.Sprintf("--%s: invalid value %s: %s", m[3], m[2], problem)
	}
	if m := reInvalidBool.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s: %s", m[1], m[2])
	}
	return msg
}

func (f *flags) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n", f.path, f.synopsis)
	if f.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(f.about))
	}
	var list []*flag.Flag
	f.VisitAll(func(fl *flag.Flag) { list = append(list, fl) })
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	if len(list) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	for _, fl := range list {
		kind, usage := flag.UnquoteUsage(fl)
		line := "  --" + fl.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintln(w, line)
		if fl.DefValue != "" && fl.DefValue != "0" && fl.DefValue != "false" && fl.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		fmt.Fprintf(w, "      %s\n", strings.ReplaceAll(usage, "\n", "\n      "))
	}
	fmt.Fprintln(w, "  --help\n      print this help")
}

// noArgs parses args for a command that takes no positional arguments.
func (f *flags) noArgs(args []string) error {
	rest, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return f.usagef("unexpected argument %q", rest[0])
	}
	return nil
}

// args parses args for a command that takes between min and max positional arguments
// (max < 0: no limit); what names them in messages.
func (f *flags) args(args []string, min, max int, what string) ([]string, error) {
	rest, err := f.parse(args)
	if err != nil {
		return nil, err
	}
	if len(rest) < min {
		return nil, f.usagef("missing %s", what)
	}
	if max >= 0 && len(rest) > max {
		return nil, f.usagef("unexpected argument %q", rest[max])
	}
	return rest, nil
}
