package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

const listAbout = `
Lists the tasks of a topic, oldest first (or newest first with --backward), --limit at a
time. When more may follow, the last line says which --cursor gives the next page (the
cursor is exclusive: the page starts after it, or before it with --backward). In a topic
of many tasks, a page of a finished state that is rare among them (FILTERED among
SUCCEEDED) is searched --span sequences at a time: a page may then be short, or say
"no tasks", and still give a next --cursor to search on from.`

func runList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask list", "--topic T [flags]", listAbout)
	url := f.databaseURL()
	topic := f.String("topic", "", "`TOPIC` to list (required)")
	stateName := f.String("state", "", "only tasks in this `STATE` (READY, FAILED, ...)")
	identifier := f.String("identifier", "", "only tasks with this `IDENTIFIER`")
	reference := f.String("reference", "", "only tasks with this `REFERENCE`")
	cursor := f.Int64("cursor", 0, "start after (or with --backward before) this `SEQUENCE`")
	limit := f.Int("limit", 50, "at most `N` tasks")
	backward := f.Bool("backward", false, "newest first, paging towards older tasks")
	span := f.Int64("span", rest.ListSpanDefault, "with a finished --state, walk at most `N` sequences of a large topic a page (0: no bound)")
	asJSON := f.Bool("json", false, `print {"tasks": [...], "next_cursor": N} instead of a table`)
	p := f.rawFlag()
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := f.need("topic"); err != nil {
		return err
	}
	state, err := f.parseState("state", *stateName)
	if err != nil {
		return err
	}
	// An empty filter would list every task (a variable that came out empty), and a
	// script that takes the first task listed would act on an unrelated one.
	for name, value := range map[string]string{"identifier": *identifier, "reference": *reference} {
		if value == "" && f.given(name) {
			return f.usagef("--%s is empty: give one, or leave the flag out to list tasks whatever their %s", name, name)
		}
	}
	if err := repository.ValidateFilter(repository.TaskFilter{Identifier: *identifier, Reference: *reference}); err != nil {
		return f.usagef("%s", stripInvalid(err))
	}
	if *limit < 1 {
		return f.usagef("--limit: %d is below 1", *limit)
	}
	if *limit > rest.ListLimitMax {
		return f.usagef("--limit: %d is above %d, a page's most (page on with --cursor)", *limit, rest.ListLimitMax)
	}
	if *span < 0 {
		return f.usagef("--span: %d is negative", *span)
	}
	if f.given("cursor") && *cursor < 0 {
		return f.usagef("--cursor: %d is negative", *cursor)
	}
	direction, from := repository.Forward, repository.MinSequence
	if *backward {
		direction, from = repository.Backward, repository.MaxSequence
	}
	if f.given("cursor") {
		from = *cursor
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	// Excerpts, as the REST API lists: a page stays small whatever the tasks hold, and
	// "pgtask show" prints one task whole.
	// One task more than the page: a next cursor only when a task follows it, so that
	// a script paging on never makes a last call for an empty page — or when the walk
	// stopped at the span, the page short.
	tasks, more, err := c.repo.ExcerptsWithin(ctx, c.pool, *topic,
		repository.TaskFilter{State: state, Identifier: *identifier, Reference: *reference}, from, *limit+1, direction, *span)
	if err != nil {
		return err
	}
	var next *int64
	if len(tasks) > *limit {
		tasks = tasks[:*limit]
		n := tasks[len(tasks)-1].Sequence
		next = &n
	} else if more != 0 {
		next = &more
	}
	if *asJSON {
		out := struct {
			Tasks      []wire.Task `json:"tasks"`
			NextCursor *int64      `json:"next_cursor"`
		}{Tasks: make([]wire.Task, len(tasks)), NextCursor: next}
		for i, t := range tasks {
			out.Tasks[i] = wire.FromExcerpt(t)
		}
		return p.json(e.stdout, out)
	}
	pageOn := func() {
		if next == nil {
			return
		}
		flag := ""
		if *backward {
			flag = " --backward"
		}
		if len(tasks) < *limit {
			fmt.Fprintf(e.stdout, "searched as far as sequence %d; ", *next)
		}
		fmt.Fprintf(e.stdout, "next page: --cursor %d%s\n", *next, flag)
	}
	if len(tasks) == 0 {
		fmt.Fprintln(e.stdout, "no tasks")
		pageOn()
		return nil
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "SEQUENCE\tSTATE\tIDENTIFIER\tPRIORITY\tATTEMPT\tCREATED\tCOMPLETED\tINPUT\tOUTPUT")
	now := time.Now()
	for _, t := range tasks {
		state := t.State.String()
		if t.State == repository.Ready && t.NotBefore.After(now) {
			state += " (delayed)"
		}
		if t.Cancelled && t.State == repository.Active {
			state += " (cancelling)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", t.Sequence, state, p.cell(clip(t.Identifier, 40)),
			t.Priority, t.Attempt, formatTime(t.Created), formatTime(t.Completed), p.cell(clip(t.Input, 30)), p.cell(clip(t.Output, 30)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pageOn()
	return nil
}

// clip shows s on one line, cut to n characters.
func clip(s string, n int) string {
	if s == "" {
		return "-"
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n-1]) + "…"
	}
	return s
}

func runShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask show", "--topic T SEQUENCE [flags]", "Shows one task in full: input, output and the error of every failed attempt.")
	url := f.databaseURL()
	topic := f.String("topic", "", "`TOPIC` of the task (required)")
	asJSON := f.Bool("json", false, "print JSON")
	inputOnly := f.Bool("input", false, "print only the task's input, whole (with --raw: exactly as stored, no newline added)")
	p := f.rawFlag()
	pos, err := f.args(args, 1, 1, "task SEQUENCE")
	if err != nil {
		return err
	}
	if err := f.need("topic"); err != nil {
		return err
	}
	if *inputOnly && *asJSON {
		// the input alone is printed as it is: --json was ignored
		return f.usagef("--input prints the input as it is: give --json or --input, not both")
	}
	seqs, err := f.sequences(pos)
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	t, err := c.repo.Get(ctx, c.pool, *topic, seqs[0])
	if errors.Is(err, repository.ErrUnknownTask) {
		// say which is unknown: the topic (a typing mistake) or only the task
		if _, terr := c.repo.Topic(ctx, c.pool, *topic); terr != nil {
			return terr
		}
	}
	if err != nil {
		return err
	}
	switch {
	case *inputOnly && p.raw:
		_, err = io.WriteString(e.stdout, t.Input)
		return err
	case *inputOnly:
		fmt.Fprintln(e.stdout, p.block(t.Input))
		return nil
	}
	// what holds a READY task back, as REST's task says
	var waiting []string
	if t.State == repository.Ready {
		why, err := c.repo.Waiting(ctx, c.pool, *topic, t.Sequence)
		if err != nil {
			return err
		}
		waiting = wire.WaitingTexts(why)
	}
	if *asJSON {
		out := wire.FromTask(t)
		out.Waiting = waiting
		return p.json(e.stdout, out)
	}
	printTask(e.stdout, p, t)
	for i, text := range waiting {
		if i == 0 {
			fmt.Fprintln(e.stdout, "waiting:")
		}
		fmt.Fprintf(e.stdout, "  %s\n", p.block(text))
	}
	return nil
}

