package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

const pushAbout = `
Pushes one task (IDENTIFIER and optional INPUT on the command line) or, without an
IDENTIFIER, one task per line of standard input, in batches of --batch-size lines (one
statement each; every batch commits on its own). A line is either

  identifier<TAB>input        (or just: identifier)
  {"identifier": "id", "input": "text or any JSON", "priority": 5, "delay": "5s",
   "reference": "r", "suspended": false, "key": "tenant-7"}

where "identifier" is required and, instead of "delay", "not_before" may give a time
("2024-05-01T12:00:00Z"; not both). Blank lines are skipped. The flags --priority,
--delay, --reference, --suspended and --key are the defaults of every line; a JSON
line's fields override them ("not_before" overrides --delay). A JSON "input" that is not
a string is stored as its JSON text.

--insertion decides what happens to older tasks of the same identifier:
  append     keep them
  supersede  older READY tasks become REDUNDANT
  replace    older READY..SUCCEEDED tasks become REDUNDANT
  delete     older tasks (except ACTIVE ones) are deleted`

const (
	// pushBatchDefault is the default --batch-size, and the most lines whose room is
	// reserved before they are read.
	pushBatchDefault = 1000
	// pushBatchMax is the largest --batch-size. The repository has no limit of its own
	// on one push, but a batch is one statement with an array per column, held whole in
	// memory here and in the server, and one transaction that locks what it replaces:
	// beyond some tens of thousands of tasks a larger batch saves nothing measurable, and
	// a mistyped size would exhaust the memory (2000000000) or overflow (a 64-bit
	// maximum) before it failed.
	pushBatchMax = 100_000
)

// pushLine is one JSON line on standard input.
type pushLine struct {
	Identifier *string         `json:"identifier"`
	Input      json.RawMessage `json:"input"`
	Priority   *int16          `json:"priority"` // the column's range, so that wire names it
	Delay      *string         `json:"delay"`
	NotBefore  *string         `json:"not_before"` // parsed here, to name the field when it is bad
	Reference  *string         `json:"reference"`
	Suspended  *bool           `json:"suspended"`
	Key        *string         `json:"key"`
}

