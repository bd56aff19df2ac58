package main

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pgtask/pgtask/internal/faultproxy"
)

// TestPushWhoseAnswerIsLost: a push whose answer was lost with the connection (a
// failover right after its commit) may have been committed. push said to resume at the
// batch's first line, which pushed its tasks a second time when they had been; it says
// the batch's outcome is unknown and how to see it, and where the lines not pushed start.
func TestPushWhoseAnswerIsLost(t *testing.T) {
	f := setup(t)
	f.ok("topic", "add", "t")
	proxy, err := faultproxy.Start(f.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	through := func(stdin string, args ...string) result {
		t.Helper()
		return runCLI(f.ctx, stdin, nil, append(args, "--database-url", u.String())...)
	}
	isPush := func(sql string) bool {
		return faultproxy.Statement("TaskPush")(sql) || faultproxy.Statement("TaskPushAppend")(sql)
	}
	count := func() int {
		t.Helper()
		var n int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = 't'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("Batches", func(t *testing.T) {
		// the batch of lines 1..2 is pushed, that of lines 3..4 loses its answer
		var pushes atomic.Int64
		cut := proxy.AddCut(&faultproxy.Cut{Match: func(sql string) bool {
			return isPush(sql) && pushes.Add(1) == 2
		}, Times: 1})
		defer proxy.RemoveCut(cut)
		r := through("a\nb\nc\nd\ne\n", "push", "--topic", "t", "--batch-size", "2")
		if r.err == nil || cut.Lost() != 1 {
			t.Fatalf("a push whose answer was lost: %v (%d lost); want an error", r.err, cut.Lost())
		}
		if got := count(); got != 4 {
			t.Errorf("%d tasks after the lost answer, want 4 (the batch committed)", got)
		}
		want := "2 tasks pushed before it, sequences 1..2, standard input lines 1..2; " +
			"the answer to the batch of lines 3..4 did not come: " +
			"it may have been pushed, all of it or none; see with `pgtask list --topic t --identifier c` (line 3's task, created just now) " +
			"before pushing those lines again; the lines after 4 were not pushed)"
		if !strings.Contains(r.err.Error(), want) || strings.Contains(r.err.Error(), "resume at line") {
			t.Errorf("a push whose answer was lost: %v\nwant it to say %q, not to resume", r.err, want)
		}
	})

	t.Run("One", func(t *testing.T) {
		before := count()
		cut := proxy.AddCut(&faultproxy.Cut{Match: isPush, Times: 1})
		defer proxy.RemoveCut(cut)
		r := through("", "push", "--topic", "t", "it's")
		if r.err == nil || cut.Lost() != 1 {
			t.Fatalf("a push whose answer was lost: %v (%d lost); want an error", r.err, cut.Lost())
		}
		if got := count(); got != before+1 {
			t.Errorf("%d tasks after the lost answer, want %d (the push committed)", got, before+1)
		}
		want := fmt.Sprintf("the task may have been pushed; see with `pgtask list --topic t --identifier %s`, a task created just now, before pushing it again", `'it'\''s'`)
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("a push whose answer was lost: %v\nwant it to say %q", r.err, want)
		}
	})
}
