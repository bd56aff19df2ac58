package repository_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/repository"
)

// Migration 000004 split the lookups by identifier into one index per group of states:
// READY rows through task_ready_identifier, ACTIVE, EXPIRED, FAILED and SUSPENDED rows
// through task_open, settled rows (state >= 2) through task_identifier; the statements
// that look an identifier up in every state do it in parts, one per index. Migration
// 000009 keyed those indexes by the topic's hash, since a table now holds many topics;
// 000031 moved REDUNDANT rows to task_identifier_redundant, which a REPLACE never reads.
// These tests run those statements with auto_explain on and sequential scans disabled and
// check every plan: none may read the topic's table in full, whether by a Seq Scan or by
// an index scan without a bound on the index's leading key (state aside), so the
// statements stay cheap on a topic with millions of finished rows and on a table shared
// with thousands of other topics.
//
// Checking for a Seq Scan alone is not enough: with sequential scans off, a statement no
// identifier index can serve falls back to the primary key (sequence, topic), which is
// bounded by nothing. Undoing 000004's two-part lookups with the partial task_identifier
// in place gives exactly such plans, and no Seq Scan at all.

// planNode is the part of an EXPLAIN (FORMAT JSON) node the checks read.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Function  string     `json:"Function Call"`          // with auto_explain.log_verbose
	Loops     float64    `json:"Actual Loops"`           // with auto_explain.log_analyze
	Removed   float64    `json:"Rows Removed by Filter"` // with auto_explain.log_analyze
	Rows      float64    `json:"Actual Rows"`            // with auto_explain.log_analyze, per loop
	Plans     []planNode `json:"Plans"`
}

// visit calls fn on n and on every node below it, parents first.
func (n planNode) visit(fn func(planNode)) {
	fn(n)
	for _, child := range n.Plans {
		child.visit(fn)
	}
}

// loggedPlan is one plan auto_explain sent as a notice.
type loggedPlan struct {
	Query string   `json:"Query Text"`
	Root  planNode `json:"Plan"`
	JIT   any      `json:"JIT"` // when the statement was compiled
	raw   string   // the notice's message
}

// planCapture collects the plans auto_explain reports on one connection.
type planCapture struct {
	mu      sync.Mutex
	notices []string
}

func (c *planCapture) onNotice(_ *pgconn.PgConn, n *pgconn.Notice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notices = append(c.notices, n.Message)
}

// take returns the plans reported since the last take and forgets them.
func (c *planCapture) take(t *testing.T) []loggedPlan {
	t.Helper()
	c.mu.Lock()
	notices := c.notices
	c.notices = nil
	c.mu.Unlock()
	var plans []loggedPlan
	for _, msg := range notices {
		// auto_explain: "duration: 0.042 ms  plan:\n{...}"
		_, body, ok := strings.Cut(msg, "plan:\n")
		if !ok || !strings.HasPrefix(msg, "duration:") {
			continue
		}
		var p loggedPlan
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("auto_explain notice is not a JSON plan (%v):\n%s", err, msg)
		}
		p.raw = msg
		plans = append(plans, p)
	}
	return plans
}

// partitionIndex is an index of the table holding a topic.
type partitionIndex struct {
	parent string // the partitioned index on task it belongs to, e.g. task_identifier
	lead   string // its first key other than state, as pg_get_indexdef prints it, e.g. hashtext(topic)
}

// partitionPattern names the tables that hold tasks: a bucket's shared table
// (task_p<NNN>_shared) or a dedicated topic's (task_<md5 of the topic>).
var partitionPattern = regexp.MustCompile(`^task_([0-9a-f]{32}|p[0-9]{3}_shared)$`)

// planChecker finds the scans that read a topic's partition in full.
type planChecker struct {
	partition string                    // the fixture topic's partition
	indexes   map[string]partitionIndex // by index name
}

// newPlanChecker reads the fixture topic's partition and its indexes from the catalog.
func newPlanChecker(f *fixture) *planChecker {
	f.t.Helper()
	c := &planChecker{indexes: map[string]partitionIndex{}}
	if err := f.pool.QueryRow(f.ctx, "SELECT partition FROM task_topic WHERE topic = $1", f.topic).Scan(&c.partition); err != nil {
		f.t.Fatalf("read partition of %q: %v", f.topic, err)
	}
	rows, err := f.pool.Query(f.ctx, `
		SELECT ci.relname::text, pg_partition_root(x.indexrelid)::regclass::text,
		       (SELECT d FROM generate_series(1, x.indnkeyatts) k, pg_get_indexdef(x.indexrelid, k, false) d
		        WHERE d <> 'state' ORDER BY k LIMIT 1)
		FROM pg_index x
		JOIN pg_class ci ON ci.oid = x.indexrelid
		WHERE x.indrelid = $1::regclass`, c.partition)
	if err != nil {
		f.t.Fatalf("read indexes of %s: %v", c.partition, err)
	}
	for rows.Next() {
		var name string
		var ix partitionIndex
		if err := rows.Scan(&name, &ix.parent, &ix.lead); err != nil {
			f.t.Fatalf("read indexes of %s: %v", c.partition, err)
		}
		// an expression key comes in parentheses of its own
		if strings.HasPrefix(ix.lead, "(") && strings.HasSuffix(ix.lead, ")") {
			ix.lead = ix.lead[1 : len(ix.lead)-1]
		}
		c.indexes[name] = ix
	}
	if err := rows.Err(); err != nil {
		f.t.Fatalf("read indexes of %s: %v", c.partition, err)
	}
	parents := map[string]bool{}
	for _, ix := range c.indexes {
		parents[ix.parent] = true
	}
	for _, want := range []string{"task_pkey", "task_open", "task_ready_identifier", "task_identifier", "task_identifier_redundant"} {
		if !parents[want] {
			f.t.Fatalf("partition %s has no index of %s: %v", c.partition, want, c.indexes)
		}
	}
	return c
}

// sequenceRange matches a range condition on the sequence (a walk along the primary key).
var sequenceRange = regexp.MustCompile(`(^|[^a-z_])sequence\s*(<|>|<=|>=)`)

// qualifier matches a table alias before a column name, as in "t.topic".
var qualifier = regexp.MustCompile(`\b[a-z_][a-z0-9_]*\.([a-z_])`)

// constrains reports whether an Index Cond compares key, a column or an index expression
// as pg_get_indexdef prints it (the cond's columns may be qualified).
func constrains(cond, key string) bool {
	cond = qualifier.ReplaceAllString(cond, "$1")
	return regexp.MustCompile(`(^|[^a-z_])` + regexp.QuoteMeta(key) + `\s*(=|<>|<=|>=|<|>)`).MatchString(cond)
}

