package repository

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/sql/citus"
)

// ErrCitusRefused means DistributeCitus refused to distribute the database (no Citus, no
// worker, already distributed, processors running, schema not current); nothing was
// changed. The error says which and what to do.
var ErrCitusRefused = errors.New("cannot distribute on Citus")

// ErrDistributed means the operation is not available on a database distributed with
// DistributeCitus: reverting migrations, a pending migration without its Citus form,
// dedicating a topic's storage (Citus isolates a tenant's shard instead).
var ErrDistributed = errors.New("not supported on a distributed (Citus) database")

// CitusOptions tunes DistributeCitus.
type CitusOptions struct {
	// OwnerTimeout: an owner (a processor) whose heartbeat is newer than now −
	// OwnerTimeout, or than now − its own expiry timeout when that is longer (as
	// expiry counts it), counts as running, and refuses the distribution. 0: one minute.
	OwnerTimeout time.Duration
}

// CitusReport says what DistributeCitus did.
type CitusReport struct {
	// Tasks is how many tasks were moved into the distributed table.
	Tasks int64
	// Topics is how many topics were moved.
	Topics int64
	// Shards is the number of shards of the distributed task table.
	Shards int
	// Workers is the number of worker nodes holding them.
	Workers int
	// Took is how long the one transaction ran.
	Took time.Duration
}

// DistributeCitus turns a pgtask database on a Citus coordinator into a distributed one,
// keeping every task, in one transaction: nothing changes when it fails.
//
//   - task becomes one table distributed by topic (Citus refuses multi-level partitioned
//     tables; its shards are the buckets now), with the same columns, constraints and
//     indexes; its sequence default goes (sequences are taken on the coordinator, so
//     they stay ordered within a topic: docs/citus-research.md, "Sequences");
//   - task_topic, task_topic_limit and task_tally are distributed by topic, co-located
//     with task, so a topic's settings, limit state and counts sit on the node of its
//     tasks;
//   - task_owner and task_schedule stay plain tables of the coordinator, where every
//     process connects: owners heart-beat and schedules fire there without writing to
//     the workers; task_schedule loses its foreign key to task_topic, which Citus cannot
//     keep to a distributed table (destroying a topic deletes its schedules itself);
//   - the statement-level trigger that counts pushes (task_tally_pushed) is not recreated:
//     Citus cannot run it (docs/citus-research.md, "Since the research").
//
// It refuses, with ErrCitusRefused and nothing changed, when the citus extension is not
// in the database, task is distributed already, no worker node can hold shards (or the
// coordinator would), the schema is not at the newest migration, or a processor runs
// (an owner heart-beat within OwnerTimeout). Tasks, topics and schedules are locked
// against writers meanwhile.
//
// It also creates the functions of the hot paths that Citus runs on the node of a topic
// (sql/citus), which the repository calls on a distributed database instead of its
// plain statements: push, poll, complete, expiry, a topic's stats.
//
// Migrate applies later migrations to a distributed database in their Citus forms
// (sql/citus/migrations).
func DistributeCitus(ctx context.Context, pool *pgxpool.Pool, opts CitusOptions) (CitusReport, error) {
	if opts.OwnerTimeout < 0 {
		return CitusReport{}, invalid("owner timeout %v is negative", opts.OwnerTimeout)
	}
	if opts.OwnerTimeout == 0 {
		opts.OwnerTimeout = time.Minute
	}
	start := time.Now()
	var report CitusReport
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return report, fmt.Errorf("distribute: %w", err)
	}
	defer conn.Release()
	if err := citusReady(ctx, conn.Conn()); err != nil {
		return report, err
	}
	// READ COMMITTED whatever the database's default: the checks made again under the
	// lock below read what committed while it was waited for
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return report, fmt.Errorf("distribute: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Writers wait (and processors that start meanwhile with them), as does a
	// Repository's first look at whether its database is distributed (onCitus); then the
	// checks that depend on the data run again under the lock.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, 0)", int32(citusLockClass)); err != nil {
		return report, fmt.Errorf("distribute: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE task, task_topic, task_topic_limit, task_owner, task_schedule, task_tally IN EXCLUSIVE MODE"); err != nil {
		return report, fmt.Errorf("distribute: lock pgtask's tables: %w", err)
	}
	// another enable may have run while this one waited for the lock
	if done, err := isDistributed(ctx, tx); err != nil || done {
		if err == nil {
			err = fmt.Errorf("%w: task is already distributed: another call distributed it meanwhile; nothing was changed", ErrCitusRefused)
		}
		return report, err
	}
	if err := noLiveOwners(ctx, tx, opts.OwnerTimeout); err != nil {
		return report, err
	}
	if err := distribute(ctx, tx, &report); err != nil {
		return report, err
	}
	if err := tx.Commit(ctx); err != nil {
		return report, fmt.Errorf("distribute: commit (its outcome is unknown: run it again, it says whether it is done): %w", err)
	}
	report.Took = time.Since(start)
	return report, nil
}

