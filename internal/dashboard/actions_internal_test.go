package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestPartialFailure: an action that fails after some of its statements committed says
// how many tasks they changed, whatever the failure, even one whose text a 500 hides
// (a connection lost: the server's log has it); a failure that is not partial says
// only what failed.
func TestPartialFailure(t *testing.T) {
	t.Parallel()
	s := &server{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	for _, c := range []struct {
		name   string
		err    error
		status int
		want   []string
	}{
		{"Lost", &partialError{err: io.ErrUnexpectedEOF, changed: 3000}, http.StatusInternalServerError,
			[]string{repository.ClientTextUnknown, "(after 3000 changed)"}},
		{"QueueFull", &partialError{err: repository.ErrQueueFull, changed: 1000}, http.StatusTooManyRequests,
			[]string{"queue", "(after 1000 changed)"}},
		{"WrongState", &partialError{err: repository.ErrWrongState}, http.StatusConflict,
			[]string{"(after 0 changed: tasks changed state meanwhile; apply again)"}},
		{"NotPartial", errors.New("lost"), http.StatusInternalServerError, []string{repository.ClientTextUnknown}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := s.action(func(*http.Request, []byte) (any, error) { return nil, c.err })
			r := httptest.NewRequest(http.MethodPost, Prefix+"topics/mail/bulk", strings.NewReader(`{}`))
			r.Header.Set("Content-Type", "application/json")
			r.SetPathValue("topic", "mail")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != c.status {
				t.Errorf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			for _, want := range c.want {
				if !strings.Contains(w.Body.String(), want) {
					t.Errorf("answer %s lacks %q", w.Body, want)
				}
			}
			if c.name == "NotPartial" && strings.Contains(w.Body.String(), "changed") {
				t.Errorf("answer %s says something changed", w.Body)
			}
		})
	}
}

// TestSessions: a session signs in until sessionLifetime after its login; a cookie
// altered anywhere, or signed for another token, signs nothing in; a logout revokes its
// session, not another, and its revocation is dropped once the session has expired.
func TestSessions(t *testing.T) {
	t.Parallel()
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSessions("s3cret")
	s.now = func() time.Time { return clock }
	old := s.start()
	if !s.valid(old) {
		t.Fatal("a new session is not valid")
	}
	other := newSessions("another")
	other.now = s.now
	at, rest, _ := strings.Cut(old, ".")
	for _, forged := range []string{"", old + "x", "x" + old, old[:len(old)-1], "9" + at + "." + rest, other.start(),
		strings.Replace(old, ".", "..", 1), at + ".." + rest} {
		if s.valid(forged) {
			t.Errorf("cookie %q signs in", forged)
		}
	}
	clock = clock.Add(sessionLifetime - time.Second)
	if !s.valid(old) {
		t.Fatal("a session expired before its lifetime")
	}
	clock = clock.Add(time.Second)
	if s.valid(old) {
		t.Fatal("a session is valid after its lifetime")
	}

	mine, yours := s.start(), s.start()
	if mine == yours {
		t.Fatal("two logins got the same cookie")
	}
	s.end(mine)
	if s.valid(mine) || !s.valid(yours) {
		t.Fatalf("after a logout: its session valid %v, another's %v; want false, true", s.valid(mine), s.valid(yours))
	}
	s.end("forged")
	clock = clock.Add(sessionLifetime)
	s.end(s.start())
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.revoked) != 1 {
		t.Fatalf("%d revocations kept, want the live one only", len(s.revoked))
	}
}

// TestIndentStart: the start of a large JSON text, read in part, is indented as
// json.Indent indents the whole; a text that is not JSON is not taken for it.
func TestIndentStart(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"a":1,"b":[1, 2,{}],"c":{"d":"x\"]}{,:y"},"e":[],"f":null}`, `[ {"k" : "v\\"} , true ]`, `{}`} {
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(doc), "", "  "); err != nil {
			t.Fatal(err)
		}
		if got := indentStart(doc); got != want.String() {
			t.Errorf("indentStart(%s) = %q, want %q", doc, got, want.String())
		}
		if !jsonStart(doc[:len(doc)/2]) {
			t.Errorf("%q is not taken for the start of JSON", doc[:len(doc)/2])
		}
	}
	for _, s := range []string{`{not json`, `{"a":1}}`, `[1,,`} {
		if jsonStart(s) {
			t.Errorf("%q is taken for the start of JSON", s)
		}
	}
}

// TestWithoutRefused: a bulk action's chunk goes again without the tasks its refusal
// names as gone or in a state the action does not apply to; a refusal that names a task
// still in such a state (a change raced the statement) or for another reason is not
// passed over, the chunk's tasks unchanged.
func TestWithoutRefused(t *testing.T) {
	keep := func(st repository.State) bool { return st == repository.Ready || st == repository.Active }
	refusal := func(problems ...repository.TaskProblem) error {
		return &repository.TaskError{Op: "cancel", Topic: "t", Problems: problems}
	}
	chunk := []int64{1, 2, 3}
	for _, c := range []struct {
		name string
		err  error
		left []int64
		ok   bool
	}{
		{"EndedMeanwhile", refusal(repository.TaskProblem{Sequence: 2, Err: repository.ErrWrongState, State: repository.Succeeded}), []int64{1, 3}, true},
		{"Gone", refusal(repository.TaskProblem{Sequence: 1, Err: repository.ErrUnknownTask}), []int64{2, 3}, true},
		{"Raced", refusal(repository.TaskProblem{Sequence: 1, Err: repository.ErrWrongState, State: repository.Ready, Detail: "changed concurrently"},
			repository.TaskProblem{Sequence: 2, Err: repository.ErrWrongState, State: repository.Ready, Detail: "changed concurrently"}), nil, false},
		{"NotOwned", refusal(repository.TaskProblem{Sequence: 3, Err: repository.ErrNotOwned, State: repository.Succeeded}), nil, false},
		{"AnotherError", repository.ErrQueueFull, nil, false},
	} {
		left, ok := withoutRefused(c.err, chunk, keep)
		if ok != c.ok || !slices.Equal(left, c.left) {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, left, ok, c.left, c.ok)
		}
	}
}