// violations lists the scans of p that read a topic's table in full: a Seq Scan, or an
// index scan of the fixture's table with no condition on the index's leading key (state
// aside), which walks every entry of the index.
func (c *planChecker) violations(p loggedPlan) []string {
	var out []string
	p.Root.visit(func(n planNode) {
		switch n.NodeType {
		case "Seq Scan":
			if n.Relation == "task" || partitionPattern.MatchString(n.Relation) {
				out = append(out, "Seq Scan on "+n.Relation)
			}
		case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
			// task_ready holds READY rows only (the backlog, which the queue-cap check
			// counts), never finished ones: reading it whole is not reading the partition.
			if ix, ok := c.indexes[n.IndexName]; ok && ix.parent != "task_ready" && !constrains(n.IndexCond, ix.lead) {
				out = append(out, fmt.Sprintf("%s using %s (%s) with Index Cond %q: not bounded on %s",
					n.NodeType, n.IndexName, ix.parent, n.IndexCond, ix.lead))
			}
		}
	})
	return out
}

// identifierScans returns the parent indexes (task_open, task_identifier, ...) through
// which the plans look the partition up by identifier.
func (c *planChecker) identifierScans(plans []loggedPlan) []string {
	return c.scans(plans, func(n planNode, ix partitionIndex) bool {
		// task_ready_identifier's key is an expression of topic and identifier
		return constrains(n.IndexCond, "identifier") ||
			strings.Contains(ix.lead, "identifier") && constrains(n.IndexCond, ix.lead)
	})
}

// scans returns the parent indexes of the index scans of the partition for which the
// plans' nodes satisfy keep.
func (c *planChecker) scans(plans []loggedPlan, keep func(planNode, partitionIndex) bool) []string {
	var out []string
	for _, p := range plans {
		p.Root.visit(func(n planNode) {
			if ix, ok := c.indexes[n.IndexName]; ok && keep(n, ix) && !slices.Contains(out, ix.parent) {
				out = append(out, ix.parent)
			}
		})
	}
	slices.Sort(out)
	return out
}

// explainedConn opens a connection of its own to the fixture's database on which
// auto_explain reports the plan of every statement, nested ones (inside functions)
// included, as a notice, with sequential scans disabled: the planner then uses a Seq Scan
// only where no index can serve the scan.
func explainedConn(f *fixture) (*pgx.Conn, *planCapture) {
	f.t.Helper()
	capture := &planCapture{}
	cfg := f.pool.Config().ConnConfig.Copy()
	cfg.OnNotice = capture.onNotice
	conn, err := pgx.ConnectConfig(f.ctx, cfg)
	if err != nil {
		f.t.Fatalf("connect: %v", err)
	}
	f.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, stmt := range []string{
		"LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_format = 'json'",
		"SET auto_explain.log_level = 'notice'",
		"SET client_min_messages = notice",
		"SET enable_seqscan = off",
	} {
		if _, err := conn.Exec(f.ctx, stmt); err != nil {
			f.t.Fatalf("%s: %v (LOAD needs a superuser: point TEST_DATABASE_URL at a superuser role such as postgres)", stmt, err)
		}
	}
	capture.take(f.t) // nothing planned yet, but start clean
	return conn, capture
}

// withT returns a copy of f bound to the subtest t (same database and topic).
func withT(t *testing.T, f *fixture) *fixture {
	g := *f
	g.t, g.ctx = t, t.Context()
	return &g
}

// wantGone checks that the task was deleted.
func wantGone(f *fixture, sequence int64) {
	f.t.Helper()
	if _, err := f.repo.Get(f.ctx, f.pool, f.topic, sequence); !errors.Is(err, repository.ErrUnknownTask) {
		f.t.Errorf("get task %d: err = %v, want ErrUnknownTask (deleted)", sequence, err)
	}
}