// citusReady checks, before anything is locked, what can refuse the distribution
// without looking at the data: Citus, the nodes, the schema, and task not distributed.
func citusReady(ctx context.Context, conn *pgx.Conn) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s; nothing was changed", ErrCitusRefused, fmt.Sprintf(format, args...))
	}
	var installed, available bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus'),
	                                     EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citus')`).
		Scan(&installed, &available); err != nil {
		return fmt.Errorf("distribute: %w", err)
	}
	switch {
	case !installed && !available:
		return refuse("this PostgreSQL server has no citus extension: install Citus, add citus to shared_preload_libraries and connect to the coordinator (docs/citus.md)")
	case !installed:
		return refuse("the citus extension is not created in this database: run CREATE EXTENSION citus on the coordinator and every worker, then add the workers (citus_add_node)")
	}
	if done, err := isDistributed(ctx, conn); err != nil {
		return err
	} else if done {
		return refuse("task is already distributed: this database was distributed before")
	}
	version, dirty, err := migrationVersion(ctx, conn)
	if err != nil {
		return err
	}
	if latest := latestMigration(); dirty || version != latest {
		return refuse("the schema is at version %d%s, not %d: run pgtask migrate up first", version, map[bool]string{true: " (dirty)"}[dirty], latest)
	}
	var workers int
	var coordinatorShards bool
	if err := conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE groupid <> 0 AND shouldhaveshards),
		       coalesce(bool_or(groupid = 0 AND shouldhaveshards), false)
		FROM pg_dist_node WHERE noderole = 'primary' AND isactive`).Scan(&workers, &coordinatorShards); err != nil {
		return fmt.Errorf("distribute: read the nodes: %w", err)
	}
	if workers == 0 {
		return refuse("no worker node can hold shards in this database (pg_dist_node is kept per database: run citus_add_node for each worker here)")
	}
	if coordinatorShards {
		return refuse("the coordinator would hold shards too: run SELECT citus_set_node_property(host, port, 'shouldhaveshards', false) for it, or leave it out of pg_dist_node")
	}
	// What the table made again (LIKE task) and the views made again from their
	// definitions would not keep, while they keep the grants: a role confined to some
	// topics by a policy or a security barrier would read every topic.
	var security []string
	if err := conn.QueryRow(ctx, `SELECT ARRAY(
		SELECT 'row security on task' FROM pg_class WHERE oid = 'task'::regclass AND (relrowsecurity OR relforcerowsecurity)
		UNION ALL
		SELECT 'policy ' || quote_ident(polname) || ' on task' FROM pg_policy WHERE polrelid = 'task'::regclass
		UNION ALL
		SELECT 'view ' || c.oid::regclass || ' (' || array_to_string(c.reloptions, ', ') || ')'
		FROM pg_class c WHERE c.relkind = 'v' AND c.reloptions IS NOT NULL AND c.oid IN (
		    SELECT r.ev_class FROM pg_rewrite r JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
		    WHERE d.refobjid = 'task'::regclass))`).Scan(&security); err != nil {
		return fmt.Errorf("distribute: read task's row security: %w", err)
	}
	if len(security) > 0 {
		return refuse("%s: the distributed table and the views made again would not keep them, while they keep the grants; remove them, enable, and make them again on the distributed table", strings.Join(security, ", "))
	}
	return nil
}

// isDistributed reports whether task is a Citus table (false without Citus).
func isDistributed(ctx context.Context, conn rowQuerier) (bool, error) {
	var distributed bool
	err := conn.QueryRow(ctx, `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL`).Scan(&distributed)
	if err != nil || !distributed {
		return false, errorf("distribute", err)
	}
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass('task'))`).
		Scan(&distributed); err != nil {
		return false, fmt.Errorf("distribute: %w", err)
	}
	return distributed, nil
}

