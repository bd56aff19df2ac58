package pgtasktest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// Want describes a pushed task for RequirePushed and its kin. Topic and Identifier are
// required; every other field, when set, must match too.
type Want struct {
	// Topic is the task's topic.
	Topic string
	// Identifier is the task's identifier.
	Identifier string
	// Input, when not empty, is the task's input: compared as JSON when both are JSON
	// objects or arrays (so key order and spacing do not matter), as text otherwise (an
	// input "1.10" does not match "1.1"). Numbers inside compare by value and by whether
	// they are written as integers, as a handler decoding them into an int
	// (processor.Typed) tells them apart: {"n": 1.50} matches {"n": 1.5}, but {"n": 2.0}
	// does not match {"n": 2}, nor {"n": 1e+06} {"n": 1000000}.
	Input string
	// Reference, when not empty, is the task's reference.
	Reference string
	// Priority, when not nil, is the task's priority.
	Priority *int16
	// States, when not empty, lists the states the task may be in (READY for a task that
	// nothing processed yet, SUSPENDED for one pushed suspended).
	States []repository.State
}

// RequirePushed fails the test unless exactly one task matches want, and returns it. It
// reads through h: a pool sees committed tasks, the transaction that pushed them sees
// its own (RequirePushedTx). The failure message lists the tasks of want's topic.
func RequirePushed(ctx context.Context, tb testing.TB, h repository.Handle, want Want) repository.Task {
	tb.Helper()
	// the tasks of want's identifier: an index probe, where a test checking each of N
	// tasks read the whole topic N times; the whole topic only for a failure's listing
	matches := want.filter(readTopicWith(ctx, tb, h, "RequirePushed", want, repository.TaskFilter{Identifier: want.Identifier}))
	switch len(matches) {
	case 1:
		return matches[0]
	case 0:
		tasks := readTopic(ctx, tb, h, "RequirePushed", want)
		tb.Fatalf("pgtasktest.RequirePushed: no task of topic %q matches %v\n%s", want.Topic, want, listing("topic "+strconv.Quote(want.Topic)+" holds", tasks))
	default:
		tb.Fatalf("pgtasktest.RequirePushed: %d tasks of topic %q match %v, want exactly one (narrow it with Input, Reference, Priority or States)\n%s",
			len(matches), want.Topic, want, listing("matching", matches))
	}
	return repository.Task{}
}

// RequirePushedTx is RequirePushed inside the transaction that pushed the tasks, before
// it commits (or after the test's code returned it uncommitted).
func RequirePushedTx(ctx context.Context, tb testing.TB, tx pgx.Tx, want Want) repository.Task {
	tb.Helper()
	return RequirePushed(ctx, tb, tx, want)
}

// RequireManyPushed fails the test unless the tasks of the topics named in wants are
// exactly wants, in push (sequence) order: as many, each matching its Want. It returns
// them. The failure message sets what the topics hold beside what was wanted.
func RequireManyPushed(ctx context.Context, tb testing.TB, h repository.Handle, wants ...Want) []repository.Task {
	tb.Helper()
	if len(wants) == 0 {
		tb.Fatal("pgtasktest.RequireManyPushed: no task wanted")
	}
	var topics []string
	var all []repository.Task
	for _, w := range wants {
		if !slices.Contains(topics, w.Topic) {
			topics = append(topics, w.Topic)
			all = append(all, readTopic(ctx, tb, h, "RequireManyPushed", w)...)
		}
	}
	slices.SortFunc(all, func(a, b repository.Task) int { return cmp.Compare(a.Sequence, b.Sequence) })
	ok := len(all) == len(wants)
	for i := 0; ok && i < len(wants); i++ {
		ok = wants[i].matches(all[i])
	}
	if !ok {
		var b strings.Builder
		fmt.Fprintf(&b, "pgtasktest.RequireManyPushed: topics %q hold %d tasks, want %d:\n", topics, len(all), len(wants))
		for i := range max(len(all), len(wants)) {
			mark, got, want := " ", "(none)", "(none)"
			if i < len(all) {
				got = describe(all[i])
			}
			if i < len(wants) {
				want = wants[i].String()
			}
			if i >= len(all) || i >= len(wants) || !wants[i].matches(all[i]) {
				mark = "✗"
			}
			fmt.Fprintf(&b, "  %s %d. got %s\n       want %s\n", mark, i+1, got, want)
		}
		tb.Fatal(b.String())
	}
	return all
}

// RequireManyPushedTx is RequireManyPushed inside the transaction that pushed the tasks.
func RequireManyPushedTx(ctx context.Context, tb testing.TB, tx pgx.Tx, wants ...Want) []repository.Task {
	tb.Helper()
	return RequireManyPushed(ctx, tb, tx, wants...)
}

// RequireNotPushed fails the test if a task matches want (a pushed task that was rolled
// back with its transaction does not), and when want's topic does not exist: a topic
// misspelt would otherwise hold no task and pass whatever the code under test pushed.
// Create the topic in the test's set-up when the code creates it lazily.
func RequireNotPushed(ctx context.Context, tb testing.TB, h repository.Handle, want Want) {
	tb.Helper()
	matches := want.filter(readTopicWith(ctx, tb, h, "RequireNotPushed", want, repository.TaskFilter{Identifier: want.Identifier}))
	if len(matches) > 0 {
		tb.Fatalf("pgtasktest.RequireNotPushed: %d tasks of topic %q match %v, want none\n%s", len(matches), want.Topic, want, listing("matching", matches))
	}
}