func TestIdentifierLookupsUseIndexes(t *testing.T) {
	f := setup(t)

	// A partition that is not trivial: 10,000 tasks of 1,000 identifiers, most of them
	// finished (REDUNDANT and RECREATED ones too), some READY, some ACTIVE
	// (written directly: only their presence matters here).
	if _, err := f.pool.Exec(f.ctx, `
		INSERT INTO task (topic, identifier, state, descent, owner, completed, output)
		SELECT $1, 'filler-' || (i % 1000),
		       CASE WHEN i % 10 = 0 THEN 1 WHEN i % 10 = 1 THEN 3 WHEN i % 10 = 2 THEN 0
		            WHEN i % 10 = 3 THEN 8 WHEN i % 10 = 4 THEN 7 ELSE 6 END, 1,
		       CASE WHEN i % 10 = 2 THEN 'filler-owner' END,
		       CASE WHEN i % 10 = 0 THEN NULL ELSE now() END,
		       CASE WHEN i % 10 = 0 THEN NULL ELSE 'done' END
		FROM generate_series(1, 10000) i`, f.topic); err != nil {
		t.Fatalf("fill topic: %v", err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatalf("analyze: %v", err)
	}
	checker := newPlanChecker(f)
	conn, capture := explainedConn(f)

	// run runs op on conn and returns the plans it reported, after checking there is at
	// least one and that none reads the partition in full.
	run := func(t *testing.T, what string, op func() error) []loggedPlan {
		t.Helper()
		capture.take(t)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		plans := capture.take(t)
		if len(plans) == 0 {
			t.Fatalf("%s: auto_explain reported no plan: the capture is broken", what)
		}
		for _, p := range plans {
			if v := checker.violations(p); len(v) > 0 {
				t.Errorf("%s reads partition %s in full: %s\nplan: %s", what, checker.partition, strings.Join(v, "; "), p.raw)
			}
		}
		return plans
	}
	// wantLookups checks that the plans look identifiers up through at least these indexes.
	wantLookups := func(t *testing.T, what string, plans []loggedPlan, want ...string) {
		t.Helper()
		got := checker.identifierScans(plans)
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s looks identifiers up through %v, want %s among them", what, got, w)
			}
		}
		t.Logf("%s: %d plans, identifier lookups through %v", what, len(plans), got)
	}
	// wantNoLookup fails when plans ran a scan of index: a REPLACE and an ETERNAL
	// junction read no REDUNDANT task (000031), however many versions an identifier has
	// had. Only scans that ran count (auto_explain.log_analyze): a generic plan holds the
	// part of every insertion mode, each gated by a one-time filter on the mode.
	wantNoLookup := func(t *testing.T, what string, plans []loggedPlan, index string) {
		t.Helper()
		ran := checker.scans(plans, func(n planNode, _ partitionIndex) bool { return n.Loops > 0 })
		if slices.Contains(ran, index) {
			t.Errorf("%s ran scans of %v, which holds no task it changes", what, ran)
		}
	}

	// older pushes tasks of identifier id and takes them READY, ACTIVE, SUCCEEDED and
	// REDUNDANT (cancelled).
	type olderTasks struct{ ready, active, succeeded, redundant repository.Task }
	older := func(f *fixture, id string) olderTasks {
		return olderTasks{
			ready:     driveTo(f, id, repository.Ready),
			active:    driveTo(f, id, repository.Active),
			succeeded: driveTo(f, id, repository.Succeeded),
			redundant: driveTo(f, id, repository.Redundant),
		}
	}
	// batch calls the SQL function task_push_batch on conn.
	batch := func(f *fixture, id, insertion string) func() error {
		return func() error {
			rows, err := conn.Query(f.ctx, "SELECT * FROM task_push_batch($1, ARRAY[$2::text], insertion => $3)", f.topic, id, insertion)
			if err != nil {
				return err
			}
			seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err == nil && len(seqs) != 1 {
				err = fmt.Errorf("task_push_batch returned %v, want one sequence", seqs)
			}
			return err
		}
	}
	push := func(f *fixture, id string, insertion repository.Insertion) func() error {
		return func() error {
			_, err := f.repo.Push(f.ctx, conn, f.topic, insertion, repository.Creation{Identifier: id})
			return err
		}
	}

	// Each statement runs with custom plans (its first executions) and with the generic
	// plan a prepared statement or PL/pgSQL function settles on after five.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			f := withT(t, f)
			if _, err := conn.Exec(f.ctx, "SET plan_cache_mode = "+mode+"; SET auto_explain.log_analyze = on"); err != nil {
				t.Fatalf("set plan_cache_mode: %v", err)
			}
			id := func(name string) string { return name + "-" + mode }

			t.Run("PushReplace", func(t *testing.T) {
				f := withT(t, f)
				o := older(f, id("replace"))
				plans := run(t, "Push REPLACE", push(f, id("replace"), repository.Replace))
				wantLookups(t, "Push REPLACE", plans, "task_ready_identifier", "task_identifier")
				wantNoLookup(t, "Push REPLACE", plans, "task_identifier_redundant")
				wantState(t, f.get(o.ready.Sequence), repository.Redundant, repository.Ready)
				wantState(t, f.get(o.succeeded.Sequence), repository.Redundant, repository.Succeeded)
				wantUnchanged(f, o.active)
				wantUnchanged(f, o.redundant)
			})
			t.Run("PushSupersede", func(t *testing.T) {
				f := withT(t, f)
				o := older(f, id("supersede"))
				plans := run(t, "Push SUPERSEDE", push(f, id("supersede"), repository.Supersede))
				wantLookups(t, "Push SUPERSEDE", plans, "task_ready_identifier")
				wantState(t, f.get(o.ready.Sequence), repository.Redundant, repository.Ready)
				wantUnchanged(f, o.succeeded)
				wantUnchanged(f, o.active)
			})
			t.Run("PushDelete", func(t *testing.T) {
				f := withT(t, f)
				o := older(f, id("delete"))
				plans := run(t, "Push DELETE", push(f, id("delete"), repository.Delete))
				wantLookups(t, "Push DELETE", plans, "task_ready_identifier", "task_identifier", "task_identifier_redundant")
				wantGone(f, o.ready.Sequence)
				wantGone(f, o.succeeded.Sequence)
				wantGone(f, o.redundant.Sequence)
				wantUnchanged(f, o.active)
			})
			t.Run("BatchReplace", func(t *testing.T) {
				f := withT(t, f)
				o := older(f, id("batch-replace"))
				plans := run(t, "task_push_batch replace", batch(f, id("batch-replace"), "replace"))
				wantLookups(t, "task_push_batch replace", plans, "task_ready_identifier", "task_identifier")
				wantNoLookup(t, "task_push_batch replace", plans, "task_identifier_redundant")
				wantState(t, f.get(o.ready.Sequence), repository.Redundant, repository.Ready)
				wantState(t, f.get(o.succeeded.Sequence), repository.Redundant, repository.Succeeded)
				wantUnchanged(f, o.active)
				wantUnchanged(f, o.redundant)
			})
			t.Run("BatchDelete", func(t *testing.T) {
				f := withT(t, f)
				o := older(f, id("batch-delete"))
				plans := run(t, "task_push_batch delete", batch(f, id("batch-delete"), "delete"))
				wantLookups(t, "task_push_batch delete", plans, "task_ready_identifier", "task_identifier", "task_identifier_redundant")
				wantGone(f, o.ready.Sequence)
				wantGone(f, o.succeeded.Sequence)
				wantGone(f, o.redundant.Sequence)
				wantUnchanged(f, o.active)
			})
			t.Run("CancelledLeases", func(t *testing.T) {
				f := withT(t, f)
				plans := run(t, "CancelledLeases", func() error {
					_, err := f.repo.CancelledLeases(f.ctx, conn)
					return err
				})
				if got := checker.scans(plans, func(planNode, partitionIndex) bool { return true }); !slices.Equal(got, []string{"task_cancelled"}) {
					t.Errorf("CancelledLeases reads the partition through %v, want only task_cancelled (ACTIVE tasks flagged cancelled)", got)
				}
			})
			t.Run("JunctionEternal", func(t *testing.T) {
				f := withT(t, f)
				done := driveTo(f, id("junction-done"), repository.Succeeded)
				ready := driveTo(f, id("junction-ready"), repository.Ready)
				waiting := pushOne(f, repository.Creation{Identifier: id("junction-wait"), Suspended: true})
				stuck := pushOne(f, repository.Creation{Identifier: id("junction-stuck"), Suspended: true})
				var released []string
				plans := run(t, "Junction ETERNAL", func() error {
					var err error
					released, err = f.repo.Junction(f.ctx, conn, f.topic, repository.Eternal,
						[]string{done.Identifier, ready.Identifier, waiting.Identifier},
						[]string{stuck.Identifier, id("junction-missing")})
					return err
				})
				// ACTIVE rows may come from task_open bounded by state alone (a hashed
				// subplan over the leases in flight), so only the other two must appear.
				wantLookups(t, "Junction ETERNAL", plans, "task_ready_identifier", "task_identifier")
				wantNoLookup(t, "Junction ETERNAL", plans, "task_identifier_redundant")
				if want := []string{waiting.Identifier}; !slices.Equal(released, want) {
					t.Errorf("released %v, want %v", released, want)
				}
				wantState(t, f.get(waiting.Sequence), repository.Ready, repository.Ready)
				wantUnchanged(f, stuck)
				wantUnchanged(f, done)
			})
		})
	}

	// A listing filtered by an identifier, a reference or an unfinished or broken state
	// reads through that filter's index in both directions, not by walking the topic's
	// sequences (a range on the primary key, which violations does not catch: the key
	// leads with the sequence), however often it runs. Prepared and cached, as pgx does by
	// default, the statement went to PostgreSQL's generic plan after five calls, and that
	// plan read an identifier's READY tasks and a state's tasks by that walk (10 000 rows
	// for the ten of identifier filler-7); Excerpts has each call planned for its
	// arguments. Each path's part of the plan is gated by a one-time filter, so only the
	// scans that ran count (auto_explain.log_analyze).
	t.Run("Listings", func(t *testing.T) {
		f := withT(t, f)
		for _, stmt := range []string{"SET plan_cache_mode = auto", "SET auto_explain.log_analyze = on"} {
			if _, err := conn.Exec(f.ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			if _, err := conn.Exec(context.WithoutCancel(f.ctx), "SET auto_explain.log_analyze = off"); err != nil {
				t.Error(err)
			}
		}()
		walks := func(plans []loggedPlan) []string {
			return checker.scans(plans, func(n planNode, ix partitionIndex) bool {
				return n.Loops > 0 && ix.parent == "task_pkey" && sequenceRange.MatchString(qualifier.ReplaceAllString(n.IndexCond, "$1"))
			})
		}
		states := map[repository.State]*repository.State{}
		for _, s := range repository.States() {
			states[s] = &s
		}
		for _, filter := range []repository.TaskFilter{
			{Identifier: "filler-7"}, {Reference: "nobody"}, {State: states[repository.Active]},
			{State: states[repository.Ready]}, {State: states[repository.Failed]}, {State: states[repository.Expired]},
			{State: states[repository.Succeeded], Identifier: "filler-7"},
			{State: states[repository.Ready], Identifier: "filler-7"}, {State: states[repository.Ready], Reference: "nobody"},
			{State: states[repository.Failed], Reference: "nobody"}, {State: states[repository.Failed], Identifier: "filler-7"},
		} {
			for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
				cursor := repository.MinSequence
				if direction == repository.Backward {
					cursor = repository.MaxSequence
				}
				what := fmt.Sprintf("Excerpts(state %v, identifier %q, reference %q, direction %d)",
					filter.State, filter.Identifier, filter.Reference, direction)
				for call := range 8 { // past the five custom plans of a prepared statement
					plans := run(t, what, func() error {
						_, err := f.repo.Excerpts(f.ctx, conn, f.topic, filter, cursor, 10, direction)
						return err
					})
					if w := walks(plans); len(w) > 0 {
						t.Errorf("%s, call %d, walks the topic's sequences through %v: %s", what, call+1, w, plans[0].raw)
						break
					}
					// READY alone is read a priority at a time, each from where the
					// page starts: it read the topic's READY tasks whole (1 000 here)
					// and sorted them, at every page
					if filter.State != nil && *filter.State == repository.Ready && filter.Identifier == "" && filter.Reference == "" {
						read := 0.0
						for _, p := range plans {
							p.Root.visit(func(n planNode) {
								if ix, ok := checker.indexes[n.IndexName]; ok && ix.parent == "task_ready" {
									read += n.Loops * (n.Rows + n.Removed)
								}
							})
						}
						if read > 50 {
							t.Errorf("%s, call %d, reads %.0f entries of task_ready for a page of 10: %s", what, call+1, read, plans[0].raw)
							break
						}
					}
					// EXPIRED, FAILED or SUSPENDED alone is read in sequence order from
					// where the page starts (task_attention, 000052): through task_open,
					// keyed on identifier, it read the state's tasks whole (1 000 FAILED
					// here) and sorted them, at every page
					if filter.State != nil && *filter.State >= repository.Expired && *filter.State <= repository.Suspended &&
						filter.Identifier == "" && filter.Reference == "" {
						read := 0.0
						for _, p := range plans {
							p.Root.visit(func(n planNode) {
								if _, ok := checker.indexes[n.IndexName]; ok && n.Loops > 0 {
									read += n.Loops * (n.Rows + n.Removed)
								}
							})
						}
						if read > 50 {
							t.Errorf("%s, call %d, reads %.0f index entries for a page of 10: %s", what, call+1, read, plans[0].raw)
							break
						}
					}
					// With an identifier or a reference, the state's own index (keyed on
					// neither) would be read until enough tasks match: a READY backlog
					// whole for an identifier with few READY tasks.
					if filter.Identifier != "" || filter.Reference != "" {
						stateScans := checker.scans(plans, func(n planNode, ix partitionIndex) bool {
							return n.Loops > 0 && (ix.parent == "task_ready" || ix.parent == "task_attention" || filter.Identifier == "" && ix.parent == "task_open")
						})
						if len(stateScans) > 0 {
							t.Errorf("%s, call %d, reads its state's index %v: %s", what, call+1, stateScans, plans[0].raw)
							break
						}
					}
				}
			}
		}
		// the check itself: an unfiltered listing walks (a window of sequences from its
		// cursor; from MinSequence it asks first whether the topic's tasks are few)
		plans := run(t, "Excerpts of all", func() error {
			_, err := f.repo.Excerpts(f.ctx, conn, f.topic, repository.TaskFilter{}, 1, 10, repository.Forward)
			return err
		})
		if w := walks(plans); !slices.Equal(w, []string{"task_pkey"}) {
			t.Errorf("an unfiltered listing walks through %v, want task_pkey: the check is broken", w)
		}
	})

	// Count and Purge with a state read that state's tasks, not the topic's others,
	// however often they run: their statements count on a custom plan, which sees the
	// topic and the state as values, and as cached prepared statements they went to a
	// generic plan that walked the topic's primary key and filtered out the other states
	// (a count of FAILED after five; a purge of FAILED after five purges of no state).
	t.Run("CountAndPurge", func(t *testing.T) {
		f := withT(t, f)
		for _, stmt := range []string{"SET plan_cache_mode = auto", "SET auto_explain.log_analyze = on", "RESET enable_seqscan"} {
			if _, err := conn.Exec(f.ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, stmt := range []string{"SET auto_explain.log_analyze = off", "SET enable_seqscan = off"} {
				if _, err := conn.Exec(context.WithoutCancel(f.ctx), stmt); err != nil {
					t.Error(err)
				}
			}
		}()
		removed := func(what string, plans []loggedPlan) {
			t.Helper()
			var read float64
			for _, p := range plans {
				p.Root.visit(func(n planNode) { read += n.Removed })
			}
			if read > 500 {
				t.Errorf("%s filtered out %.0f rows of other states: it read the topic, not the state\nplan: %s", what, read, plans[0].raw)
			}
		}
		failed := repository.Failed
		for call := range 8 {
			what := fmt.Sprintf("Count(FAILED), call %d", call+1)
			removed(what, run(t, what, func() error {
				_, err := f.repo.Count(f.ctx, conn, f.topic, repository.TaskFilter{State: &failed}, 0, repository.MaxSequence, repository.Total)
				return err
			}))
		}
		for call := range 6 {
			what := fmt.Sprintf("Purge of no state, call %d", call+1)
			run(t, what, func() error {
				_, err := f.repo.Purge(f.ctx, conn, f.topic, 1, 2, nil)
				return err
			})
		}
		removed("Purge(FAILED)", run(t, "Purge(FAILED)", func() error {
			n, err := f.repo.Purge(f.ctx, conn, f.topic, 0, repository.MaxSequence, &failed)
			if err == nil && n == 0 {
				err = errors.New("purged nothing: the fixture has no FAILED task")
			}
			return err
		}))
	})

	// The detector itself: statements that read the partition in full are caught, so a
	// broken check fails the test rather than passing it.
	for _, probe := range []struct{ name, sql, want string }{
		// no index can serve it (no equality on topic, so no pruning either)
		{"CaptureSeesASeqScan", "SELECT 1 FROM task WHERE topic || '' = $1 AND lower(identifier) = 'x'",
			"Seq Scan on " + checker.partition},
		// the primary key can, but only by its topic: every entry of the partition
		{"CaptureSeesAWholeIndexScan", "SELECT 1 FROM task WHERE topic = $1 AND lower(identifier) = 'x'",
			"(task_pkey) with Index Cond"},
	} {
		t.Run(probe.name, func(t *testing.T) {
			f := withT(t, f)
			if _, err := conn.Exec(f.ctx, "SET plan_cache_mode = auto"); err != nil {
				t.Fatalf("set plan_cache_mode: %v", err)
			}
			capture.take(t)
			if _, err := conn.Exec(f.ctx, probe.sql, f.topic); err != nil {
				t.Fatalf("%s: %v", probe.sql, err)
			}
			plans := capture.take(t)
			if len(plans) == 0 {
				t.Fatalf("%s: auto_explain reported no plan: the capture is broken", probe.sql)
			}
			var found []string
			for _, p := range plans {
				found = append(found, checker.violations(p)...)
			}
			if !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, probe.want) }) {
				t.Errorf("%s: the check reports %q, want a report containing %q; plans:\n%s",
					probe.sql, found, probe.want, plans[0].raw)
			}
		})
	}
}