func runPush(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask push", "--topic T [flags] [IDENTIFIER [INPUT]]", pushAbout)
	url := f.databaseURL()
	topic := f.String("topic", "", "`TOPIC` to push to (required)")
	insertionName := f.String("insertion", "append", "insertion `MODE`: append, replace, supersede or delete")
	delay := f.duration("delay", 0, "do not poll the task before this `DURATION` has passed")
	priorityFlag := f.Int("priority", 0, "`N` in -32768..32767; lower is polled first")
	reference := f.String("reference", "", "optional reference `TEXT` (e.g. the sequence of the task that caused this one)")
	suspended := f.Bool("suspended", false, "push SUSPENDED: the task waits for a junction or revival")
	batchSize := f.Int("batch-size", pushBatchDefault, fmt.Sprintf("lines (`N`, at most %d) per push when reading standard input", pushBatchMax))
	key := f.String("key", "", "concurrency `KEY` (a tenant, a customer) for the topic's per-key limit and fair polling")
	pos, err := f.args(args, 0, 2, "")
	if err != nil {
		return err
	}
	if err := f.need("topic"); err != nil {
		return err
	}
	insertion, err := f.parseInsertion("insertion", *insertionName)
	if err != nil {
		return err
	}
	priority, err := f.checkPriority(*priorityFlag)
	if err != nil {
		return err
	}
	if len(pos) > 0 && f.given("batch-size") {
		return f.usagef("--batch-size applies to the lines of standard input, not to an IDENTIFIER given as an argument")
	}
	if *batchSize < 1 {
		return f.usagef("--batch-size: %d is below 1", *batchSize)
	}
	if *batchSize > pushBatchMax {
		return f.usagef("--batch-size: %d is above %d", *batchSize, pushBatchMax)
	}
	if err := repository.ValidateFilter(repository.TaskFilter{Reference: *reference}); err != nil {
		return f.usagef("--reference: %s", stripInvalid(err))
	}
	if err := repository.ValidateConcurrencyKey(*key); err != nil {
		return f.usagef("--key: %s", stripInvalid(err))
	}
	defaults := repository.Creation{Reference: *reference, Suspended: *suspended, Priority: priority, Delay: *delay, ConcurrencyKey: *key}

	var single *repository.Creation
	if len(pos) > 0 {
		c := defaults
		c.Identifier = pos[0]
		if len(pos) > 1 {
			c.Input = pos[1]
		}
		if err := checkCreation(c); err != nil {
			return f.usagef("%v", err)
		}
		single = &c
	}

	conn, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer conn.Close()

	if single != nil {
		tasks, err := conn.repo.Push(ctx, conn.pool, *topic, insertion, *single)
		if repository.Uncertain(err) {
			return fmt.Errorf("%w (its answer did not come: the task may have been pushed; "+
				"see with `pgtask list --topic %s --identifier %s`, a task created just now, before pushing it again)", err, shellQuote(*topic), shellQuote(single.Identifier))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "pushed 1 task to topic %q: sequence %d\n", *topic, tasks[0].Sequence)
		return nil
	}

	if file, ok := e.stdin.(*os.File); ok {
		if fi, err := file.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(e.stderr, "pgtask push: reading tasks from standard input, one per line; end with Ctrl-D")
		}
	}
	var (
		pushed      int
		first, last int64
		batch       = make([]repository.Creation, 0, min(*batchSize, pushBatchDefault))
		batchStart  int // the input line of the batch's first task
		batchEnd    int // the input line of the batch's last task
		through     int // the input line of the last task pushed
		// the batch whose push may or may not have been committed (its answer lost
		// with the connection): its input lines, and its first task's identifier
		unknownFrom, unknownTo int
		unknownID              string
	)
	// A signal stops the reading, never a push under way: the batch read so far is
	// pushed, and the message says where the input stopped. A push that has not
	// answered pushFlushGrace after the signal is cancelled.
	pushCtx, cancelPush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelPush()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(pushFlushGrace, cancelPush) })
	defer stopGrace()
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		tasks, err := conn.repo.Push(pushCtx, conn.pool, *topic, insertion, batch...)
		if repository.Uncertain(err) {
			unknownFrom, unknownTo, unknownID = batchStart, batchEnd, batch[0].Identifier
		}
		if err != nil {
			return err
		}
		batch = batch[:0]
		through = batchEnd
		if len(tasks) > 0 {
			if first == 0 {
				first = tasks[0].Sequence
			}
			last = tasks[len(tasks)-1].Sequence
		}
		pushed += len(tasks)
		return nil
	}
	partial := func(err error) error {
		if unknownTo > 0 {
			// a batch is one statement: all of its tasks were pushed, or none
			done := "nothing pushed before it"
			if pushed > 0 {
				done = fmt.Sprintf("%d tasks pushed before it, sequences %d..%d, standard input lines 1..%d", pushed, first, last, through)
			}
			return fmt.Errorf("%w (%s; the answer to the batch of lines %d..%d did not come: "+
				"it may have been pushed, all of it or none; see with `pgtask list --topic %s --identifier %s` (line %d's task, created just now) "+
				"before pushing those lines again; the lines after %d were not pushed)",
				err, done, unknownFrom, unknownTo, shellQuote(*topic), shellQuote(unknownID), unknownFrom, unknownTo)
		}
		if pushed == 0 {
			return fmt.Errorf("%w (nothing pushed: resume at standard input line 1)", err)
		}
		return fmt.Errorf("%w (%d tasks pushed before it, sequences %d..%d, standard input lines 1..%d: resume at line %d)",
			err, pushed, first, last, through, through+1)
	}
	stopReading := make(chan struct{})
	defer close(stopReading)
	lines := readLines(stopReading, e.stdin)
	var (
		signalled = ctx.Done()
		drained   <-chan time.Time // after a signal: the end of the lines already read
	)
read:
	for {
		var in inputLine
		select {
		case <-signalled:
			// the lines the reader has taken from the input come first
			signalled, drained = nil, time.After(pushDrain)
			continue
		case <-drained:
			if err := flush(); err != nil {
				return partial(fmt.Errorf("push: interrupted, and the batch read so far failed: %w", err))
			}
			return partial(fmt.Errorf("push: interrupted: %w", ctx.Err()))
		case l, ok := <-lines:
			if !ok {
				break read
			}
			in = l
		}
		if in.err != nil {
			return partial(fmt.Errorf("push: read standard input: %w", in.err))
		}
		if strings.TrimSpace(strings.TrimPrefix(in.text, "\uFEFF")) == "" {
			continue // blank, but for a byte order mark perhaps
		}
		c, err := parseLine(in.text, defaults)
		if err != nil {
			return partial(fmt.Errorf("push: standard input line %d: %w", in.number, err))
		}
		if len(batch) == 0 {
			batchStart = in.number
		}
		batch = append(batch, c)
		batchEnd = in.number
		if len(batch) == *batchSize {
			if err := flush(); err != nil {
				return partial(fmt.Errorf("push: batch ending at standard input line %d: %w", in.number, err))
			}
		}
	}
	if err := flush(); err != nil {
		return partial(fmt.Errorf("push: last batch: %w", err))
	}
	switch pushed {
	case 0:
		fmt.Fprintf(e.stdout, "no tasks on standard input: nothing pushed to topic %q\n", *topic)
	case 1:
		fmt.Fprintf(e.stdout, "pushed 1 task to topic %q: sequence %d\n", *topic, first)
	default:
		fmt.Fprintf(e.stdout, "pushed %d tasks to topic %q: sequences %d..%d\n", pushed, *topic, first, last)
	}
	return nil
}