// errorf wraps err with what, or returns nil.
func errorf(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// noLiveOwners refuses while an owner heart-beats: a processor would fail on every
// statement once the tables change under it, and its leases would be copied as they were.
func noLiveOwners(ctx context.Context, tx pgx.Tx, timeout time.Duration) error {
	rows, err := tx.Query(ctx, `SELECT owner FROM task_owner
		WHERE heartbeat > now() - GREATEST($1::bigint, expiry_ms) * interval '1 millisecond' ORDER BY owner`, durationMs(timeout))
	if err != nil {
		return fmt.Errorf("distribute: read the owners: %w", err)
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("distribute: read the owners: %w", err)
	}
	if len(live) == 0 {
		return nil
	}
	named := live
	if len(named) > 5 {
		named = named[:5]
	}
	quoted := make([]string, len(named))
	for i, o := range named {
		quoted[i] = fmt.Sprintf("%q", o)
	}
	more := ""
	if len(live) > len(named) {
		more = fmt.Sprintf(" and %d more", len(live)-len(named))
	}
	return fmt.Errorf("%w: %d processes are running (owners heart-beating within %v, or within their own expiry timeout when longer: %s%s): stop them first; nothing was changed",
		ErrCitusRefused, len(live), timeout, strings.Join(quoted, ", "), more)
}

// keptSQL is a SQL expression of the statements that give an object dropped and made
// again its owner and privileges: kind is its kind for ALTER (TABLE, VIEW, FUNCTION), on
// what GRANT puts before its name, and name, owner and acl SQL expressions of its name
// (as a statement names it), its owner's oid and its ACL. It gives none when the owner
// is the current user and the ACL the default (NULL). The owner's own privileges are
// all of them on the new object (one who revoked some of their own gets them back).
func keptSQL(kind, on, name, owner, acl string) string {
	return fmt.Sprintf(`ARRAY(SELECT k.q FROM (
		SELECT 0 AS o, format('ALTER %[1]s %%s OWNER TO %%I', %[3]s, pg_get_userbyid(%[4]s)) AS q
		WHERE %[4]s <> (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)
		UNION ALL
		SELECT 1, format('REVOKE ALL ON %[2]s%%s FROM PUBLIC', %[3]s) WHERE %[5]s IS NOT NULL
		UNION ALL
		SELECT 2, format('GRANT %%s ON %[2]s%%s TO %%s%%s', g.privilege_type, %[3]s,
		                 CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
		                 CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
		FROM aclexplode(%[5]s) g WHERE g.grantee <> %[4]s) k ORDER BY k.o)`, kind, on, name, owner, acl)
}

// distribute runs the conversion in tx (DistributeCitus), after the checks.
func distribute(ctx context.Context, tx pgx.Tx, report *CitusReport) error {
	step := func(what, q string, args ...any) error {
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("distribute: %s: %w", what, err)
		}
		return nil
	}
	// DDL after a distributed table's creation in one transaction must not run over
	// parallel connections (Citus refuses it otherwise).
	if err := step("set sequential mode", "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"); err != nil {
		return err
	}
	// What depends on task's row type goes and comes back: the views and functions
	// (task_pretty, task_complete), by their definitions, with their comments, their
	// owners and their privileges (kept: the statements that give them back).
	type object struct {
		drop, create, comment string
		kept                  []string
	}
	var dependents []object
	rows, err := tx.Query(ctx, `
		SELECT 'DROP VIEW ' || c.oid::regclass, 'CREATE VIEW ' || c.oid::regclass || ' AS ' || pg_get_viewdef(c.oid),
		       coalesce('COMMENT ON VIEW ' || c.oid::regclass || ' IS ' || quote_literal(obj_description(c.oid, 'pg_class')), ''),
		       `+keptSQL("VIEW", "", "c.oid::regclass::text", "c.relowner", "c.relacl")+`
		FROM pg_class c WHERE c.relkind = 'v' AND c.oid IN (
		    SELECT r.ev_class FROM pg_rewrite r JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
		    WHERE d.refobjid = 'task'::regclass)
		UNION ALL
		SELECT 'DROP FUNCTION ' || p.oid::regprocedure, pg_get_functiondef(p.oid),
		       coalesce('COMMENT ON FUNCTION ' || p.oid::regprocedure || ' IS ' || quote_literal(obj_description(p.oid, 'pg_proc')), ''),
		       `+keptSQL("FUNCTION", "FUNCTION ", "p.oid::regprocedure::text", "p.proowner", "p.proacl")+`
		FROM pg_proc p WHERE p.oid IN (
		    SELECT d.objid FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
		    AND d.refobjid = (SELECT reltype FROM pg_class WHERE oid = 'task'::regclass))`)
	if err != nil {
		return fmt.Errorf("distribute: read what depends on task: %w", err)
	}
	dependents, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (object, error) {
		var o object
		return o, r.Scan(&o.drop, &o.create, &o.comment, &o.kept)
	})
	if err != nil {
		return fmt.Errorf("distribute: read what depends on task: %w", err)
	}
	// task's own owner and privileges, which the new table (LIKE the old) would not have:
	// an application's role granted its rows would be refused every push and poll
	var taskKept []string
	if err := tx.QueryRow(ctx, `SELECT `+keptSQL("TABLE", "TABLE ", "'task'", "c.relowner", "c.relacl")+`
		FROM pg_class c WHERE c.oid = 'task'::regclass`).Scan(&taskKept); err != nil {
		return fmt.Errorf("distribute: read task's owner and privileges: %w", err)
	}
	// The indexes of task (the partitioned parent's), to create again by name.
	rows, err = tx.Query(ctx, `SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE x.indrelid = 'task'::regclass AND NOT x.indisprimary ORDER BY i.relname`)
	if err != nil {
		return fmt.Errorf("distribute: read task's indexes: %w", err)
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var i index
		return i, r.Scan(&i.name, &i.def)
	})
	if err != nil {
		return fmt.Errorf("distribute: read task's indexes: %w", err)
	}
	for _, o := range dependents {
		if err := step("drop "+o.drop, o.drop); err != nil {
			return err
		}
	}
	if err := step("rename task", "ALTER TABLE task RENAME TO task_undistributed"); err != nil {
		return err
	}
	if err := step("rename its key", "ALTER INDEX task_pkey RENAME TO task_undistributed_pkey"); err != nil {
		return err
	}
	for _, i := range indexes {
		if err := step("rename index "+i.name, fmt.Sprintf("ALTER INDEX %s RENAME TO %s",
			pgx.Identifier{i.name}.Sanitize(), pgx.Identifier{i.name + "_undistributed"}.Sanitize())); err != nil {
			return err
		}
	}
	for _, s := range []struct{ what, q string }{
		{"create task", `CREATE TABLE task (LIKE task_undistributed INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`},
		{"drop the sequence default", `ALTER TABLE task ALTER COLUMN sequence DROP DEFAULT`},
		{"add the key", `ALTER TABLE task ADD CONSTRAINT task_pkey PRIMARY KEY (sequence, topic) WITH (fillfactor = 50)`},
	} {
		if err := step(s.what, s.q); err != nil {
			return err
		}
	}
	// before the shards are made, which take the table's owner and privileges
	for _, q := range taskKept {
		if err := step("give task back its owner and privileges", q); err != nil {
			return err
		}
	}
	for _, s := range []struct{ what, q string }{
		{"distribute task", `SELECT create_distributed_table('task', 'topic', colocate_with := 'none')`},
		{"move the tasks", `INSERT INTO task SELECT * FROM task_undistributed`},
	} {
		if err := step(s.what, s.q); err != nil {
			return err
		}
	}
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM task_undistributed").Scan(&report.Tasks); err != nil {
		return fmt.Errorf("distribute: count the tasks: %w", err)
	}
	if err := step("drop the old table", "DROP TABLE task_undistributed"); err != nil {
		return err
	}
	for _, i := range indexes {
		// "ON ONLY" was the partitioned parent's: the new table has no partitions
		def := strings.Replace(i.def, " ON ONLY ", " ON ", 1)
		if err := step("create index "+i.name, def); err != nil {
			return err
		}
	}
	if err := step("create statistics", "CREATE STATISTICS task_sequence_topic (dependencies) ON topic, sequence FROM task"); err != nil {
		return err
	}
	for _, o := range dependents {
		if err := step("recreate "+strings.TrimPrefix(o.drop, "DROP "), o.create); err != nil {
			return err
		}
		if o.comment != "" {
			if err := step("comment "+strings.TrimPrefix(o.drop, "DROP "), o.comment); err != nil {
				return err
			}
		}
		for _, q := range o.kept {
			if err := step("give "+strings.TrimPrefix(o.drop, "DROP ")+" back its owner and privileges", q); err != nil {
				return err
			}
		}
	}
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM task_topic").Scan(&report.Topics); err != nil {
		return fmt.Errorf("distribute: count the topics: %w", err)
	}
	for _, s := range []struct{ what, q string }{
		// the shard is every topic's table now
		{"name the topics' table", `UPDATE task_topic SET partition = 'task', dedicated = false`},
		// Foreign keys to task_topic go while it changes kind; task_topic_limit's comes
		// back between co-located tables, task_schedule's cannot (a local table's to a
		// distributed one): destroying a topic deletes its schedules itself.
		{"drop task_schedule's foreign key", `ALTER TABLE task_schedule DROP CONSTRAINT task_schedule_topic_fkey`},
		{"drop task_topic_limit's foreign key", `ALTER TABLE task_topic_limit DROP CONSTRAINT task_topic_limit_topic_fkey`},
		{"distribute task_topic", `SELECT create_distributed_table('task_topic', 'topic', colocate_with := 'task')`},
		{"distribute task_topic_limit", `SELECT create_distributed_table('task_topic_limit', 'topic', colocate_with := 'task')`},
		{"restore task_topic_limit's foreign key", `ALTER TABLE task_topic_limit ADD CONSTRAINT task_topic_limit_topic_fkey
			FOREIGN KEY (topic) REFERENCES task_topic (topic) ON DELETE CASCADE`},
		{"distribute task_tally", `SELECT create_distributed_table('task_tally', 'topic', colocate_with := 'task')`},
	} {
		if err := step(s.what, s.q); err != nil {
			return err
		}
	}
	// The functions of the hot paths (sql/citus), each run whole on the node of its
	// topic, and every other function of pgtask on every node, for them to call.
	if err := step("create the functions of sql/citus", citus.Functions); err != nil {
		return err
	}
	if err := step("put the functions on every node", `
		SELECT create_distributed_function(p.oid::regprocedure) FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'task\_%'
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')`); err != nil {
		return err
	}
	for _, f := range []string{
		"task_citus_push(text,smallint,bigint[],text[],text[],text[],boolean[],smallint[],bigint[],bigint[],text[])",
		"task_citus_poll(text,text,boolean,smallint,integer,smallint,bigint)",
		"task_citus_complete(text,text,bigint[],integer[],smallint[],text[],bigint[])",
		"task_citus_expire_owners(text,text[])",
		"task_citus_stats(text)",
		"task_citus_cancel(text,bigint[],text)",
		"task_citus_reset(text,bigint[])",
		"task_citus_limit_usage(text)",
		"task_citus_analyze(text)",
	} {
		if err := step("delegate "+f, `SELECT create_distributed_function($1::regprocedure, 'p_topic', colocate_with := 'task', force_delegation := true)`, f); err != nil {
			return err
		}
	}
	// The rows of the tables distributed with data stay in the coordinator's local
	// table, hidden, until truncated.
	for _, t := range []string{"task_topic", "task_topic_limit", "task_tally"} {
		if err := step("drop the local copy of "+t, "SELECT truncate_local_data_after_distributing_table($1::regclass)", t); err != nil {
			return err
		}
	}
	if err := tx.QueryRow(ctx, `SELECT count(*), count(DISTINCT nodename || ':' || nodeport) FROM citus_shards WHERE table_name = 'task'::regclass`).
		Scan(&report.Shards, &report.Workers); err != nil {
		return fmt.Errorf("distribute: read the shards: %w", err)
	}
	return nil
}