// TestSQLPushAppendPlannedOnce: task_push of APPEND (migration 000025) runs a statement
// the server plans once per session, where the whole push statement, which names the
// topic's partition, is planned at each call: after five custom plans the insertion's
// plan takes its arrays as parameters, not as the values of the call.
func TestSQLPushAppendPlannedOnce(t *testing.T) {
	f := setup(t)
	conn, capture := explainedConn(f)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_verbose = on"); err != nil {
		t.Fatal(err)
	}
	var calls []string
	for i := range 8 {
		id := fmt.Sprintf("planned-%d", i)
		if _, err := conn.Exec(f.ctx, "SELECT task_push($1, $2)", f.topic, id); err != nil {
			t.Fatal(err)
		}
		var scans []string
		for _, p := range capture.take(t) {
			if !strings.Contains(p.Query, "INSERT INTO task (") {
				continue
			}
			p.Root.visit(func(n planNode) {
				if n.NodeType == "Function Scan" && strings.Contains(n.Function, "unnest") {
					scans = append(scans, n.Function)
				}
			})
		}
		if len(scans) != 1 {
			t.Fatalf("push %d: %d scans of the identifiers in the insertion's plans (%v), want 1: the capture is broken", i, len(scans), scans)
		}
		calls = append(calls, scans[0])
		if i == 7 && strings.Contains(scans[0], id) {
			t.Errorf("push %d was planned for its own values (%s), want the plan kept for the session: every call is planned\n%s",
				i, scans[0], strings.Join(calls, "\n"))
		}
	}
	t.Logf("the insertion's scan of the arrays, call by call:\n%s", strings.Join(calls, "\n"))
}

