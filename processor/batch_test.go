package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// batchOf returns a batch outside a processor of tasks 1..n of topic "t".
func batchOf(t *testing.T, n int) *processor.Batch {
	t.Helper()
	tasks := make([]repository.Task, n)
	for i := range tasks {
		tasks[i] = repository.Task{Topic: "t", Sequence: int64(i + 1), Identifier: string(rune('a' + i)), State: repository.Active, Attempt: 1}
	}
	b, err := processor.NewBatch(t.Context(), "t", tasks)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// doneWithin waits for b to be fully decided.
func doneWithin(t *testing.T, b *processor.Batch) processor.Outcome {
	t.Helper()
	select {
	case <-b.Done():
	case <-time.After(time.Minute):
		t.Fatalf("batch not decided: %+v", b.Outcome())
	}
	return b.Outcome()
}

// The batch contract, without a database: what each report does to a batch.
func TestBatchContract(t *testing.T) {
	t.Parallel()
	t.Run("DecideDecidesOneTaskAndTheFirstDecisionStands", func(t *testing.T) {
		b := batchOf(t, 2)
		if err := b.Decide(1, repository.Succeed("one")); err != nil {
			t.Fatal(err)
		}
		if err := b.Decide(1, repository.Skip("again")); !errors.Is(err, processor.ErrAlreadyReported) {
			t.Errorf("second decision: %v, want ErrAlreadyReported", err)
		}
		if err := b.Decide(99, repository.Succeed("")); !errors.Is(err, processor.ErrForeignDecision) {
			t.Errorf("foreign decision: %v, want ErrForeignDecision", err)
		}
		o := b.Outcome()
		if o.Decisions[1] != repository.Succeed("one") || !reflect.DeepEqual(o.Undecided, []int64{2}) || o.Failed != nil {
			t.Errorf("outcome %+v, want task 1 succeeded, 2 undecided", o)
		}
		select {
		case <-b.Done():
			t.Fatal("Done closed with a task undecided")
		default:
		}
	})
	t.Run("CompleteDecidesTheRestAndIgnoresDecidedTasks", func(t *testing.T) {
		b := batchOf(t, 3)
		_ = b.Decide(1, repository.Succeed("first"))
		if err := b.Complete(map[int64]repository.Decision{1: repository.Skip("ignored"), 2: repository.Suspend("wait")}); err != nil {
			t.Fatal(err)
		}
		o := doneWithin(t, b)
		if o.Decisions[1].Message != "first" || o.Decisions[2] != repository.Suspend("wait") ||
			o.Decisions[3].Result != repository.Failure || !strings.Contains(o.Decisions[3].Message, "no decision") {
			t.Errorf("decisions %+v", o.Decisions)
		}
		if err := b.Complete(nil); !errors.Is(err, processor.ErrAlreadyReported) {
			t.Errorf("second Complete: %v, want ErrAlreadyReported", err)
		}
		if err := b.Fail(errors.New("late")); !errors.Is(err, processor.ErrAlreadyReported) {
			t.Errorf("Fail after Complete: %v, want ErrAlreadyReported", err)
		}
	})
	t.Run("ForeignDecisionsFailTheUndecidedTasks", func(t *testing.T) {
		b := batchOf(t, 2)
		_ = b.Decide(1, repository.Succeed(""))
		err := b.Complete(map[int64]repository.Decision{2: repository.Succeed(""), 7: repository.Succeed("")})
		if !errors.Is(err, processor.ErrForeignDecision) || !strings.Contains(err.Error(), "[7]") {
			t.Fatalf("err = %v, want ErrForeignDecision naming task 7", err)
		}
		o := doneWithin(t, b)
		if o.Decisions[1].Result != repository.Success || o.Decisions[2].Result != repository.Failure || !errors.Is(o.Failed, processor.ErrForeignDecision) {
			t.Errorf("outcome %+v, want task 1 kept, 2 failed, the batch failed with ErrForeignDecision", o)
		}
	})
	t.Run("FailFailsTheUndecidedTasksAndDropsTheirFollowUps", func(t *testing.T) {
		b := batchOf(t, 2)
		_ = b.Push("next", repository.Append, repository.Creation{Identifier: "with-1"})
		_ = b.Decide(1, repository.Succeed(""))
		_ = b.Push("next", repository.Append, repository.Creation{Identifier: "dropped"})
		if err := b.Fail(errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		o := doneWithin(t, b)
		if o.Decisions[1].Result != repository.Success || o.Decisions[2] != repository.Fail(errors.New("boom")) || o.Failed == nil {
			t.Errorf("outcome %+v", o)
		}
		if len(o.FollowUps) != 1 || o.FollowUps[0].Creations[0].Identifier != "with-1" || !o.FollowUps[0].Push {
			t.Errorf("follow-ups %+v, want only the one declared before the first decision", o.FollowUps)
		}
	})
	t.Run("FollowUpsAfterTheLastDecisionAreRefused", func(t *testing.T) {
		b := batchOf(t, 1)
		_ = b.Decide(1, repository.Succeed(""))
		if err := b.Push("next", repository.Append, repository.Creation{Identifier: "x"}); !errors.Is(err, processor.ErrAlreadyReported) {
			t.Errorf("push: %v, want ErrAlreadyReported", err)
		}
		if err := b.Junction("next", repository.Singular, []string{"x"}); !errors.Is(err, processor.ErrAlreadyReported) {
			t.Errorf("junction: %v, want ErrAlreadyReported", err)
		}
	})
	t.Run("ABatchMadeByHandWorks", func(t *testing.T) {
		// Once a nil pointer dereference in Complete.
		b := &processor.Batch{Topic: "t", Tasks: []repository.Task{{Sequence: 4}, {Sequence: 5}}}
		if err := b.Complete(map[int64]repository.Decision{4: repository.Succeed("")}); err != nil {
			t.Fatal(err)
		}
		o := doneWithin(t, b)
		if len(o.Decisions) != 2 || o.Decisions[5].Result != repository.Failure {
			t.Errorf("outcome %+v", o)
		}
		// decided, outside a processor: its context ends, as a processor's does once
		// the decision is committed
		if err := b.Context(4).Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("task context of a decided task of a batch outside a processor: %v, want it ended", err)
		}
	})
	t.Run("NewBatchRefusesDuplicatesAndOtherTopics", func(t *testing.T) {
		if _, err := processor.NewBatch(t.Context(), "t", []repository.Task{{Sequence: 1}, {Sequence: 1}}); err == nil ||
			!strings.Contains(err.Error(), "sequence 1 appears twice") {
			t.Errorf("duplicate: %v", err)
		}
		if _, err := processor.NewBatch(t.Context(), "t", []repository.Task{{Topic: "u", Sequence: 1}}); err == nil ||
			!strings.Contains(err.Error(), `of topic "u"`) {
			t.Errorf("other topic: %v", err)
		}
	})
}

// Handlers run on batches outside a processor: each adapter reports what it should.
func TestHandlersWithoutADatabase(t *testing.T) {
	t.Parallel()
	t.Run("TaskFuncDecidesEachTaskAndContainsPanics", func(t *testing.T) {
		b := batchOf(t, 3)
		processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == 2 {
				panic("boom")
			}
			return repository.Succeed(task.Identifier)
		}).Handle(t.Context(), b)
		o := doneWithin(t, b)
		if o.Decisions[1].Message != "a" || o.Decisions[3].Message != "c" ||
			o.Decisions[2].Result != repository.Failure || !strings.Contains(o.Decisions[2].Message, "panicked on task 2: boom") {
			t.Errorf("decisions %+v", o.Decisions)
		}
	})
	// A panic in a TaskStep failed every task of the step, those decided before it too
	// (their work re-ran), and wrote the stack into each task's output.
	t.Run("TaskStepContainsPanicsToTheirTask", func(t *testing.T) {
		b := batchOf(t, 3)
		c := processor.NewComposite()
		if err := c.Step("s", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			if task.Sequence == 2 {
				panic("boom")
			}
			return repository.Succeed(task.Identifier)
		})); err != nil {
			t.Fatal(err)
		}
		c.Handle(t.Context(), b)
		o := doneWithin(t, b)
		if o.Decisions[1].Result != repository.Success || o.Decisions[3].Result != repository.Success ||
			o.Decisions[2].Result != repository.Failure || !strings.Contains(o.Decisions[2].Message, "step panicked on task 2: boom") {
			t.Errorf("decisions %+v", o.Decisions)
		}
		if strings.Contains(o.Decisions[2].Message, "goroutine") {
			t.Errorf("the task's output holds the stack: %q", o.Decisions[2].Message)
		}
	})
	t.Run("TypedFailsUndecodableInputOnly", func(t *testing.T) {
		b, err := processor.NewBatch(t.Context(), "t", []repository.Task{{Sequence: 1, Input: `{"n":2}`}, {Sequence: 2, Input: `{`}})
		if err != nil {
			t.Fatal(err)
		}
		processor.Typed(func(ctx context.Context, task repository.Task, in struct{ N int }) repository.Decision {
			return repository.Succeed(strings.Repeat("x", in.N))
		}).Handle(t.Context(), b)
		o := doneWithin(t, b)
		// the input will not change: no retry
		if o.Decisions[1].Message != "xx" || o.Decisions[1].Final || o.Decisions[2].Result != repository.Failure || !o.Decisions[2].Final {
			t.Errorf("decisions %+v, want 1 SUCCESS, 2 a FAILURE without retry", o.Decisions)
		}
	})
	// A task pushed without input says so, rather than "unexpected end of JSON input".
	t.Run("TypedNamesAMissingInput", func(t *testing.T) {
		b, err := processor.NewBatch(t.Context(), "t", []repository.Task{{Sequence: 7}})
		if err != nil {
			t.Fatal(err)
		}
		processor.Typed(func(ctx context.Context, task repository.Task, in struct{ N int }) repository.Decision {
			return repository.Succeed("")
		}).Handle(t.Context(), b)
		o := doneWithin(t, b)
		if d := o.Decisions[7]; d.Result != repository.Failure || !d.Final || d.Message != "task 7 has no input: want JSON for struct { N int }" {
			t.Errorf("decision %+v", d)
		}
	})
	// The JSON null is no input for a struct (it would decode into the zero value), and
	// a value for a pointer.
	t.Run("TypedTakesNullAsNoInputUnlessTCanHoldIt", func(t *testing.T) {
		tasks := []repository.Task{{Sequence: 1, Input: "null"}, {Sequence: 2, Input: " null\n"}}
		b, err := processor.NewBatch(t.Context(), "t", tasks)
		if err != nil {
			t.Fatal(err)
		}
		processor.Typed(func(ctx context.Context, task repository.Task, in struct{ N int }) repository.Decision {
			return repository.Succeed("")
		}).Handle(t.Context(), b)
		o := doneWithin(t, b)
		for seq := range int64(2) {
			if d := o.Decisions[seq+1]; d.Result != repository.Failure ||
				d.Message != fmt.Sprintf("task %d has the input null: want JSON for struct { N int }", seq+1) {
				t.Errorf("decision %+v", d)
			}
		}
		b, err = processor.NewBatch(t.Context(), "t", tasks[:1])
		if err != nil {
			t.Fatal(err)
		}
		processor.Typed(func(ctx context.Context, task repository.Task, in *struct{ N int }) repository.Decision {
			return repository.Succeed(fmt.Sprint(in == nil))
		}).Handle(t.Context(), b)
		if d := doneWithin(t, b).Decisions[1]; d.Result != repository.Success || d.Message != "true" {
			t.Errorf("decision for a pointer %+v, want a nil pointer handled", d)
		}
		// A type that decodes itself is given the null to decide.
		b, err = processor.NewBatch(t.Context(), "t", tasks[:1])
		if err != nil {
			t.Fatal(err)
		}
		processor.Typed(func(ctx context.Context, task repository.Task, in optionalInt) repository.Decision {
			return repository.Succeed(fmt.Sprint(in.null))
		}).Handle(t.Context(), b)
		if d := doneWithin(t, b).Decisions[1]; d.Result != repository.Success || d.Message != "true" {
			t.Errorf("decision for a json.Unmarshaler %+v, want its UnmarshalJSON given the null", d)
		}
	})
	t.Run("BufferReportsFromItsWorkers", func(t *testing.T) {
		buffered, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			return repository.Succeed("buffered")
		}), processor.BufferConfig{Queue: 1, MinWorkers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer buffered.Stop()
		b := batchOf(t, 4)
		buffered.Handle(t.Context(), b)
		if o := doneWithin(t, b); len(o.Decisions) != 4 || o.Decisions[4].Message != "buffered" {
			t.Errorf("decisions %+v", o.Decisions)
		}
	})
	t.Run("BufferHandsBackQueuedBatchesWhenStopped", func(t *testing.T) {
		release := make(chan struct{})
		running := make(chan struct{})
		buffered, err := processor.Buffer(processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			close(running)
			<-release
			_ = b.Complete(nil)
		}), processor.BufferConfig{Queue: 1, MinWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		first, queued := batchOf(t, 1), batchOf(t, 2)
		buffered.Handle(t.Context(), first)
		<-running
		buffered.Handle(t.Context(), queued)
		buffered.Stop()
		o := doneWithin(t, queued)
		for seq, d := range o.Decisions {
			if !d.Snooze || d.Delay != 0 {
				t.Errorf("queued task %d decided %+v, want handed back (a snooze of 0)", seq, d)
			}
		}
		close(release)
		doneWithin(t, first)
	})
	t.Run("CompositeMergesItsSteps", func(t *testing.T) {
		c := processor.NewComposite()
		if err := c.Step("check", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			if task.Sequence == 2 {
				return repository.Skip("irrelevant")
			}
			return repository.Succeed("checked")
		})); err != nil {
			t.Fatal(err)
		}
		if err := c.Step("send", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			return repository.Succeed("sent")
		}), "check"); err != nil {
			t.Fatal(err)
		}
		b := batchOf(t, 2)
		c.Handle(t.Context(), b)
		o := doneWithin(t, b)
		if o.Decisions[1] != repository.Succeed("checked; sent") || o.Decisions[2] != repository.Skip("irrelevant") {
			t.Errorf("decisions %+v", o.Decisions)
		}
	})
}

