#!/usr/bin/env bash
# The storage layouts prototyped for migration 000009 (issue 14), measured as
# BENCHMARKS.md reports them: a burn-down of 50 000 tasks on one topic, RUNS times per
# layout, the layouts in turn.
#
#   bench/prototypes/storage-layouts.sh ADMIN_URL [RUNS] [LAYOUT...]
#
# ADMIN_URL names a maintenance database of a benchmark cluster (e.g.
# postgres://postgres@127.0.0.1:5499/postgres); each run gets a fresh database there.
# The prototypes change the schema of version 8 by hand (tables and indexes, and a
# task_topic_create without partitions) and run the queries of version 8, so the binary
# is built from commit d07461a, the last one before 000009 (in a temporary worktree).
# LAYOUT is any of:
#   list      version 8 as it is: one LIST partition per topic
#   hash      HASH(topic) into 16 tables, indexes keyed by the topic's text, key (topic, sequence)
#   hkey      HASH(topic) into 16 tables, indexes keyed by hashtext(topic), key (sequence, topic)
#   hkey64    the same with 64 tables
#   hkeypage  hkey with an index (hashtext(topic), sequence) for paging
#   bucket    hkey's indexes; HASH(topic) into 16 buckets, each LIST(topic) with a DEFAULT
#             table (what 000009 built)
#   default   hkey's indexes; LIST(topic) with a DEFAULT table HASH(topic) into 16
#   plain     hkey's indexes on one unpartitioned table
# (default: all). It prints one line per run and the median per layout.
set -euo pipefail

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
admin="$1" runs="${2:-3}"
shift $(($# >= 2 ? 2 : 1))
layouts=("$@")
((${#layouts[@]})) || layouts=(list hash hkey hkey64 hkeypage bucket default plain)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/src" d07461a >/dev/null 2>&1
(cd "$work/src" && go build -o "$work/pgtask" ./cmd/pgtask)
base="${admin%/*}"
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"

# convert URL LAYOUT: the layout's tables, indexes and topic functions on a fresh
# version-8 database (no tasks yet).
convert() {
	local url=$1 layout=$2 n=16 key="sequence, topic" top="HASH" idx=hkey
	case $layout in
	list) return ;;
	hash) key="topic, sequence" idx=text ;;
	hkey64) n=64 ;;
	bucket) top="BUCKET" ;;
	default) top="DEFAULT" ;;
	plain) top="" ;;
	esac
	local partitioning=""
	[[ -n $top ]] && partitioning="PARTITION BY $([[ $top == DEFAULT ]] && echo LIST || echo HASH) (topic)"
	{
		cat <<SQL
BEGIN;
DROP TABLE task CASCADE;
ALTER TABLE task_topic DROP CONSTRAINT task_topic_partition_key;
CREATE TABLE task (
    topic text NOT NULL, sequence bigint NOT NULL DEFAULT nextval('task_sequence'),
    identifier text COLLATE "C" NOT NULL CHECK (length(identifier) BETWEEN 1 AND 500),
    state smallint NOT NULL DEFAULT 1 CHECK (state BETWEEN 0 AND 8),
    descent smallint NOT NULL DEFAULT 1 CHECK (descent BETWEEN 1 AND 8),
    owner text NULL, created timestamptz NOT NULL DEFAULT now(), completed timestamptz NULL,
    input text NULL, output text NULL, reference text COLLATE "C" NULL CHECK (length(reference) <= 500),
    priority smallint NOT NULL DEFAULT 0, not_before timestamptz NULL,
    attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0), returned integer NOT NULL DEFAULT 0 CHECK (returned >= 0),
    errors text[] NULL, cancelled boolean NOT NULL DEFAULT false,
    PRIMARY KEY ($key)) $partitioning;
DO \$\$ BEGIN
  FOR r IN 0..$n - 1 LOOP
    CASE '$top'
    WHEN 'HASH' THEN
      EXECUTE format('CREATE TABLE task_s%s PARTITION OF task FOR VALUES WITH (MODULUS $n, REMAINDER %s)', r, r);
    WHEN 'BUCKET' THEN
      EXECUTE format('CREATE TABLE task_b%s PARTITION OF task FOR VALUES WITH (MODULUS $n, REMAINDER %s) PARTITION BY LIST (topic)', r, r);
      EXECUTE format('CREATE TABLE task_s%s PARTITION OF task_b%s DEFAULT', r, r);
    WHEN 'DEFAULT' THEN
      IF r = 0 THEN CREATE TABLE task_shared PARTITION OF task DEFAULT PARTITION BY HASH (topic); END IF;
      EXECUTE format('CREATE TABLE task_s%s PARTITION OF task_shared FOR VALUES WITH (MODULUS $n, REMAINDER %s)', r, r);
    ELSE EXIT;
    END CASE;
  END LOOP;