// TestDeleteTopicReadsItsOwnRows checks the plans of PurgeAll and Destroy of a shared
// topic: its tasks are read through the topic's ranges of the indexes (a BitmapOr over
// the three partial indexes that together hold every state), never the whole table it
// shares with other topics.
func TestDeleteTopicReadsItsOwnRows(t *testing.T) {
	f := setup(t)
	neighbour := sameBucketTopic(f)
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state)
		SELECT CASE WHEN g % 100 = 0 THEN $1 ELSE $2 END, 'i' || g, g % 9 FROM generate_series(1, 20000) g`,
		f.topic, neighbour); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	checker := newPlanChecker(f)
	conn, capture := explainedConn(f)
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"PurgeAll", func() error {
			n, err := f.repo.PurgeAll(f.ctx, conn, f.topic)
			if err == nil && n != 200 {
				err = fmt.Errorf("purged %d tasks, want 200", n)
			}
			return err
		}},
		{"Destroy", func() error {
			f.push(repository.Append, "a", "b")
			ok, err := f.repo.Destroy(f.ctx, conn, f.topic)
			if err == nil && !ok {
				err = errors.New("destroy reported an unknown topic")
			}
			return err
		}},
	} {
		t.Run(op.name, func(t *testing.T) {
			capture.take(t)
			if err := op.run(); err != nil {
				t.Fatal(err)
			}
			plans := capture.take(t)
			deletes := 0
			for _, p := range plans {
				if v := checker.violations(p); len(v) > 0 {
					t.Errorf("%s reads %s in full: %s\nplan: %s", op.name, checker.partition, strings.Join(v, "; "), p.raw)
				}
				if strings.Contains(p.Query, "DELETE FROM task") {
					deletes++
				}
			}
			if deletes == 0 {
				t.Fatalf("%s: no DELETE among the %d plans reported", op.name, len(plans))
			}
		})
	}
	var left int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1", neighbour).Scan(&left); err != nil || left != 19800 {
		t.Errorf("the neighbour's tasks: %d (%v), want 19800", left, err)
	}
}

// TestCompletionPlanIgnoresStaleStatistics completes a batch of a topic whose table's
// statistics were taken while it held none of the table's rows (a burst into a topic
// that shares its table, the common case since migration 000009). The planner then
// expects one row where the batch leases 1 000, and before migration 000011 joined the
// decisions by a nested loop that read them again for each row: 150 ms instead of 5 for
// 1 000 tasks. task_complete plans the statement without nested loops: the test checks
// that the completion reads the decisions and the topic's rows once each.
func TestCompletionPlanIgnoresStaleStatistics(t *testing.T) {
	f := setup(t)
	neighbour := sameBucketTopic(f)
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, completed)
		SELECT $1, 'n' || g, 6, now() FROM generate_series(1, 50000) g`, neighbour); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	creations := make([]repository.Creation, 6000)
	for i := range creations {
		creations[i] = repository.Creation{Identifier: fmt.Sprintf("i%d", i)}
	}
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...); err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	for _, stmt := range []string{"RESET enable_seqscan", "SET auto_explain.log_analyze = on", "SET auto_explain.log_timing = off"} {
		if _, err := conn.Exec(f.ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := f.repo.Poll(f.ctx, conn, f.topic, repository.FIFO, repository.None, 1000)
	if err != nil || len(leased) != 1000 {
		t.Fatalf("poll: %d tasks, %v", len(leased), err)
	}
	completions := make([]repository.Completion, len(leased))
	for i, task := range leased {
		completions[i] = task.Decide(repository.Succeed("done"))
	}
	capture.take(t)
	done, err := f.repo.Complete(f.ctx, conn, f.topic, completions...)
	if err != nil || len(done) != len(leased) {
		t.Fatalf("complete: %d tasks, %v", len(done), err)
	}
	// the scans of the decisions (unnest of the arrays) and of the topic's table
	var scans []planNode
	for _, p := range capture.take(t) {
		if strings.Contains(p.Query, "UPDATE task t") {
			p.Root.visit(func(n planNode) {
				if n.NodeType == "Function Scan" || n.NodeType == "ProjectSet" || partitionPattern.MatchString(n.Relation) {
					scans = append(scans, n)
				}
			})
			for _, n := range scans {
				if n.Loops != 1 {
					t.Errorf("the completion runs its %s %s %v times, want once\nplan: %s", n.NodeType, n.Relation, n.Loops, p.raw)
				}
			}
		}
	}
	if len(scans) < 2 {
		t.Fatalf("found %d scans in the plans of the completion's UPDATE, want at least 2: the capture is broken", len(scans))
	}
}

// TestSchedulesDueReadOnlyTheDue: the statements with which every processor looks for
// due schedules at every heartbeat read the due ones (next fire NULL or past) through
// task_schedule_due, not every running schedule, however often they run. Cached as
// prepared statements, they went after five calls to a generic plan that read the
// running schedules in next-fire order and filtered out those not due: all of them
// when none was (FireSchedules plans them at each call: Repository.due).
func TestSchedulesDueReadOnlyTheDue(t *testing.T) {
	f := setup(t)
	const others = 2000
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task_schedule (name, topic, spec, next_fire)
		SELECT 'later-' || g, $1, '@every 1h', now() + interval '1 hour' FROM generate_series(1, $2::integer) g`, f.topic, others); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task_schedule"); err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	for _, stmt := range []string{"RESET enable_seqscan", "SET auto_explain.log_analyze = on", "SET auto_explain.log_timing = off"} {
		if _, err := conn.Exec(f.ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for call := range 8 { // past the five custom plans of a prepared statement
		// one schedule due, fired by the call; the others an hour away
		if _, err := f.pool.Exec(f.ctx, `UPDATE task_schedule SET next_fire = now() - interval '1 second' WHERE name = 'later-1'`); err != nil {
			t.Fatal(err)
		}
		capture.take(t)
		fires, err := f.repo.FireSchedules(f.ctx, conn)
		if err != nil || len(fires) != 1 {
			t.Fatalf("call %d: fires %+v, %v; want later-1 fired", call+1, fires, err)
		}
		for _, p := range capture.take(t) {
			name, ok := strings.CutPrefix(p.Query, "-- name: ")
			if !ok || !strings.HasPrefix(name, "ScheduleAnyDue") && !strings.HasPrefix(name, "ScheduleDue") {
				continue
			}
			name, _, _ = strings.Cut(name, " ")
			seen[name] = true
			var read float64
			p.Root.visit(func(n planNode) { read += n.Removed })
			if read > 10 {
				t.Errorf("call %d: %s filtered out %.0f schedules, want only the due read\nplan: %s", call+1, name, read, p.raw)
			}
		}
	}
	for _, want := range []string{"ScheduleAnyDue", "ScheduleDue", "ScheduleDueNext"} {
		if !seen[want] {
			t.Errorf("no plan of %s reported: the capture is broken (saw %v)", want, seen)
		}
	}
}

// TestSchedulesPassedOverAreNotLookedForAgain: while the only schedule due is one this
// firer passes over for now (its push refused a moment ago), a call reads
// task_schedule_due once and ends: the look for any due schedule counted it, and every
// call of every processor began the rounds' two transactions to find nothing.
func TestSchedulesPassedOverAreNotLookedForAgain(t *testing.T) {
	f := setup(t)
	f.fullTopic("full", "filler")
	f.exec(`SELECT task_schedule('grows', 'full', '@every 1s', identifier => 'g{time}')`,
		`UPDATE task_schedule SET next_fire = now() - interval '1 minute' WHERE name = 'grows'`)
	start := time.Now()
	firer, err := repository.New(repository.Config{Owner: "firer", Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	if _, err := firer.FireSchedules(f.ctx, conn); !errors.Is(err, repository.ErrQueueFull) {
		t.Fatalf("first call: %v, want the full queue", err)
	}
	capture.take(t)
	if fires, err := firer.FireSchedules(f.ctx, conn); err != nil || len(fires) != 0 {
		t.Fatalf("second call: %+v, %v; want nothing, the schedule passed over", fires, err)
	}
	var names []string
	for _, p := range capture.take(t) {
		if name, ok := strings.CutPrefix(p.Query, "-- name: "); ok {
			name, _, _ = strings.Cut(name, " ")
			names = append(names, name)
		}
	}
	if !slices.Contains(names, "ScheduleAnyDue") {
		t.Fatalf("statements planned %v: no ScheduleAnyDue, the capture is broken", names)
	}
	for _, name := range names {
		if strings.HasPrefix(name, "ScheduleDue") {
			t.Errorf("statements planned %v: the call looked for due schedules with only one passed over due", names)
			break
		}
	}
}

// TestOwnersReadTheLeasesOnce: the list of owners reads the ACTIVE tasks once for the
// page, not once per owner listed (each look read every table's ACTIVE entries: 56 000
// buffers for a page of 100 owners in an audit).
func TestOwnersReadTheLeasesOnce(t *testing.T) {
	f := setup(t)
	f.push(repository.Append, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	for i := range 5 {
		other := f.newRepo(fmt.Sprint("owner-", i+2))
		if _, err := other.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 2); err != nil {
			t.Fatal(err)
		}
	}
	conn, capture := explainedConn(f)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_analyze = on"); err != nil {
		t.Fatal(err)
	}
	capture.take(t)
	owners, err := f.repo.Owners(f.ctx, conn, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 6 {
		t.Fatalf("%d owners listed, want 6", len(owners))
	}
	for _, o := range owners {
		want, topics := int64(2), []string{f.topic}
		if o.Name == "owner-1" { // the fixture's, which leased nothing
			want, topics = 0, []string{}
		}
		if o.Leased != want || o.Topics == nil || !slices.Equal(o.Topics, topics) {
			t.Errorf("owner %s leases %d in %#v, want %d in %#v", o.Name, o.Leased, o.Topics, want, topics)
		}
	}
	plans := capture.take(t)
	if len(plans) == 0 {
		t.Fatal("auto_explain reported no plan: the capture is broken")
	}
	scans := 0
	for _, p := range plans {
		p.Root.visit(func(n planNode) {
			if !partitionPattern.MatchString(n.Relation) {
				return
			}
			scans++
			if n.Loops > 1 {
				t.Errorf("%s of %s ran %.0f times: once per owner, not once for the page\nplan: %s", n.NodeType, n.Relation, n.Loops, p.raw)
			}
		})
	}
	if scans == 0 {
		t.Errorf("no scan of a task table in the plan: the check is broken\nplan: %s", plans[0].raw)
	}
}

// finishedTasks pushes n tasks to f's topic and marks them all SUCCEEDED, completed the
// given time ago (an interval); it returns the tasks as pushed.
func finishedTasks(f *fixture, n int, ago string) []repository.Task {
	f.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("t", i)
	}
	tasks := f.push(repository.Append, ids...)
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET state = 6, completed = now() - $2::interval WHERE topic = $1`, f.topic, ago); err != nil {
		f.t.Fatal(err)
	}
	return tasks
}

