package repository_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/repository"
)

func TestExcerpts(t *testing.T) {
	shared := setup(t)
	excerpts := func(f *fixture, direction repository.Direction) []repository.Excerpt {
		f.t.Helper()
		cursor := repository.MinSequence
		if direction == repository.Backward {
			cursor = repository.MaxSequence
		}
		got, err := f.repo.Excerpts(f.ctx, f.pool, f.topic, repository.TaskFilter{}, cursor, 10, direction)
		if err != nil {
			f.t.Fatalf("excerpts: %v", err)
		}
		return got
	}
	t.Run("CutsLongInputAndOutputByCharacters", func(t *testing.T) {
		f := isolated(t, shared)
		long := strings.Repeat("é", repository.ExcerptLength+10) // two bytes each
		task := pushOne(f, repository.Creation{Identifier: "a", Input: long})
		f.complete(repository.Succeed(long+"!"), pollOne(f, f.repo, task.Sequence))
		got := excerpts(f, repository.Forward)[0]
		if utf8.RuneCountInString(got.Input) != repository.ExcerptLength || !strings.HasPrefix(long, got.Input) {
			t.Errorf("input: %d characters, want the first %d", utf8.RuneCountInString(got.Input), repository.ExcerptLength)
		}
		if got.InputBytes != int64(len(long)) || !got.InputCut() {
			t.Errorf("input bytes %d (cut %v), want %d and cut", got.InputBytes, got.InputCut(), len(long))
		}
		if got.OutputBytes != int64(len(long))+1 || !got.OutputCut() || utf8.RuneCountInString(got.Output) != repository.ExcerptLength {
			t.Errorf("output: %d characters of %d bytes (cut %v)", utf8.RuneCountInString(got.Output), got.OutputBytes, got.OutputCut())
		}
		if whole := f.get(task.Sequence); whole.Input != long {
			t.Errorf("Get returns %d bytes of input, want all %d", len(whole.Input), len(long))
		}
	})
	// every read of excerpts carries the concurrency key (they left it out: REST, the CLI
	// and the dashboard listed a task pushed with a key as one without)
	t.Run("CarriesTheKey", func(t *testing.T) {
		f := isolated(t, shared)
		task := pushOne(f, repository.Creation{Identifier: "a", ConcurrencyKey: "acme"})
		for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
			if got := excerpts(f, direction); len(got) != 1 || got[0].ConcurrencyKey != "acme" {
				t.Errorf("excerpts %v: %+v, want the key acme", direction, got)
			}
		}
		latest, err := f.repo.Latest(f.ctx, f.pool, f.topic, repository.TaskFilter{}, repository.MaxSequence, 10)
		if err != nil || len(latest) != 1 || latest[0].ConcurrencyKey != "acme" {
			t.Errorf("Latest = %+v, %v; want the key acme", latest, err)
		}
		one, err := f.repo.GetExcerpt(f.ctx, f.pool, f.topic, task.Sequence, 10, 1)
		if err != nil || one.ConcurrencyKey != "acme" {
			t.Errorf("GetExcerpt = %+v, %v; want the key acme", one, err)
		}
	})
	t.Run("KeepsShortTextsWhole", func(t *testing.T) {
		f := isolated(t, shared)
		pushOne(f, repository.Creation{Identifier: "a", Input: "in", Reference: "r", Priority: 3})
		pushOne(f, repository.Creation{Identifier: "b"})
		got := excerpts(f, repository.Forward)
		if len(got) != 2 || got[0].Input != "in" || got[0].InputCut() || got[0].InputBytes != 2 || got[0].Reference != "r" ||
			got[0].Priority != 3 || got[0].Identifier != "a" || got[0].State != repository.Ready || got[0].Created.IsZero() {
			t.Fatalf("excerpts %+v", got)
		}
		if got[1].Input != "" || got[1].InputBytes != 0 || got[1].InputCut() || got[1].OutputCut() || got[1].ErrorsCut || got[1].Errors != nil {
			t.Errorf("a task without texts: %+v", got[1])
		}
	})
	t.Run("KeepsTheLatestErrorsEachCut", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: repository.ExcerptErrors + 2})
		task := pushOne(f, repository.Creation{Identifier: "a"})
		var texts []string
		for i := range repository.ExcerptErrors + 2 {
			text := strings.Repeat(string(rune('a'+i)), repository.ExcerptLength+1)
			texts = append(texts, text)
			f.complete(repository.Fail(errors.New(text)), pollOne(f, f.repo, task.Sequence))
		}
		got := excerpts(f, repository.Backward)[0]
		if len(got.Errors) != repository.ExcerptErrors || !got.ErrorsCut {
			t.Fatalf("%d errors (cut %v), want the last %d and cut", len(got.Errors), got.ErrorsCut, repository.ExcerptErrors)
		}
		for i, e := range got.Errors {
			want := texts[len(texts)-repository.ExcerptErrors+i][:repository.ExcerptLength]
			if e != want {
				t.Errorf("error %d: %.10q… (%d bytes), want %.10q… (%d bytes)", i, e, len(e), want, len(want))
			}
		}
	})
	t.Run("SaysWhetherShortErrorsWereCut", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 2})
		task := pushOne(f, repository.Creation{Identifier: "a"})
		f.complete(repository.Fail(errors.New("one")), pollOne(f, f.repo, task.Sequence))
		if got := excerpts(f, repository.Forward)[0]; got.ErrorsCut || !slices.Equal(got.Errors, []string{"one"}) {
			t.Errorf("errors %q cut %v, want [one] whole", got.Errors, got.ErrorsCut)
		}
	})
	t.Run("PagesAsPageDoes", func(t *testing.T) {
		f := isolated(t, shared)
		f.push(repository.Append, "a", "b", "a", "c")
		a := "a"
		for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
			for _, filter := range []repository.TaskFilter{{}, {Identifier: a}} {
				page, err := f.repo.Page(f.ctx, f.pool, f.topic, filter, 2, 2, direction)
				if err != nil {
					t.Fatal(err)
				}
				ex, err := f.repo.Excerpts(f.ctx, f.pool, f.topic, filter, 2, 2, direction)
				if err != nil {
					t.Fatal(err)
				}
				var got []int64
				for _, e := range ex {
					got = append(got, e.Sequence)
				}
				if !slices.Equal(got, sequences(page)) {
					t.Errorf("direction %d filter %+v: excerpts %v, page %v", direction, filter, got, sequences(page))
				}
			}
		}
	})
	t.Run("AnswersErrUnknownTopic", func(t *testing.T) {
		f := isolated(t, shared)
		if _, err := f.repo.Excerpts(f.ctx, f.pool, "nope", repository.TaskFilter{}, 0, 10, repository.Forward); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("err = %v, want ErrUnknownTopic", err)
		}
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	bad := "a\xffb"
	for _, tc := range []struct {
		name     string
		err      error
		fragment string // "" when err must be nil
	}{
		{"TopicWithinLimits", repository.ValidateTopic(long(repository.MaxTopicLength)), ""},
		{"TopicEmpty", repository.ValidateTopic(""), "empty"},
		{"TopicTooLongIsNotEchoed", repository.ValidateTopic(long(10000)), "10000 characters long, at most 250"},
		{"TopicNotUTF8", repository.ValidateTopic(bad), "UTF-8"},
		{"IdentifierTooLong", repository.ValidateIdentifier(long(repository.MaxIdentifierLength + 1)), "at most 500"},
		{"IdentifierNotUTF8", repository.ValidateIdentifier(bad), "UTF-8"},
		{"CancellerEmptyIsFine", repository.ValidateCanceller(""), ""},
		{"CancellerTooLong", repository.ValidateCanceller(long(repository.MaxCancellerLength + 1)), "at most 250"},
		{"CancellerNotUTF8", repository.ValidateCanceller(bad), "UTF-8"},
		{"FilterEmptyIsFine", repository.ValidateFilter(repository.TaskFilter{}), ""},
		{"FilterIdentifierTooLong", repository.ValidateFilter(repository.TaskFilter{Identifier: long(501)}), "identifier"},
		{"FilterReferenceNotUTF8", repository.ValidateFilter(repository.TaskFilter{Reference: bad}), "reference"},
		{"CreationFine", repository.Creation{Identifier: "a", Input: "é"}.Validate(), ""},
		{"CreationInputNotUTF8", repository.Creation{Identifier: "a", Input: bad}.Validate(), "input is not valid UTF-8"},
		{"CreationReferenceTooLong", repository.Creation{Identifier: "a", Reference: long(501)}.Validate(), "reference"},
		{"CreationNegativeDelay", repository.Creation{Identifier: "a", Delay: -1}.Validate(), "negative"},
		// a not-before beyond 9999 (it was pushed due in 1970: at once)
		{"CreationNotBeforeYear9999", repository.Creation{Identifier: "a", NotBefore: time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC)}.Validate(), ""},
		{"CreationNotBeforeFarFuture", repository.Creation{Identifier: "a", NotBefore: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)}.Validate(), "not-before 300000-01-01T00:00:00Z is after the year 9999"},
		// a NUL byte, which PostgreSQL text cannot hold, is refused naming the field
		// (the server's refusal named neither the field nor the task)
		{"TopicWithNUL", repository.ValidateTopic("a\x00b"), "topic contains a NUL byte"},
		{"IdentifierWithNUL", repository.ValidateIdentifier("a\x00b"), "contains a NUL byte"},
		{"CancellerWithNUL", repository.ValidateCanceller("a\x00b"), "canceller contains a NUL byte"},
		{"FilterReferenceWithNUL", repository.ValidateFilter(repository.TaskFilter{Reference: "\x00"}), "reference contains a NUL byte"},
		{"CreationInputWithNUL", repository.Creation{Identifier: "a", Input: "x\x00"}.Validate(), "input contains a NUL byte"},
		{"CreationKeyWithNUL", repository.Creation{Identifier: "a", ConcurrencyKey: "k\x00"}.Validate(), "concurrency key contains a NUL byte"},
		{"ScheduleNameWithNUL", repository.ValidateScheduleName("s\x00"), "schedule name contains a NUL byte"},
		{"ScheduleInputWithNUL", repository.ScheduleSettings{Topic: "t", Spec: "@hourly", Input: "\x00"}.Validate(), "input contains a NUL byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			switch {
			case tc.fragment == "" && tc.err != nil:
				t.Fatalf("err = %v, want nil", tc.err)
			case tc.fragment == "":
			case !errors.Is(tc.err, repository.ErrInvalid) || !strings.Contains(tc.err.Error(), tc.fragment):
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", tc.err, tc.fragment)
			case strings.Contains(tc.err.Error(), long(300)):
				t.Fatalf("err echoes the long value: %.80s…", tc.err)
			}
		})
	}
}