// pushFlushGrace is how long a push under way when a signal comes, or the batch read
// before it, may take before it is cancelled.
const pushFlushGrace = 10 * time.Second

// pushDrain is how long after a signal the lines already read from the input are taken
// (they come at once; the input itself is not waited for).
const pushDrain = 200 * time.Millisecond

// inputLine is a line of standard input (text with its newline, if any), numbered from
// 1, or the error that ended the reading (never io.EOF).
type inputLine struct {
	text   string
	number int
	err    error
}

// readLines reads r's lines on a goroutine of their own, so that a signal can stop a
// push waiting for input; the channel closes at the end of the input. The goroutine
// stops once stop is closed and its pending line is not taken (a read blocked on a
// terminal or a pipe ends with the process).
func readLines(stop <-chan struct{}, r io.Reader) <-chan inputLine {
	lines := make(chan inputLine)
	go func() {
		defer close(lines)
		br := bufio.NewReader(r)
		for number := 1; ; number++ {
			text, err := br.ReadString('\n')
			if errors.Is(err, io.EOF) {
				err = nil
				if text == "" {
					return
				}
			}
			select {
			case lines <- inputLine{text: text, number: number, err: err}:
			case <-stop:
				return
			}
			if err != nil || !strings.HasSuffix(text, "\n") {
				return
			}
		}
	}()
	return lines
}

// parseLine parses one line of standard input into a creation based on defaults.
func parseLine(line string, defaults repository.Creation) (repository.Creation, error) {
	// a byte order mark, which editors on Windows write at the start of a file, would
	// make a JSON line a TSV one whose identifier is the whole text
	line = strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "\uFEFF")
	c := defaults
	if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "{") {
		var pl pushLine
		if err := wire.DecodeObject([]byte(trimmed), &pl); err != nil {
			return c, fmt.Errorf("bad JSON: %w", err)
		}
		if pl.Identifier == nil || *pl.Identifier == "" {
			return c, errors.New(`"identifier" is missing or empty`)
		}
		c.Identifier = *pl.Identifier
		if len(pl.Input) > 0 && !bytes.Equal(pl.Input, []byte("null")) {
			var s string
			if err := json.Unmarshal(pl.Input, &s); err == nil {
				c.Input = s
			} else {
				c.Input = string(pl.Input)
			}
		}
		if pl.Priority != nil {
			c.Priority = *pl.Priority
		}
		if pl.Delay != nil && pl.NotBefore != nil {
			// as the REST API refuses it: which one was meant?
			return c, errors.New(`give at most one of "delay" and "not_before"`)
		}
		if pl.Delay != nil {
			d, err := parseDuration(*pl.Delay)
			if err != nil {
				return c, fmt.Errorf(`"delay": %q: %w`, *pl.Delay, err)
			}
			c.Delay = d
		}
		if pl.NotBefore != nil {
			// The line's time replaces --delay. The zero time would mean "no not-before"
			// to the repository, and so --delay: it is the distant past, at once, as the
			// REST API takes it.
			at, err := time.Parse(time.RFC3339Nano, *pl.NotBefore)
			if err != nil {
				return c, fmt.Errorf(`"not_before": %q is not an RFC 3339 time such as "2030-01-02T15:04:05Z"`, *pl.NotBefore)
			}
			c.NotBefore, c.Delay = at, 0
			if c.NotBefore.IsZero() {
				c.NotBefore = time.Unix(0, 0)
			}
		}
		if pl.Reference != nil {
			c.Reference = *pl.Reference
		}
		if pl.Suspended != nil {
			c.Suspended = *pl.Suspended
		}
		if pl.Key != nil {
			c.ConcurrencyKey = *pl.Key
		}
	} else {
		c.Identifier, c.Input, _ = strings.Cut(line, "\t")
	}
	return c, checkCreation(c)
}

// checkCreation checks what the repository would refuse (the same limits as every
// route of the REST API), so that a bad line is named by its line number rather than its
// position in a batch.
func checkCreation(c repository.Creation) error {
	if err := c.Validate(); err != nil {
		return errors.New(stripInvalid(err))
	}
	return nil
}