// tasksRead sums the rows the plans' scans of task tables returned or filtered out, and
// counts those scans.
func tasksRead(plans []loggedPlan, only func(planNode) bool) (read float64, scans int) {
	for _, p := range plans {
		p.Root.visit(func(n planNode) {
			if partitionPattern.MatchString(n.Relation) && only(n) {
				scans++
				read += (n.Rows + n.Removed) * n.Loops
			}
		})
	}
	return read, scans
}

// TestRetentionReadsTheOldOnly: the retention pass reads a topic's finished tasks older
// than its cutoff (task_retention, migration 000030), not every finished task: with
// 2 000 finished tasks of which 5 are old enough, it reads about 5 rows. Through
// task_identifier it read and filtered out all 2 000, every minute in every processor.
func TestRetentionReadsTheOldOnly(t *testing.T) {
	f := setup(t)
	tasks := finishedTasks(f, 2000, "0")
	old := []int64{tasks[3].Sequence, tasks[500].Sequence, tasks[1000].Sequence, tasks[1500].Sequence, tasks[1999].Sequence}
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET completed = now() - interval '2 hours' WHERE topic = $1 AND sequence = ANY ($2)`, f.topic, old); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Retention = time.Hour }); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	// JIT for any cost, where the server has it: the pass turns it off (with a thousand
	// topics its cost passed jit_above_cost, and each pass compiled the statement)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_analyze = on; SET jit = on; SET jit_above_cost = 0"); err != nil {
		t.Fatal(err)
	}
	capture.take(t)
	n, err := f.repo.PurgeRetention(f.ctx, conn, 1000)
	if err != nil || n != 5 {
		t.Fatalf("PurgeRetention = %d, %v; want the 5 old tasks", n, err)
	}
	for _, seq := range old {
		wantGone(f, seq)
	}
	plans := capture.take(t)
	read, scans := tasksRead(plans, func(n planNode) bool { return n.IndexName != "" && !strings.HasSuffix(n.IndexName, "_pkey") })
	if scans == 0 {
		t.Fatalf("no index scan of a task table in the plans: the check is broken\nplans: %v", plans)
	}
	if read > 50 {
		t.Errorf("the retention pass read %.0f finished tasks to delete 5\nplan: %s", read, plans[0].raw)
	}
	var jitAvailable bool
	if err := f.pool.QueryRow(f.ctx, "SELECT pg_jit_available()").Scan(&jitAvailable); err != nil {
		t.Fatal(err)
	}
	if !jitAvailable {
		t.Log("this server has no JIT: whether the pass turns it off is not checked")
	}
	for _, p := range plans {
		if p.JIT != nil && strings.Contains(p.Query, "DELETE") {
			t.Errorf("the retention pass was compiled (JIT): %s", p.raw)
		}
	}
	// a caller's transaction keeps its JIT setting
	tx, err := conn.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := f.repo.PurgeRetention(f.ctx, tx, 1000); err != nil {
		t.Fatal(err)
	}
	var jit string
	if err := tx.QueryRow(f.ctx, "SELECT current_setting('jit')").Scan(&jit); err != nil || jit != "on" {
		t.Errorf("jit %q (%v) in the caller's transaction after the pass, want on as before", jit, err)
	}
}

// TestRetentionDeletesThroughTheKey: a pass with a batch of old tasks to delete finds
// each of them by its key, whatever the other topics hold. The DELETE joined the batch
// to the task table, and for a batch of thousands the planner hashed it and read every
// task of every table (900 000 rows, 0.8 s a pass, where the key takes 45 ms).
func TestRetentionDeletesThroughTheKey(t *testing.T) {
	f := setup(t)
	const old, others = 3000, 60000
	finishedTasks(f, old, "2 hours")
	if _, err := f.pool.Exec(f.ctx, `SELECT task_topic_create('others');
		SELECT count(*) FROM task_push_batch('others', array(SELECT 'o' || g FROM generate_series(1, `+fmt.Sprint(others)+`) g));
		UPDATE task SET state = 6, completed = now() WHERE topic = 'others'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Retention = time.Hour }); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "VACUUM ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_analyze = on"); err != nil {
		t.Fatal(err)
	}
	capture.take(t)
	n, _, err := f.repo.PurgeRetentionAfter(f.ctx, conn, "", 10000)
	if err != nil || n != old {
		t.Fatalf("PurgeRetentionAfter = %d, %v; want the %d old tasks", n, err, old)
	}
	plans := capture.take(t)
	read, scans := tasksRead(plans, func(planNode) bool { return true })
	if scans == 0 {
		t.Fatalf("no scan of a task table in the plans: the check is broken\nplans: %v", plans)
	}
	if read > 3*old {
		t.Errorf("the retention pass read %.0f tasks to delete %d\nplan: %s", read, old, plans[len(plans)-1].raw)
	}
}