func TestValidatedEverywhere(t *testing.T) {
	f := setup(t)
	long := strings.Repeat("t", 10000)
	for name, call := range map[string]func() error{
		"Topic":     func() error { _, err := f.repo.Topic(f.ctx, f.pool, long); return err },
		"Get":       func() error { _, err := f.repo.Get(f.ctx, f.pool, long, 1); return err },
		"SetActive": func() error { return f.repo.SetActive(f.ctx, f.pool, long, false) },
		"Stats":     func() error { _, err := f.repo.Stats(f.ctx, f.pool, long); return err },
		"Configure": func() error {
			_, err := f.repo.Configure(f.ctx, f.pool, long, repository.TopicSettings{MaxAttempts: 1})
			return err
		},
		"CancelBy": func() error {
			_, err := f.repo.Cancel(f.ctx, f.pool, f.topic, strings.Repeat("b", repository.MaxCancellerLength+1), 1)
			return err
		},
		"PageFilter": func() error {
			_, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{Reference: "\xff"}, 0, 1, repository.Forward)
			return err
		},
	} {
		t.Run(name+"RefusesWithErrInvalid", func(t *testing.T) {
			if err := call(); !errors.Is(err, repository.ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
	t.Run("CancelByWithinTheLimitIsStored", func(t *testing.T) {
		task := f.push(repository.Append, "a")[0]
		by := strings.Repeat("b", repository.MaxCancellerLength)
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, by, task.Sequence); err != nil {
			t.Fatal(err)
		}
		if got := f.get(task.Sequence).Output; got != "cancelled by "+by {
			t.Errorf("output %.30q…, want cancelled by %d b's", got, len(by))
		}
	})
}

func TestGetExcerpt(t *testing.T) {
	shared := setup(t)
	t.Run("CutsEveryTextToTheLengthAskedKeepingEveryError", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: repository.ExcerptErrors + 3})
		long := strings.Repeat("é", 100) // two bytes each
		task := pushOne(f, repository.Creation{Identifier: "a", Input: long, Reference: "r"})
		for range repository.ExcerptErrors + 2 {
			f.complete(repository.Fail(errors.New(long)), pollOne(f, f.repo, task.Sequence))
		}
		got, err := f.repo.GetExcerpt(f.ctx, f.pool, f.topic, task.Sequence, 10, repository.ExcerptErrors+2)
		if err != nil {
			t.Fatal(err)
		}
		if got.Input != long[:20] || got.InputBytes != int64(len(long)) || !got.InputCut() || got.Reference != "r" || got.State != repository.Ready {
			t.Errorf("excerpt %+v, want the input's first 10 characters of %d bytes", got, len(long))
		}
		if len(got.Errors) != repository.ExcerptErrors+2 || !got.ErrorsCut || got.Errors[0] != long[:20] {
			t.Errorf("errors %q (cut %v), want all %d, each its first 10 characters", got.Errors, got.ErrorsCut, repository.ExcerptErrors+2)
		}
	})
	t.Run("KeepsTheLastErrorsAsked", func(t *testing.T) {
		// the last 2 only, and cut says some were left out, however short they are
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 5})
		short := pushOne(f, repository.Creation{Identifier: "b"})
		for i := range 3 {
			f.complete(repository.Fail(fmt.Errorf("e%d", i)), pollOne(f, f.repo, short.Sequence))
		}
		got, err := f.repo.GetExcerpt(f.ctx, f.pool, f.topic, short.Sequence, 10, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Errors, []string{"e1", "e2"}) || !got.ErrorsCut {
			t.Errorf("errors %q (cut %v), want the last two, cut", got.Errors, got.ErrorsCut)
		}
	})
	t.Run("RefusesALengthBelowOneAndAnswersErrUnknownTask", func(t *testing.T) {
		f := isolated(t, shared)
		task := pushOne(f, repository.Creation{Identifier: "a"})
		if _, err := f.repo.GetExcerpt(f.ctx, f.pool, f.topic, task.Sequence, 0, 1); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("length 0: %v, want ErrInvalid", err)
		}
		if _, err := f.repo.GetExcerpt(f.ctx, f.pool, f.topic, task.Sequence, 10, 0); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("error count 0: %v, want ErrInvalid", err)
		}
		if _, err := f.repo.GetExcerpt(f.ctx, f.pool, f.topic, task.Sequence+1000, 10, 1); !errors.Is(err, repository.ErrUnknownTask) {
			t.Errorf("unknown task: %v, want ErrUnknownTask", err)
		}
	})
}
