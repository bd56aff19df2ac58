package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// FuzzParseLine checks a line of `pgtask push`'s standard input: it is refused with an
// error, or it becomes a creation the repository accepts whose texts are what the line
// holds (never rewritten, e.g. invalid UTF-8 into U+FFFD).
func FuzzParseLine(f *testing.F) {
	for _, seed := range []string{
		"id", "id\tinput", "id\tin\tput", "\t", "",
		`{"identifier": "a", "input": {"k": 1}, "priority": -3, "delay": "2d", "reference": "r", "suspended": true}`,
		`{"identifier": "a", "not_before": "2030-01-02T03:04:05Z"}`,
		`{"identifier": "a\ud800"}`, "{\"identifier\": \"\xff\"}", `{"identifier": ""}`, `{"identifier": "a"} {}`,
		`{"identifier": "a", "priority": 40000}`, `{"identifier": "a", "delay": "-1s"}`, "a\xffb\tc",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c, err := parseLine(line, repository.Creation{Priority: 7})
		if err != nil {
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("parseLine(%q) = %+v, which the repository refuses: %v", line, c, verr)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "{") {
			if wire.CheckText([]byte(line)) != nil {
				t.Fatalf("parseLine(%q) accepted JSON that is not UTF-8", line)
			}
			return
		}
		if !strings.HasPrefix(strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "\uFEFF"), c.Identifier) || !strings.Contains(line, c.Input) {
			t.Fatalf("parseLine(%q) = identifier %q input %q: not the line's text", line, c.Identifier, c.Input)
		}
	})
}

// TestParseLineByteOrderMark: a line starting with a byte order mark (a file an editor
// on Windows wrote) is read without it: a JSON line was taken for a TSV one, its
// identifier the whole text, mark included.
func TestParseLineByteOrderMark(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{"\uFEFF{\"identifier\":\"bom\"}\n": "bom", "\uFEFFid\tinput": "id"} {
		c, err := parseLine(line, repository.Creation{})
		if err != nil || c.Identifier != want {
			t.Errorf("parseLine(%q) = identifier %q, %v; want %q", line, c.Identifier, err, want)
		}
	}
}

// TestParseLineNotBefore: a bad not_before is named, with what it wants (encoding/json
// said `parsing time "2024-05-01" as "2006-01-02T15:04:05Z07:00"`, and for a number
// "Time.UnmarshalJSON: input is not a JSON string").
func TestParseLineNotBefore(t *testing.T) {
	t.Parallel()
	for line, fragment := range map[string]string{
		`{"identifier":"q","not_before":"2024-05-01"}`: `"not_before": "2024-05-01" is not an RFC 3339 time`,
		`{"identifier":"q","not_before":5}`:            `field "not_before": got a JSON number`,
	} {
		if _, err := parseLine(line, repository.Creation{}); err == nil || !strings.Contains(err.Error(), fragment) {
			t.Errorf("parseLine(%s) = %v, want an error mentioning %q", line, err, fragment)
		}
	}
	c, err := parseLine(`{"identifier":"q","not_before":"2030-01-02T03:04:05Z"}`, repository.Creation{Delay: time.Hour})
	if err != nil || !c.NotBefore.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) || c.Delay != 0 {
		t.Errorf("parseLine of a good not_before = %+v, %v", c, err)
	}
}

// FuzzParseDuration checks durations as flags and JSON lines give them: an error or a
// duration that is not negative.
func FuzzParseDuration(f *testing.F) {
	for _, seed := range []string{"0", "90s", "1h30m", "7d", "1.5d", "-1s", "-1d", "NaNd", "1e300d", "d", "", "9223372036854775807ns"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		if err == nil && d < 0 {
			t.Fatalf("parseDuration(%q) = %v, negative", s, d)
		}
		if err == nil && !strings.HasSuffix(s, "d") {
			if want, perr := time.ParseDuration(s); perr != nil || want != d {
				t.Fatalf("parseDuration(%q) = %v, time.ParseDuration says %v, %v", s, d, want, perr)
			}
		}
	})
}

// FuzzCommandLine runs the commands that need a database with fuzzed arguments and no
// database URL: every value is parsed and checked, and the run ends in a usage error
// (exit 2), or in help, before anything connects. Nothing may panic or fail otherwise.
func FuzzCommandLine(f *testing.F) {
	for _, seed := range [][4]string{
		{"push", "--topic", "t", "id"},
		{"push", "--priority", "99999", "x"},
		{"push", "--delay", "-5s", "--topic=t"},
		{"list", "--limit", "0", "--topic=t"},
		{"list", "--state", "DONE", "--cursor=-1"},
		{"show", "--topic", "t", "abc"},
		{"revive", "--reset", "--state", "READY"},
		{"revive", "--recreate", "sideways", "1"},
		{"cancel", "--topic", "t", "0"},
		{"purge", "--from", "2024-13-01", "--topic=t"},
		{"topic add", "--max-attempts", "0", "t"},
		{"topic set", "--backoff-base", "1x", "t"},
		{"expire", "--timeout", "7d", ""},
		{"stats", "--raw", "--json", "--help"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	commands := map[string]bool{"push": true, "list": true, "show": true, "revive": true, "cancel": true, "purge": true,
		"topic add": true, "topic set": true, "topic list": true, "topic destroy": true, "expire": true, "stats": true, "pause": true}
	f.Fuzz(func(t *testing.T, command, a, b, c string) {
		if !commands[command] {
			return
		}
		e := &env{stdin: strings.NewReader(""), stdout: discard{}, stderr: discard{}, lookupenv: lookupIn(nil)}
		err := runEnv(context.Background(), e, append(strings.Fields(command), a, b, c))
		var ue *usageError
		if err != nil && !errors.As(err, &ue) && !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("pgtask %s %q %q %q without a database: %v, want a usage error", command, a, b, c, err)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