// newReader returns the Repository of one call of the kit (its owner name is never
// registered). One for each call: a Repository reads once whether its database is
// distributed on Citus, and a test binary may hold plain databases and distributed ones.
func newReader() *repository.Repository {
	r, err := repository.New(repository.Config{Owner: "pgtasktest"})
	if err != nil {
		panic(err) // a constant, valid configuration
	}
	return r
}

// readTopic returns every task of want's topic, by sequence.
func readTopic(ctx context.Context, tb testing.TB, h repository.Handle, fn string, want Want) []repository.Task {
	tb.Helper()
	return readTopicWith(ctx, tb, h, fn, want, repository.TaskFilter{})
}

// readTopicWith returns the tasks of want's topic that filter keeps, by sequence.
func readTopicWith(ctx context.Context, tb testing.TB, h repository.Handle, fn string, want Want, filter repository.TaskFilter) []repository.Task {
	tb.Helper()
	if want.Topic == "" || want.Identifier == "" {
		tb.Fatalf("pgtasktest.%s: Want.Topic and Want.Identifier are required (got %v)", fn, want)
	}
	var all []repository.Task
	cursor := repository.MinSequence
	reader := newReader()
	for {
		page, err := reader.Page(ctx, h, want.Topic, filter, cursor, 1000, repository.Forward)
		if errors.Is(err, repository.ErrUnknownTopic) {
			tb.Fatalf("pgtasktest.%s: topic %q does not exist (Repository.CreateTopic creates it)", fn, want.Topic)
		}
		if err != nil {
			tb.Fatalf("pgtasktest.%s: read topic %q: %v", fn, want.Topic, err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			return all
		}
		cursor = page[len(page)-1].Sequence
	}
}

// filter returns the tasks w matches.
func (w Want) filter(tasks []repository.Task) []repository.Task {
	var out []repository.Task
	for _, t := range tasks {
		if w.matches(t) {
			out = append(out, t)
		}
	}
	return out
}

// matches reports whether t is what w describes.
func (w Want) matches(t repository.Task) bool {
	return t.Topic == w.Topic && t.Identifier == w.Identifier &&
		(w.Input == "" || sameInput(t.Input, w.Input)) && (w.Reference == "" || t.Reference == w.Reference) &&
		(w.Priority == nil || t.Priority == *w.Priority) && (len(w.States) == 0 || slices.Contains(w.States, t.State))
}

// sameInput compares inputs as JSON when both are JSON objects or arrays, else as text:
// an input that is only a number, a string, true, false or null as JSON is text a
// handler may read as such (a version "1.10", which as a JSON number is 1.1).
func sameInput(got, want string) bool {
	g, gerr := decodeJSON(got)
	w, werr := decodeJSON(want)
	if gerr == nil && werr == nil && structured(g) && structured(w) {
		return reflect.DeepEqual(g, w)
	}
	return got == want
}

// structured reports whether a decoded JSON value is an object or an array.
func structured(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

// decodeJSON decodes one JSON value, its numbers as written (json.Number: as float64,
// 9007199254740993 and 9007199254740992 were one number) but normalized, so that 1.50
// and 1.5 still match (not 1.0 and 1: normalizeNumbers).
func decodeJSON(text string) (any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	// anything after the value but spaces (d.More passed a stray "}" or "]"; a handler's
	// json.Unmarshal refuses it)
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the JSON value")
	}
	return normalizeNumbers(v), nil
}

// exactNumber is a JSON number's exact value, as big.Rat writes it ("3/2", "1"), marked
// when it is written as an integer ("1 integer"): a type of its own, so that it never
// equals the string "1".
type exactNumber string

// normalizeNumbers replaces each json.Number with its exact value, and whether it is
// written as an integer (without a fraction or an exponent): a handler decoding into an
// int takes 2 and refuses 2.0 and 2e0, so those must not match.
func normalizeNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		text := v.String()
		exact := text
		if r, ok := new(big.Rat).SetString(text); ok {
			exact = r.RatString()
		}
		if !strings.ContainsAny(text, ".eE") {
			exact += " integer"
		}
		return exactNumber(exact)
	case []any:
		for i := range v {
			v[i] = normalizeNumbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = normalizeNumbers(v[k])
		}
	}
	return v
}

// String describes the wanted task, as failure messages show it.
func (w Want) String() string {
	parts := []string{fmt.Sprintf("identifier %q", w.Identifier)}
	if w.Input != "" {
		parts = append(parts, fmt.Sprintf("input %s", w.Input))
	}
	if w.Reference != "" {
		parts = append(parts, fmt.Sprintf("reference %q", w.Reference))
	}
	if w.Priority != nil {
		parts = append(parts, fmt.Sprintf("priority %d", *w.Priority))
	}
	if len(w.States) > 0 {
		parts = append(parts, fmt.Sprintf("state in %v", w.States))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// describe is one task in a failure message.
func describe(t repository.Task) string {
	s := fmt.Sprintf("task %d: identifier %q, %v", t.Sequence, t.Identifier, t.State)
	if t.Input != "" {
		s += ", input " + truncate(t.Input)
	}
	if t.Reference != "" {
		s += fmt.Sprintf(", reference %q", t.Reference)
	}
	if t.Priority != 0 {
		s += fmt.Sprintf(", priority %d", t.Priority)
	}
	return s
}

func truncate(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// listing lists tasks (the first 20) for a failure message, after header.
func listing(header string, tasks []repository.Task) string {
	if len(tasks) == 0 {
		return header + " no task"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d tasks:", header, len(tasks))
	for i, t := range tasks {
		if i == 20 {
			fmt.Fprintf(&b, "\n  … and %d more", len(tasks)-i)
			break
		}
		b.WriteString("\n  " + describe(t))
	}
	return b.String()
}
