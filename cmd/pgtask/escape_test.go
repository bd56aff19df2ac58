package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/repository"
)

// controls are bytes a terminal acts on that no escaped output may hold: ESC, BEL, CR,
// backspace, and C1's CSI (U+009B) as UTF-8.
var controls = []string{"\x1b", "\x07", "\r", "\b", "\u009b", "\u202e"}

func wantNoControls(t *testing.T, what, out string) {
	t.Helper()
	for _, c := range controls {
		if strings.Contains(out, c) {
			t.Errorf("%s prints %q raw:\n%q", what, c, out)
		}
	}
}

// TestEscapes pushes an escape-laden task over REST, as an attacker with API access
// would, and checks what the operator's terminal gets from the CLI.
func TestEscapes(t *testing.T) {
	f := setup(t)
	// a topic of such a name is refused since migration 000042, but one made before
	// stays: registered here as task_topic_create did then
	if _, err := f.repo.Initialize(f.ctx, f.pool, "evil\x1b]0;owned\x07"); err == nil {
		t.Fatal("a topic named with escapes was created")
	}
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task_topic (topic, partition) VALUES ($1, task_bucket($1) || '_shared')`, "evil\x1b]0;owned\x07"); err != nil {
		t.Fatal(err)
	}
	api, err := rest.New(rest.Config{Pool: f.pool})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	const identifier = `esc\u001b[2J\u001b]0;pwned\u0007`
	status, body := request(t, http.MethodPost, srv.URL+"/topics/t/tasks", "",
		`{"identifier": "`+identifier+`", "input": "red \u001b[31m\r\nover\b\u009b1m\u202edraw", "reference": "r\u001b[5m"}`)
	if status != http.StatusCreated {
		t.Fatalf("push: %d %s", status, body)
	}
	evil := f.get(1)
	if !strings.Contains(evil.Identifier, "\x1b[2J") || !strings.Contains(evil.Input, "\x1b[31m") {
		t.Fatalf("the task was not stored with its escapes: %+v", evil)
	}
	if status, body := request(t, http.MethodPost, srv.URL+"/topics/t/tasks/1/cancel", "", `{"by": "mallory\u001b[8m"}`); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, body)
	}

	t.Run("ShowPrintsNoESC", func(t *testing.T) {
		out := f.ok("show", "--topic", "t", "1")
		wantNoControls(t, "show", out)
		wantContains(t, out, `esc\x1b[2J\x1b]0;pwned\x07`, `red \x1b[31m\r`, `over\x08\u009b1m\u202edraw`, `r\x1b[5m`, `cancelled by mallory\x1b[8m`)
	})
	t.Run("ListPrintsNoESC", func(t *testing.T) {
		out := f.ok("list", "--topic", "t")
		wantNoControls(t, "list", out)
		wantContains(t, out, `esc\x1b[2J`, `red \x1b[31m`)
	})
	t.Run("JSONKeepsTheTextButNoControlByte", func(t *testing.T) {
		for _, args := range [][]string{{"show", "--topic", "t", "1", "--json"}, {"list", "--topic", "t", "--json"}} {
			out := f.ok(args...)
			wantNoControls(t, strings.Join(args, " "), out)
			if !strings.Contains(out, `\u001b[2J`) || !strings.Contains(out, `\u009b1m`) {
				t.Errorf("%v: the escapes are not in the JSON:\n%s", args, out)
			}
			var doc any
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if !strings.Contains(fmt.Sprint(doc), "\x1b[2J") || !strings.Contains(fmt.Sprint(doc), "\u202e") {
				t.Errorf("%v: decoded JSON lost the identifier's or input's characters: %v", args, doc)
			}
		}
	})
	t.Run("TopicNamesAreEscaped", func(t *testing.T) {
		for _, args := range [][]string{{"stats"}, {"topic", "list"}, {"stats", "--json"}} {
			out := f.ok(args...)
			wantNoControls(t, strings.Join(args, " "), out)
		}
		wantContains(t, f.ok("topic", "list"), `evil\x1b]0;owned\x07`)
	})
	t.Run("RawPrintsTheStoredBytes", func(t *testing.T) {
		if out := f.ok("show", "--topic", "t", "1", "--raw"); !strings.Contains(out, "esc\x1b[2J\x1b]0;pwned\x07") || !strings.Contains(out, "\x1b[31m") {
			t.Errorf("show --raw lost the bytes:\n%q", out)
		}
		if out := f.ok("show", "--topic", "t", "1", "--input", "--raw"); out != evil.Input {
			t.Errorf("show --input --raw = %q, want exactly %q", out, evil.Input)
		}
		if out := f.ok("list", "--topic", "t", "--raw"); !strings.Contains(out, "\x1b[2J") {
			t.Errorf("list --raw lost the bytes:\n%q", out)
		}
	})
	t.Run("InputOnlyIsEscapedByDefault", func(t *testing.T) {
		out := f.ok("show", "--topic", "t", "1", "--input")
		wantNoControls(t, "show --input", out)
		if out != `red \x1b[31m\r`+"\n"+`over\x08\u009b1m\u202edraw`+"\n" {
			t.Errorf("show --input = %q", out)
		}
	})
	t.Run("ErrorsAreEscaped", func(t *testing.T) {
		var w bytes.Buffer
		if code := exitCode(errors.New("boom \x1b[2J from the database\r"), &w); code != 1 {
			t.Errorf("exit %d", code)
		}
		wantNoControls(t, "an error", w.String())
		wantContains(t, w.String(), `boom \x1b[2J from the database\r`)
	})
}

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in          string
		lines       bool
		cell, block string
	}{
		{"plain é 😀", false, "plain é 😀", "plain é 😀"},
		{"a\x1b[2Jb", false, `a\x1b[2Jb`, `a\x1b[2Jb`},
		{"a\nb\tc\r", false, `a\nb\tc\r`, "a\nb\tc\\r"},
		{"\x7f\u0085\u009b", false, `\x7f\u0085\u009b`, `\x7f\u0085\u009b`},
		{"\u202eevil\u2066\u2028", false, `\u202eevil\u2066\u2028`, `\u202eevil\u2066\u2028`},
		{"bad \xff\xfe utf8", false, `bad \xff\xfe utf8`, `bad \xff\xfe utf8`},
		{"\ufffd stays", false, "\ufffd stays", "\ufffd stays"},
	} {
		if got := escape(tc.in, false); got != tc.cell {
			t.Errorf("escape(%q, cell) = %q, want %q", tc.in, got, tc.cell)
		}
		if got := escape(tc.in, true); got != tc.block {
			t.Errorf("escape(%q, block) = %q, want %q", tc.in, got, tc.block)
		}
	}
}

// FuzzEscape checks that escaped text holds no character a terminal acts on, that it
// is valid UTF-8, and that text needing no escape is left alone.
func FuzzEscape(f *testing.F) {
	for _, seed := range []string{"", "plain", "a\x1b[2Jb", "\r\n\t", "\u009b\u202e", "\xff", "\ufffd"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, lines := range []bool{false, true} {
			got := escape(s, lines)
			for _, r := range got {
				if dangerous(r, lines) {
					t.Fatalf("escape(%q, %v) = %q holds %U", s, lines, got, r)
				}
			}
			if !utf8.ValidString(got) {
				t.Fatalf("escape(%q, %v) = %q is not UTF-8", s, lines, got)
			}
			if !needsEscape(s, lines) && got != s {
				t.Fatalf("escape(%q, %v) = %q changed text that needed nothing", s, lines, got)
			}
		}
		var out bytes.Buffer
		if err := (&printer{}).json(&out, map[string]string{"s": s}); err != nil {
			t.Fatal(err)
		}
		wantNoControls(t, "json", out.String())
		var back map[string]string
		if err := json.Unmarshal(out.Bytes(), &back); err != nil {
			t.Fatalf("json of %q does not decode: %v\n%s", s, err, out.String())
		}
		plain, _ := json.Marshal(s) // what encoding/json alone makes of s
		var want string
		if err := json.Unmarshal(plain, &want); err != nil {
			t.Fatal(err)
		}
		if back["s"] != want {
			t.Fatalf("json of %q decodes to %q, want %q", s, back["s"], want)
		}
	})
}

// TestPushRefusesWhatRESTRefuses checks the CLI applies the API's limits and UTF-8 rule.
func TestPushRefusesWhatRESTRefuses(t *testing.T) {
	f := setup(t)
	for name, tc := range map[string]struct {
		stdin, want string
	}{
		"InvalidUTF8InAJSONLine":    {"{\"identifier\": \"a\", \"input\": \"\xff\"}\n", "not valid UTF-8"},
		"UnpairedSurrogate":         {`{"identifier": "a\ud800"}` + "\n", "unpaired"},
		"InvalidUTF8InATabLine":     {"a\tb\xffc\n", "input is not valid UTF-8"},
		"IdentifierTooLong":         {strings.Repeat("i", repository.MaxIdentifierLength+1) + "\n", "at most 500"},
		"ReferenceTooLongInJSON":    {`{"identifier": "a", "reference": "` + strings.Repeat("r", 501) + `"}` + "\n", "reference is 501"},
		"SecondLineOfTwoRefusesAll": {"ok\n\xff\n", "line 2"},
		"NULInATabLine":             {"ok\na\tb\x00c\n", "line 2: input contains a NUL byte"},
		"NULInAJSONIdentifier":      {`{"identifier": "a\u0000"}` + "\n", "contains a NUL byte"},
	} {
		t.Run(name, func(t *testing.T) {
			r := f.cliIn(tc.stdin, "push", "--topic", "t")
			wantRuntime(t, r, nil)
			wantContains(t, r.err.Error(), tc.want)
		})
	}
	if tasks, err := f.repo.Page(f.ctx, f.pool, "t", repository.TaskFilter{}, 0, 10, repository.Forward); err != nil || len(tasks) != 0 {
		t.Errorf("tasks after refused pushes: %d, %v; want none", len(tasks), err)
	}
}