// optionalInt decodes the JSON null itself, as a json.Unmarshaler may.
type optionalInt struct {
	null bool
	n    int
}

func (o *optionalInt) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		o.null = true
		return nil
	}
	return json.Unmarshal(b, &o.n)
}

// TestFollowUpsCheckedWhenDeclared: a push or a junction the repository would refuse
// whatever the database holds is refused by Batch.Push and Batch.Junction, wrapping
// repository.ErrInvalid and naming what is wrong, and not declared. It was declared,
// and refused only at the commit, failing the decision it went with.
func TestFollowUpsCheckedWhenDeclared(t *testing.T) {
	b := batchOf(t, 1)
	long := strings.Repeat("x", 501)
	for _, tc := range []struct {
		name    string
		declare func() error
		says    string
	}{
		{"PushToNoTopic", func() error { return b.Push("", repository.Append, repository.Creation{Identifier: "a"}) }, "topic"},
		{"PushUnknownInsertion", func() error { return b.Push("t", repository.Insertion(9), repository.Creation{Identifier: "a"}) }, "unknown insertion 9"},
		{"PushEmptyIdentifier", func() error {
			return b.Push("t", repository.Append, repository.Creation{Identifier: "a"}, repository.Creation{})
		}, "creation 1"},
		{"PushNegativeDelay", func() error {
			return b.Push("t", repository.Append, repository.Creation{Identifier: "a", Delay: -time.Second})
		}, "negative"},
		{"JunctionUnknownKind", func() error { return b.Junction("t", repository.Junction(7), []string{"a"}) }, "unknown junction 7"},
		{"JunctionLongIdentifier", func() error { return b.Junction("t", repository.Singular, []string{"a"}, []string{"b", long}) }, "group 1"},
		{"JunctionOfNoTopic", func() error { return b.Junction("", repository.Singular, []string{"a"}) }, "topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.declare()
			if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("declared: %v, want ErrInvalid saying %q", err, tc.says)
			}
		})
	}
	if err := b.Push("t", repository.Append, repository.Creation{Identifier: "fine"}); err != nil {
		t.Fatalf("a valid push: %v", err)
	}
	// a push of nothing is nothing, whatever its topic, as Repository.Push takes it
	if err := b.Push("", repository.Insertion(9)); err != nil {
		t.Fatalf("a push of no creation: %v", err)
	}
	if err := b.Decide(1, repository.Succeed("")); err != nil {
		t.Fatal(err)
	}
	<-b.Done()
	if got := b.Outcome().FollowUps; len(got) != 2 || got[0].Creations[0].Identifier != "fine" || len(got[1].Creations) != 0 {
		t.Fatalf("follow-ups %+v, want the valid push and the empty one", got)
	}
}