func printTask(w io.Writer, p *printer, t repository.Task) {
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	tw := table(w)
	fmt.Fprintf(tw, "topic:\t%s\n", p.cell(t.Topic))
	fmt.Fprintf(tw, "sequence:\t%d\n", t.Sequence)
	fmt.Fprintf(tw, "identifier:\t%s\n", p.cell(t.Identifier))
	fmt.Fprintf(tw, "state:\t%s (descent %s)\n", t.State, t.Descent)
	fmt.Fprintf(tw, "priority:\t%d\n", t.Priority)
	if t.Returned > 0 {
		fmt.Fprintf(tw, "attempt:\t%d (%d of them handed back without using the retry budget)\n", t.Attempt, t.Returned)
	} else {
		fmt.Fprintf(tw, "attempt:\t%d\n", t.Attempt)
	}
	fmt.Fprintf(tw, "owner:\t%s\n", p.cell(orDash(t.Owner)))
	fmt.Fprintf(tw, "created:\t%s\n", formatTime(t.Created))
	fmt.Fprintf(tw, "not before:\t%s\n", formatTime(t.NotBefore))
	fmt.Fprintf(tw, "completed:\t%s\n", formatTime(t.Completed))
	fmt.Fprintf(tw, "reference:\t%s\n", p.cell(orDash(t.Reference)))
	fmt.Fprintf(tw, "cancelled:\t%s\n", map[bool]string{false: "no", true: "yes"}[t.Cancelled])
	_ = tw.Flush()
	block := func(name, text string) {
		if text == "" {
			fmt.Fprintf(w, "%s: -\n", name)
			return
		}
		fmt.Fprintf(w, "%s:\n  %s\n", name, strings.ReplaceAll(strings.TrimRight(p.block(text), "\n"), "\n", "\n  "))
	}
	block("input", t.Input)
	block("output", t.Output)
	if len(t.Errors) > 0 {
		fmt.Fprintln(w, "errors:")
		for i, msg := range t.Errors {
			fmt.Fprintf(w, "  attempt %d: %s\n", i+1, strings.ReplaceAll(p.block(msg), "\n", "\n    "))
		}
	}
}