// TestResultsReadTheWindow: Results reads the tasks completed in its window, through
// each topic's task_retention range, not every finished task.
func TestResultsReadTheWindow(t *testing.T) {
	f := setup(t)
	tasks := finishedTasks(f, 2000, "1 day")
	recent := []int64{tasks[3].Sequence, tasks[1000].Sequence, tasks[1999].Sequence}
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET state = 3, completed = now() WHERE topic = $1 AND sequence = ANY ($2)`, f.topic, recent); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_analyze = on"); err != nil {
		t.Fatal(err)
	}
	capture.take(t)
	now := time.Now()
	got, err := f.repo.Results(f.ctx, conn, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n := got[f.topic][repository.Failure]; n != 3 || len(got[f.topic]) != 1 {
		t.Fatalf("results %v, want the 3 failures of the last hour", got)
	}
	read, scans := tasksRead(capture.take(t), func(planNode) bool { return true })
	if scans == 0 {
		t.Fatal("no scan of a task table in the plans: the check is broken")
	}
	if read > 30 {
		t.Errorf("Results read %.0f tasks to count the 3 of its window", read)
	}
}

// TestReplaceReadsNoRedundantVersions: a REPLACE push reads the older tasks it ends, not
// every version its identifier has had (task_identifier holds no REDUNDANT task,
// migration 000031): with 2 000 REDUNDANT versions of the identifier, the Go push
// and task_push_batch each read a handful of rows to end its one READY and one SUCCEEDED
// task. Through the task_identifier of every settled state, they read and filtered out
// all 2 000, at every push.
func TestReplaceReadsNoRedundantVersions(t *testing.T) {
	f := setup(t)
	ids := make([]string, 2001)
	for i := range ids {
		ids[i] = "latest"
	}
	f.push(repository.Replace, ids...) // 2 000 REDUNDANT versions and one READY
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	conn, capture := explainedConn(f)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_analyze = on"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		push func() error
	}{
		{"Push REPLACE", func() error {
			_, err := f.repo.Push(f.ctx, conn, f.topic, repository.Replace, repository.Creation{Identifier: "latest"})
			return err
		}},
		{"task_push_batch replace", func() error {
			_, err := conn.Exec(f.ctx, "SELECT task_push_batch($1, ARRAY['latest'], insertion => 'replace')", f.topic)
			return err
		}},
	} {
		succeeded := driveTo(f, "latest", repository.Succeeded)
		capture.take(t)
		if err := tc.push(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		plans := capture.take(t)
		wantState(t, f.get(succeeded.Sequence), repository.Redundant, repository.Succeeded)
		read, scans := tasksRead(plans, func(n planNode) bool { return n.IndexName != "" && !strings.HasSuffix(n.IndexName, "_pkey") })
		if scans == 0 {
			t.Fatalf("%s: no index scan of a task table in the plans: the check is broken\nplans: %v", tc.name, plans)
		}
		if read > 50 {
			t.Errorf("%s read %.0f older tasks to end 2", tc.name, read)
			for _, p := range plans {
				t.Log(p.raw)
			}
		}
	}
	var redundant int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND state = 8", f.topic).Scan(&redundant); err != nil {
		t.Fatal(err)
	}
	if redundant != 2004 { // 2 000, then a READY and a SUCCEEDED by each push
		t.Errorf("%d REDUNDANT tasks after the pushes, want 2 004", redundant)
	}
}

// TestConditionProbesPerCandidate: a conditional poll looks for an ACTIVE task of each
// candidate's identifier with one descent of task_open bounded by the identifier
// (migration 000062), whatever the statistics say. With statistics taken when no task
// was ACTIVE, the planner joined the candidates with every ACTIVE task of the topic,
// read once and kept: a poll of 1 000 against 3 000 ACTIVE tasks compared 3 000 000 pairs,
// and the processor's polls slowed with every task it held.
func TestConditionProbesPerCandidate(t *testing.T) {
	f := setup(t)
	creations := make([]repository.Creation, 6000)
	for i := range creations {
		creations[i] = repository.Creation{Identifier: fmt.Sprintf("i%d", i)}
	}
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	if leased, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 3000); err != nil || len(leased) != 3000 {
		t.Fatalf("poll: %d tasks, %v", len(leased), err)
	}
	conn, capture := explainedConn(f)
	for _, stmt := range []string{"RESET enable_seqscan", "SET auto_explain.log_analyze = on", "SET auto_explain.log_timing = off"} {
		if _, err := conn.Exec(f.ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	for _, order := range []repository.Order{repository.FIFO, repository.LIFO} {
		for _, condition := range []repository.Condition{repository.SingularByIdentifier, repository.SingularByIdentifierSuspendUntilSuccess} {
			leased, err := f.repo.Poll(f.ctx, conn, f.topic, order, condition, 500)
			if err != nil || len(leased) != 500 {
				t.Fatalf("poll %v %v: %d tasks, %v", order, condition, len(leased), err)
			}
			probes := 0
			for _, p := range capture.take(t) {
				p.Root.visit(func(n planNode) {
					if !strings.Contains(n.IndexName, "state_hashtext_identifier") {
						return
					}
					probes++
					if !strings.Contains(n.IndexCond, "identifier =") {
						t.Errorf("poll %v %v: a probe of task_open not bounded by the identifier (%s, %v rows read %v times)\nplan: %s",
							order, condition, n.IndexCond, n.Rows+n.Removed, n.Loops, p.raw)
					}
				})
			}
			if probes == 0 {
				t.Fatalf("poll %v %v: no probe of task_open in its plans: the capture is broken", order, condition)
			}
		}
	}
}
