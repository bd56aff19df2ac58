package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"}, {"help", "push"}, {"help", "topic", "add"},
		{"topic", "--help"}, {"migrate", "--help"}, {"dev", "--help"}, {"serve", "--help"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			r := runCLI(t.Context(), "", nil, args...)
			if r.err != nil || r.code != 0 {
				t.Fatalf("err %v, exit %d", r.err, r.code)
			}
			wantContains(t, r.stdout, "Usage: pgtask")
		})
	}
	t.Run("EveryCommandPrintsItsUsageAndFlags", func(t *testing.T) {
		t.Parallel()
		var walk func(path []string, cmds []*command)
		walk = func(path []string, cmds []*command) {
			for _, c := range cmds {
				p := append(append([]string(nil), path...), c.name)
				if c.sub != nil {
					walk(p, c.sub)
					continue
				}
				if c.name == "bench" { // a stub until the real bench lands
					continue
				}
				r := runCLI(t.Context(), "", nil, append(p, "--help")...)
				if r.err != nil {
					t.Errorf("%v --help: %v", p, r.err)
					continue
				}
				wantContains(t, r.stdout, "Usage: pgtask "+strings.Join(p, " "), "--help")
			}
		}
		walk(nil, commands())
	})
	t.Run("DatabaseCommandsTakeDatabaseURL", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"migrate", "up"}, {"topic", "add"}, {"topic", "list"}, {"topic", "set"}, {"topic", "destroy"}, {"topic", "dedicate"},
			{"push"}, {"list"}, {"show"}, {"stats"}, {"revive"}, {"cancel"}, {"pause"}, {"resume"},
			{"purge"}, {"expire"}, {"serve"}, {"dev"},
		} {
			r := runCLI(t.Context(), "", nil, append(args, "--help")...)
			wantContains(t, r.stdout, "--database-url URL", "$DATABASE_URL")
		}
	})
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"NoCommand", nil, []string{"missing command"}},
		{"UnknownCommand", []string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
		{"UnknownSubcommand", []string{"topic", "rename"}, []string{`topic: unknown command "rename"`}},
		{"UnknownFlag", []string{"list", "--topic", "t", "--colour"}, []string{"list: unknown flag --colour"}},
		{"FlagWithoutValue", []string{"list", "--topic"}, []string{"list: --topic: missing value"}},
		{"BadInsertion", []string{"push", "--topic", "t", "--insertion", "x", "id"},
			[]string{`push: --insertion: unknown insertion "x" (want one of APPEND, REPLACE, SUPERSEDE, DELETE)`}},
		{"PushWithoutTopic", []string{"push", "id"}, []string{"push: --topic is required"}},
		{"PriorityOutOfRange", []string{"push", "--topic", "t", "--priority", "40000", "id"}, []string{"--priority: 40000 is out of range"}},
		{"PriorityNotANumber", []string{"push", "--topic", "t", "--priority", "high", "id"}, []string{`--priority: invalid value "high"`}},
		{"NegativeDelay", []string{"push", "--topic", "t", "--delay", "-5s", "id"}, []string{"--delay", "must not be negative"}},
		{"BadDelay", []string{"push", "--topic", "t", "--delay", "soon", "id"}, []string{`--delay: invalid value "soon"`, "not a duration"}},
		{"BoolFlagWithSeparateValue", []string{"push", "--topic", "t", "--suspended", "false", "user-42"}, []string{"push: --suspended takes no value: write --suspended=false, or leave the flag out for false"}},
		{"BoolFlagWithSeparateValueOneDash", []string{"list", "--topic", "t", "-backward", "TRUE"}, []string{"list: --backward takes no value: write --backward=true"}},
		{"TooManyPushArguments", []string{"push", "--topic", "t", "a", "b", "c"}, []string{`unexpected argument "c"`}},
		{"ReferenceTooLong", []string{"push", "--topic", "t", "--reference", strings.Repeat("r", 501), "id"}, []string{"push: --reference: reference is 501 characters long, at most 500"}},
		{"EmptyIdentifier", []string{"push", "--topic", "t", ""}, []string{"identifier is empty"}},
		{"BadState", []string{"list", "--topic", "t", "--state", "DONE"}, []string{`list: --state: unknown state "DONE"`}},
		{"ZeroLimit", []string{"list", "--topic", "t", "--limit", "0"}, []string{"--limit: 0 is below 1"}},
		{"ShowWithoutSequence", []string{"show", "--topic", "t"}, []string{"show: missing task SEQUENCE"}},
		{"ShowBadSequence", []string{"show", "--topic", "t", "abc"}, []string{`sequence "abc" is not a positive integer`}},
		{"ReviveWithoutMode", []string{"revive", "--topic", "t", "1"}, []string{"exactly one of --reset, --recreate MODE and --reassign RESULT"}},
		{"ReviveTwoModes", []string{"revive", "--topic", "t", "--reset", "--reassign", "success", "1"}, []string{"exactly one of"}},
		{"ReviveBadRecreate", []string{"revive", "--topic", "t", "--recreate", "reset", "1"}, []string{`--recreate: unknown mode "reset"`}},
		{"ReviveBadResult", []string{"revive", "--topic", "t", "--reassign", "yes", "1"}, []string{`--reassign: unknown result "yes"`}},
		{"ReviveSequencesAndState", []string{"revive", "--topic", "t", "--reset", "--state", "FAILED", "1"}, []string{"either task SEQUENCEs or --state"}},
		{"ReviveNeither", []string{"revive", "--topic", "t", "--reset"}, []string{"either task SEQUENCEs or --state"}},
		{"ReviveReassignToTheSameState", []string{"revive", "--topic", "t", "--reassign", "success", "--state", "SUCCEEDED"}, []string{"revive: --reassign SUCCESS: SUCCEEDED tasks have that result already"}},
		{"ReviveUnrevivableState", []string{"revive", "--topic", "t", "--reset", "--state", "READY"}, []string{"--state: READY tasks cannot be revived"}},
		{"ReviveLimitWithSequences", []string{"revive", "--topic", "t", "--reset", "--limit", "5", "1"}, []string{"--limit applies only with --state"}},
		{"ReviveBadFrom", []string{"revive", "--topic", "t", "--reset", "--state", "FAILED", "--from", "yesterday"}, []string{`--from: "yesterday" is neither a sequence nor an RFC 3339 time`}},
		{"CancelWithoutSequence", []string{"cancel", "--topic", "t"}, []string{"cancel: missing task SEQUENCE"}},
		// Integers are read in base 10: the flag package read 000016 as octal 14, and
		// "migrate down --to 000016" reverted 000016 and 000015 too.
		{"MigrateDownToZeroPadded", []string{"migrate", "down", "--to", "000016"}, []string{"every migration above version 16 "}},
		{"MigrateDownToNine", []string{"migrate", "down", "--to", "000009"}, []string{"every migration above version 9 "}},
		{"HexadecimalInteger", []string{"list", "--topic", "t", "--limit", "0x10"}, []string{`list: --limit: invalid value "0x10": not a valid value`}},
		{"IntegerOutOfRange", []string{"list", "--topic", "t", "--cursor", "9223372036854775808"}, []string{`list: --cursor: invalid value "9223372036854775808": out of range`}},
		// The flag package kept the last value: this purged staging without a word.
		{"FlagGivenTwice", []string{"purge", "--topic", "prod", "--topic", "staging", "--all"}, []string{"purge: --topic is given more than once"}},
		{"FlagGivenTwiceWithEquals", []string{"list", "--topic=a", "-topic", "b"}, []string{"list: --topic is given more than once"}},
		{"PurgeAllWithState", []string{"purge", "--topic", "t", "--all", "--state", "FAILED"}, []string{"--all deletes every task"}},
		{"PurgeUnfinishedState", []string{"purge", "--topic", "t", "--state", "READY"}, []string{"--state: READY tasks cannot be purged"}},
		// An empty filter is a mistake (a variable that came out empty), never "all".
		{"PurgeEmptyState", []string{"purge", "--topic", "t", "--state", ""}, []string{"purge: --state is empty: give a state, or leave the flag out"}},
		{"PurgeEmptyTo", []string{"purge", "--topic", "t", "--to", ""}, []string{"purge: --to is empty: give a sequence or an RFC 3339 time"}},
		{"ReviveEmptyFrom", []string{"revive", "--topic", "t", "--reset", "--state", "FAILED", "--from", ""}, []string{"revive: --from is empty"}},
		{"ListEmptyState", []string{"list", "--topic", "t", "--state", ""}, []string{"list: --state is empty"}},
		{"StatsEmptyTopic", []string{"stats", "--topic", ""}, []string{"stats: --topic is empty: name a topic, or leave the flag out for every topic"}},
		{"StatsTopicTooLong", []string{"stats", "--topic", strings.Repeat("t", 251)}, []string{"stats: --topic: topic is 251 characters long"}},
		{"ListIdentifierTooLong", []string{"list", "--topic", "t", "--identifier", strings.Repeat("i", 501)}, []string{"list: identifier is 501 characters long, at most 500"}},
		{"ListReferenceWithNUL", []string{"list", "--topic", "t", "--reference", "a\x00b"}, []string{"list: reference"}},
		{"TopicAddDot", []string{"topic", "add", "."}, []string{`topic add: topic NAME: topic "." is a path segment of its own`}},
		{"TopicAddDotDot", []string{"topic", "add", ".."}, []string{`topic add: topic NAME: topic ".." is a path segment of its own`}},
		{"PurgeFromAfterTo", []string{"purge", "--topic", "t", "--from", "2030-01-01T00:00:00Z", "--to", "2020-01-01T00:00:00Z"}, []string{"purge: --from 2030-01-01T00:00:00Z is after --to 2020-01-01T00:00:00Z"}},
		{"ReviveFromAfterTo", []string{"revive", "--topic", "t", "--reset", "--state", "FAILED", "--from", "9", "--to", "3"}, []string{"--from 9 is after --to 3"}},
		{"ListLimitTooLarge", []string{"list", "--topic", "t", "--limit", "99999999999"}, []string{"--limit: 99999999999 is above 1000, a page's most"}},
		{"ListLimitAboveAPage", []string{"list", "--topic", "t", "--limit", "1001"}, []string{"--limit: 1001 is above 1000, a page's most"}},
		{"ListEmptyIdentifier", []string{"list", "--topic", "t", "--identifier", ""}, []string{"list: --identifier is empty: give one, or leave the flag out"}},
		{"ListEmptyReference", []string{"list", "--topic", "t", "--reference", ""}, []string{"list: --reference is empty"}},
		{"ReviveLimitTooLarge", []string{"revive", "--topic", "t", "--reset", "--state", "FAILED", "--limit", "99999999999"}, []string{"--limit: 99999999999 is above 100000"}},
		// one transaction whose tasks come back whole: millions held locks for minutes
		{"ReviveLimitAboveMax", []string{"revive", "--topic", "t", "--recreate", "append", "--state", "FAILED", "--limit", "100001"},
			[]string{"revive: --limit: 100001 is above 100000: run it again for the next ones"}},
		{"ExpireNegativeTimeout", []string{"expire", "--timeout", "-1s"}, []string{"--timeout", "must not be negative"}},
		{"TopicAddWithoutName", []string{"topic", "add"}, []string{"topic add: missing topic NAME"}},
		{"TopicTooLong", []string{"list", "--topic", strings.Repeat("t", 10000)}, []string{"list: --topic: topic is 10000 characters long, at most 250 allowed"}},
		{"TopicNotUTF8", []string{"show", "--topic", "a\xffb", "1"}, []string{"show: --topic: topic is not valid UTF-8"}},
		{"TopicNameTooLong", []string{"topic", "add", strings.Repeat("t", 251)}, []string{"topic add: topic NAME: topic is 251 characters long"}},
		{"PauseTopicNotUTF8", []string{"pause", "\xff"}, []string{"pause: TOPIC: topic is not valid UTF-8"}},
		{"TopicAddBadMaxAttempts", []string{"topic", "add", "x", "--max-attempts", "0"}, []string{"topic add: --max-attempts: 0 is below 1"}},
		{"TopicSetNothing", []string{"topic", "set", "x"}, []string{"topic set: no setting given"}},
		{"TopicSetNegativeCap", []string{"topic", "set", "x", "--queue-cap", "-1"}, []string{"--queue-cap: -1 is negative"}},
		{"TopicSetBadRetention", []string{"topic", "set", "x", "--retention", "forever"}, []string{`--retention: invalid value "forever"`}},
		{"PauseWithoutTopic", []string{"pause"}, []string{"pause: missing TOPIC"}},
		{"MigrateDownUnconfirmed", []string{"migrate", "down"}, []string{"migrate down: --yes"}},
		{"MigrateDownToUnconfirmed", []string{"migrate", "down", "--to", "5"}, []string{"migrate down: --yes: this reverts every migration above version 5"}},
		{"MigrateDownToAboveNewest", []string{"migrate", "down", "--yes", "--to", "100000"}, []string{"migrate down: --to 100000: the newest migration of this build is"}},
		{"MigrateUpToNegative", []string{"migrate", "up", "--to", "-2"}, []string{"migrate up: --to -2: a version is 0 or more"}},
		{"MigrateUpToAboveNewest", []string{"migrate", "up", "--to", "100000"}, []string{"migrate up: --to 100000: the newest migration of this build is"}},
		{"MigrateDownToNegative", []string{"migrate", "down", "--yes", "--to", "-1"}, []string{"migrate down: --to -1: a version is 0 or more"}},
		{"NoDatabaseURL", []string{"stats"}, []string{"stats: --database-url: no database URL: pass --database-url or set DATABASE_URL"}},
		{"BadDatabaseURL", []string{"stats", "--database-url", "postgres://x:y@host:notaport/db"}, []string{"stats: --database-url:"}},
		// pgx quotes the URL, its password masked up to the first @ only: "u:xxxxx@cret@host"
		{"BadDatabaseURLWithAnAtInItsPassword", []string{"stats", "--database-url", "postgres://u:se@cret@host:99999/db"},
			[]string{"stats: --database-url: cannot parse the URL: invalid port"}},
		{"ServeNegativeMaxBody", []string{"serve", "--max-body", "-1"}, []string{"serve: --max-body: -1 is below 1"}},
		{"ServeReadPastWrite", []string{"serve", "--read-timeout", "2m"}, []string{"serve: read timeout 2m0s is longer than the write timeout 1m0s"}},
		// Refused only after the command had connected (and, with --migrate, migrated).
		{"ServeBadAllowHost", []string{"serve", "--allow-host", "http://x/"}, []string{`serve: --allow-host: allowed host "http://x/" is not a host name or IP address`}},
		// Skipped, as if not given.
		{"ServeEmptyAllowHost", []string{"serve", "--allow-host", ""}, []string{`serve: --allow-host: invalid value "": an empty item`}},
		{"ServeEmptyAllowHostItem", []string{"serve", "--allow-host", "a.internal,,b.internal"}, []string{`serve: --allow-host: invalid value "a.internal,,b.internal": an empty item`}},
		// The batch was preallocated whole: a panic (makeslice) or the memory exhausted.
		{"PushBatchSizeOverflowing", []string{"push", "--topic", "t", "--batch-size", "9223372036854775807"}, []string{"push: --batch-size: 9223372036854775807 is above 100000"}},
		{"PushBatchSizeExhaustingMemory", []string{"push", "--topic", "t", "--batch-size", "2000000000"}, []string{"push: --batch-size: 2000000000 is above 100000"}},
		// Accepted, and ignored.
		{"PushBatchSizeWithAnIdentifier", []string{"push", "--topic", "t", "--batch-size", "5", "a"},
			[]string{"push: --batch-size applies to the lines of standard input, not to an IDENTIFIER given as an argument"}},
		{"ShowInputAsJSON", []string{"show", "--topic", "t", "--input", "--json", "1"},
			[]string{"show: --input prints the input as it is: give --json or --input, not both"}},
		{"PushBatchSizeAboveMax", []string{"push", "--topic", "t", "--batch-size", "100001"}, []string{"push: --batch-size: 100001 is above 100000"}},
		// The repository refused these (exit 1) without naming the argument or the flag.
		{"CancelSequenceTwice", []string{"cancel", "--topic", "t", "1", "1"}, []string{"cancel: task SEQUENCE 1 is given twice"}},
		{"CancelSequenceTwiceSpelledApart", []string{"cancel", "--topic", "t", "7", "2", "07"}, []string{`cancel: task SEQUENCE 7 is given twice (as "7" and "07")`}},
		{"ReviveSequenceTwice", []string{"revive", "--topic", "t", "--reset", "1", "1"}, []string{"revive: task SEQUENCE 1 is given twice"}},
		{"TopicAddBackoffCapBelowBase", []string{"topic", "add", "x", "--max-attempts", "3", "--backoff-base", "10s", "--backoff-cap", "1s"},
			[]string{"topic add: --backoff-cap: 1s is below the backoff base 10s: retries would wait the cap, never the base"}},
		// This said "99999999999" is not a whole number.
		{"TopicAddConcurrencyOutOfRange", []string{"topic", "add", "x", "--concurrency", "99999999999"},
			[]string{"topic add: --concurrency: 99999999999 is out of range (want a whole number from 1 to 2147483647, or none: no limit)"}},
		{"TopicSetRateOutOfRange", []string{"topic", "set", "x", "--rate", "3000000000/s"}, []string{"topic set: --rate: 3000000000 is out of range"}},
		// The flag package's own message: invalid boolean value "maybe" for -fair: parse error.
		{"TopicSetFairNotABoolean", []string{"topic", "set", "x", "--fair=maybe"}, []string{`topic set: --fair: invalid value "maybe": want true or false`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantUsage(t, runCLI(t.Context(), "", nil, tc.args...), tc.want...)
		})
	}
}

