package repository

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/db"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// storedTask is what a push decides about a task, as stored.
type storedTask struct {
	Identifier, Input, Reference string
	State, Descent, Priority     int16
	NotBefore                    *time.Time
}

// storedTasks reads the tasks of topic in sequence order.
func storedTasks(t *testing.T, pool *pgxpool.Pool, topic string) []storedTask {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT identifier, coalesce(input, '<null>'), coalesce(reference, '<null>'), state, descent, priority, not_before
		FROM task WHERE topic = $1 ORDER BY sequence`, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedTask
	for rows.Next() {
		var s storedTask
		if err := rows.Scan(&s.Identifier, &s.Input, &s.Reference, &s.State, &s.Descent, &s.Priority, &s.NotBefore); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPushAppendStatement checks that TaskPushAppend, which Push runs for APPEND, does
// what TaskPush does with insertion 0: the same rows in the same order, the same
// refusal beyond the queue cap and for an unknown topic.
func TestPushAppendStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), Migrate)
	q := db.New()
	for _, topic := range []string{"full", "append"} {
		if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
			t.Fatal(err)
		}
	}
	notBefore := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	// Every kind of element: suspended, empty and set inputs and references, priorities,
	// a not-before, a delay, a repeated identifier.
	batch := db.TaskPushAppendParams{
		Identifiers:  []string{"a", "b", "a", "c", "d"},
		Inputs:       []string{"", "in", "x", "", "y"},
		Refs:         []string{"", "ref", "", "r2", ""},
		Suspended:    []bool{false, true, false, false, false},
		Priorities:   []int16{0, 3, -2, 0, 1},
		NotBeforesUs: []int64{0, 0, notBefore.UnixMicro(), 0, 0},
		DelaysMs:     []int64{0, 0, 0, 3_600_000, 0},
	}
	// push runs both statements on the same elements; it returns how many rows each
	// returned.
	push := func(b db.TaskPushAppendParams) (full, appended int) {
		t.Helper()
		b.Topic = "append"
		a, err := q.TaskPushAppend(ctx, pool, b)
		if err != nil {
			t.Fatalf("TaskPushAppend: %v", err)
		}
		f, err := q.TaskPush(ctx, pool, db.TaskPushParams{
			Topic: "full", Insertion: 0, Identifiers: b.Identifiers, Inputs: b.Inputs, Refs: b.Refs,
			Suspended: b.Suspended, Priorities: b.Priorities, NotBeforesUs: b.NotBeforesUs, DelaysMs: b.DelaysMs,
		})
		if err != nil {
			t.Fatalf("TaskPush: %v", err)
		}
		for i := range a {
			if i < len(f) && (a[i].Identifier != f[i].Identifier || a[i].State != f[i].State || a[i].Descent != f[i].Descent) {
				t.Errorf("row %d: TaskPushAppend %+v, TaskPush %+v", i, a[i], f[i])
			}
			if i > 0 && a[i].Sequence <= a[i-1].Sequence {
				t.Errorf("TaskPushAppend rows out of sequence order: %+v", a)
			}
		}
		return len(f), len(a)
	}
	// same compares what the two topics hold; delays are measured from each statement's
	// own now(), so those not-befores are compared to the minute.
	same := func(when string) {
		t.Helper()
		full, appended := storedTasks(t, pool, "full"), storedTasks(t, pool, "append")
		for _, ts := range [][]storedTask{full, appended} {
			for i := range ts {
				if ts[i].NotBefore != nil && !ts[i].NotBefore.Equal(notBefore) {
					rounded := ts[i].NotBefore.Round(time.Minute)
					ts[i].NotBefore = &rounded
				}
			}
		}
		if !reflect.DeepEqual(full, appended) {
			t.Fatalf("%s: TaskPush stored\n%+v\nTaskPushAppend stored\n%+v", when, full, appended)
		}
	}

	if f, a := push(batch); f != 5 || a != 5 {
		t.Fatalf("first batch: %d and %d rows, want 5 each", f, a)
	}
	same("first batch")
	if got := storedTasks(t, pool, "append"); got[1].State != 4 || got[1].Input != "in" || got[0].Input != "<null>" || got[2].NotBefore == nil {
		t.Fatalf("stored %+v: want b SUSPENDED with its input, a's empty input NULL, the second a delayed", got)
	}

	// Four READY tasks are there (b is SUSPENDED); the cap of 5 takes one more, not two.
	if _, err := pool.Exec(ctx, "UPDATE task_topic SET queue_cap = 5"); err != nil {
		t.Fatal(err)
	}
	two := db.TaskPushAppendParams{Identifiers: []string{"e", "f"}, Inputs: []string{"", ""}, Refs: []string{"", ""},
		Suspended: []bool{false, false}, Priorities: []int16{0, 0}, NotBeforesUs: []int64{0, 0}, DelaysMs: []int64{0, 0}}
	if f, a := push(two); f != 0 || a != 0 {
		t.Fatalf("beyond the cap: %d and %d rows, want none", f, a)
	}
	one := db.TaskPushAppendParams{Identifiers: []string{"e"}, Inputs: []string{""}, Refs: []string{""},
		Suspended: []bool{false}, Priorities: []int16{0}, NotBeforesUs: []int64{0}, DelaysMs: []int64{0}}
	if f, a := push(one); f != 1 || a != 1 {
		t.Fatalf("up to the cap: %d and %d rows, want 1 each", f, a)
	}
	same("at the cap")

	one.Topic = "no-such-topic"
	if rows, err := q.TaskPushAppend(ctx, pool, one); err != nil || len(rows) != 0 {
		t.Fatalf("TaskPushAppend to an unknown topic = %v, %v; want no row", rows, err)
	}
}

// TestPushAppendGenericPlan checks that the server settles on one generic plan for
// TaskPushAppend on a connection that keeps pushing, whatever the batch sizes and
// topics, instead of planning each execution, and that the plan still routes each
// batch to its own topic's partition and honours each topic's cap.
func TestPushAppendGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), Migrate)
	for _, topic := range []string{"one", "two"} {
		if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "UPDATE task_topic SET queue_cap = 50 WHERE topic = 'two'"); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := db.New()
	want := map[string]int{}
	next := 0
	for i, size := range []int{1, 100, 3, 1000, 40, 1, 250, 7, 2, 30, 1, 500} {
		topic := []string{"one", "two"}[i%2]
		b := db.TaskPushAppendParams{Topic: topic}
		for range size {
			next++
			b.Identifiers = append(b.Identifiers, "t"+strconv.Itoa(next))
			b.Inputs, b.Refs = append(b.Inputs, ""), append(b.Refs, "")
			b.Suspended, b.Priorities = append(b.Suspended, false), append(b.Priorities, 0)
			b.NotBeforesUs, b.DelaysMs = append(b.NotBeforesUs, 0), append(b.DelaysMs, 0)
		}
		rows, err := q.TaskPushAppend(ctx, conn, b)
		if err != nil {
			t.Fatalf("push %d (%d to %s): %v", i, size, topic, err)
		}
		admitted := topic == "one" || want[topic]+size <= 50
		if admitted && len(rows) != size || !admitted && len(rows) != 0 {
			t.Fatalf("push %d (%d to %s, %d there, cap 50 on two): %d rows", i, size, topic, want[topic], len(rows))
		}
		want[topic] += len(rows)
	}
	for topic, n := range want {
		var got int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = $1", topic).Scan(&got); err != nil {
			t.Fatal(err)
		}
		var inPartition int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM task t JOIN task_topic p ON p.partition = t.tableoid::regclass::text WHERE p.topic = $1", topic).Scan(&inPartition); err != nil {
			t.Fatal(err)
		}
		if got != n || inPartition != n {
			t.Errorf("topic %s holds %d tasks, %d of them in its partition; want %d", topic, got, inPartition, n)
		}
	}
	var generic, custom int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '-- name: TaskPushAppend %'`).Scan(&generic, &custom); err != nil {
		t.Fatalf("the push's prepared statement: %v", err)
	}
	// The server tries five custom plans before it compares them with the generic one.
	if custom > 5 || generic < 7 {
		t.Errorf("TaskPushAppend was planned %d times (custom) and ran a generic plan %d times in 12 pushes; want the generic plan from the sixth on", custom, generic)
	}
}