func runStats(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask stats", "[--topic T] [flags]", `
Shows, per topic, the number of READY (and of them, still delayed), ACTIVE, EXPIRED,
FAILED and SUSPENDED tasks, exact up to 100 000 (a larger count shows as 100000+), how
long the oldest pollable READY task has waited, and the planner's estimate of all rows.
Cheap even with millions of finished tasks.`)
	url := f.databaseURL()
	topic := f.String("topic", "", "only this `TOPIC`")
	asJSON := f.Bool("json", false, `print {"topics": [...]} with each topic's "stats" instead of a table`)
	p := f.rawFlag()
	if err := f.noArgs(args); err != nil {
		return err
	}
	if f.given("topic") {
		if *topic == "" {
			return f.usagef("--topic is empty: name a topic, or leave the flag out for every topic")
		}
		if err := f.need("topic"); err != nil {
			return err
		}
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	var only []string
	if *topic != "" {
		if _, err := c.repo.Topic(ctx, c.pool, *topic); err != nil {
			return err
		}
		only = []string{*topic}
	}
	topics, err := c.repo.StatsAll(ctx, c.pool, only...)
	if err != nil {
		return err
	}
	out := make([]wire.Topic, 0, len(topics))
	for _, t := range topics {
		out = append(out, wire.FromTopic(t.Topic, &t.Stats))
	}
	if *asJSON {
		return p.json(e.stdout, topicsJSON{out})
	}
	if len(out) == 0 {
		fmt.Fprintln(e.stdout, "no topics")
		return nil
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "TOPIC\tSTATUS\tREADY\tDELAYED\tACTIVE\tEXPIRED\tFAILED\tSUSPENDED\tOLDEST_READY\tROWS_ESTIMATE")
	for _, t := range topics {
		s, c := t.Stats, t.Stats.Capped
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.cell(t.Name), status(t.Active),
			atLeast(s.Ready, c.Ready), atLeast(s.Delayed, c.Delayed), atLeast(s.Active, c.Active),
			atLeast(s.Expired, c.Expired), atLeast(s.Failed, c.Failed), atLeast(s.Suspended, c.Suspended),
			shortDuration(s.OldestReady.Round(time.Second)), s.RowsEstimate)
	}
	return tw.Flush()
}