// TestEmptyDatabaseURL: a --database-url given an empty value or a DATABASE_URL set to
// the empty string is a usage error naming it. The flag fell back on the variable, and the
// variable read as unset.
func TestEmptyDatabaseURL(t *testing.T) {
	t.Parallel()
	// Nothing listens there: a command that went on to connect would fail at run time.
	const elsewhere = "postgres://postgres@127.0.0.1:1/none?connect_timeout=5"
	for name, tc := range map[string]struct {
		environ map[string]string
		args    []string
		want    string
	}{
		"Flag":                {nil, []string{"stats", "--database-url", ""}, "stats: --database-url is empty: give a connection string"},
		"FlagBeforeAVariable": {map[string]string{"DATABASE_URL": elsewhere}, []string{"stats", "--database-url", ""}, "stats: --database-url is empty"},
		"Variable":            {map[string]string{"DATABASE_URL": ""}, []string{"stats"}, "stats: DATABASE_URL is set but empty: give a connection string"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantUsage(t, runCLI(t.Context(), "", tc.environ, tc.args...), tc.want)
		})
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	if code := exitCode(nil, &w); code != 0 || w.Len() != 0 {
		t.Errorf("nil error: exit %d, printed %q", code, w.String())
	}
	w.Reset()
	if code := exitCode(errors.New("boom"), &w); code != 1 || w.String() != "pgtask: boom\n" {
		t.Errorf("runtime error: exit %d, printed %q", code, w.String())
	}
	w.Reset()
	if code := exitCode(&usageError{cmd: "pgtask push", err: errors.New("push: bad")}, &w); code != 2 ||
		w.String() != "pgtask: push: bad\nRun 'pgtask push --help' for usage.\n" {
		t.Errorf("usage error: exit %d, printed %q", code, w.String())
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"90s": "1m30s", "7d": "168h0m0s", "0.5d": "12h0m0s", "0": "0s"} {
		d, err := parseDuration(in)
		if err != nil || d.String() != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1h", "-2d", "soon", "1e30d", "NaNd", "-Infd"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) succeeded", in)
		}
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	f := newFlags(&env{}, "pgtask x", "", "")
	n := f.Int("n", 0, "")
	pos, err := f.parse([]string{"a", "--n", "3", "b", "--", "--n", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if *n != 3 || strings.Join(pos, ",") != "a,b,--n,c" {
		t.Fatalf("n=%d positional=%q", *n, pos)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":                          "plain",
		"postgres://u@/db?host=/tmp&x=1": "'postgres://u@/db?host=/tmp&x=1'",
		"it's":                           `'it'\''s'`,
		"":                               "''",
		"Authorization: Bearer abc":      "'Authorization: Bearer abc'",
		"postgres://u@h:5432/db":         "postgres://u@h:5432/db",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestDecimalFlags: integers are read in base 10, leading zeros included; a value that
// begins with a dash is a value, not a second flag; a list flag may be repeated.
func TestDecimalFlags(t *testing.T) {
	t.Parallel()
	f := newFlags(&env{}, "pgtask x", "", "")
	n := f.Int("n", 0, "")
	m := f.Int64("m", 7, "")
	p := f.Int("p", 0, "")
	hosts := &listValue{}
	f.Var(hosts, "host", "")
	if *m != 7 {
		t.Fatalf("default m=%d, want 7", *m)
	}
	if _, err := f.parse([]string{"--n", "010", "--m=000016", "--p", "-5", "--host", "a", "--host", "b,c"}); err != nil {
		t.Fatal(err)
	}
	if *n != 10 || *m != 16 || *p != -5 || hosts.String() != "a,b,c" {
		t.Fatalf("n=%d m=%d p=%d hosts=%q, want 10 16 -5 a,b,c", *n, *m, *p, hosts.String())
	}
	g := newFlags(&env{}, "pgtask x", "", "")
	g.Int("n", 0, "")
	if _, err := g.parse([]string{"--n", "-n"}); err == nil || !strings.Contains(err.Error(), "--n: invalid value \"-n\"") {
		t.Fatalf("--n -n: err = %v, want -n taken as --n's (bad) value", err)
	}
}