END \$\$;
SQL
		if [[ $idx == text ]]; then
			cat <<'SQL'
CREATE INDEX task_ready ON task (topic, priority, sequence) WHERE state = 1;
CREATE INDEX task_open ON task (state, topic, identifier, sequence) WHERE state <= 4 AND state <> 1;
CREATE INDEX task_identifier ON task (topic, identifier, sequence) WHERE state >= 2;
CREATE INDEX task_reference ON task (topic, reference, sequence) WHERE reference IS NOT NULL;
SQL
		else
			cat <<'SQL'
CREATE INDEX task_ready ON task (hashtext(topic), priority, sequence) WHERE state = 1;
CREATE INDEX task_open ON task (state, hashtext(topic), identifier, sequence) WHERE state <= 4 AND state <> 1;
CREATE INDEX task_identifier ON task (hashtext(topic), identifier, sequence) WHERE state >= 2;
CREATE INDEX task_reference ON task (hashtext(topic), reference, sequence) WHERE reference IS NOT NULL;
-- the NONE/FIFO poll of version 8, on the hashed key (the only one the burn-down runs)
CREATE OR REPLACE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer)
RETURNS SETOF tid LANGUAGE plpgsql VOLATILE SET enable_sort = off SET enable_bitmapscan = off AS $f$
BEGIN
  RETURN QUERY SELECT t.ctid FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
      AND (t.not_before IS NULL OR t.not_before <= now())
    ORDER BY t.priority, t.sequence LIMIT p_size FOR UPDATE OF t SKIP LOCKED;
END $f$;
SQL
		fi
		[[ $layout == hkeypage ]] && echo "CREATE INDEX task_page ON task (hashtext(topic), sequence);"
		cat <<'SQL'
CREATE INDEX task_ready_identifier ON task USING hash ((topic || E'\n' || identifier)) WHERE state = 1;
CREATE INDEX task_created ON task USING brin (created);
CREATE INDEX task_cancelled ON task (owner) WHERE state = 0 AND cancelled;
CREATE VIEW task_pretty AS SELECT * FROM task;
DO $$ DECLARE v regclass; BEGIN
  FOR v IN SELECT x.indexrelid FROM pg_index x WHERE x.indisprimary
           AND x.indrelid IN (SELECT relid FROM pg_partition_tree('task') WHERE isleaf) LOOP
    EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v);
  END LOOP;
END $$;
-- A topic is a row; partition names the table it lands in (for the processor's VACUUM).
CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean LANGUAGE plpgsql AS $f$
DECLARE v_table text := 'task';
BEGIN
  SELECT c.relname INTO v_table FROM pg_class c
  WHERE c.relname ~ '^task_s[0-9]+$' AND c.relkind = 'r'
    AND satisfies_hash_partition((SELECT a.relid FROM pg_partition_ancestors(c.oid) a
                                  JOIN pg_partitioned_table p ON p.partrelid = a.relid WHERE p.partstrat = 'h'),
                                 (SELECT count(*) FROM pg_class d WHERE d.relname ~ '^task_s[0-9]+$' AND d.relkind = 'r')::int,
                                 substring(c.relname FROM 7)::int, p_topic);
  INSERT INTO task_topic (topic, partition) VALUES (p_topic, coalesce(v_table, 'task')) ON CONFLICT (topic) DO NOTHING;
  RETURN FOUND;
END $f$;
CREATE OR REPLACE FUNCTION task_topic_destroy(p_topic text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  DELETE FROM task_topic WHERE topic = p_topic;
  IF NOT FOUND THEN RETURN false; END IF;
  DELETE FROM task WHERE topic = p_topic;
  RETURN true;
END $f$;
COMMIT;
SQL
	} | psql -qAtX -v ON_ERROR_STOP=1 "$url" >/dev/null
}

field() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9.]*\).*/\1/p" <<<"$2"; }
declare -A results
for run in $(seq "$runs"); do
	for layout in "${layouts[@]}"; do
		db="layout_${layout}"
		psql -qAtX "$admin" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
		DATABASE_URL="$base/$db" "$work/pgtask" migrate up >/dev/null
		convert "$base/$db" "$layout"
		psql -qAtX "$base/$db" -c CHECKPOINT >/dev/null
		out="$(DATABASE_URL="$base/$db" "$work/pgtask" bench --mode burndown --tasks 50000 --json | tail -n 1)"
		tps="$(field tasks_per_second "$out")"
		echo "run $run $layout: $tps tasks/s (process $(field process_per_second "$out")/s)"
		results[$layout]+="$tps "
		psql -qAtX "$admin" -c "DROP DATABASE $db" >/dev/null
	done
done
for layout in "${layouts[@]}"; do
	printf '%s\n' ${results[$layout]} | sort -n | awk -v l="$layout" '{ v[NR] = $1 } END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "median %-9s %8.0f tasks/s\n", l, m }'
done
