-- 000045 on a distributed database: expiry names the owners whose leases it takes back.
-- task_citus_expire took, in a topic, the leases of every owner other than the caller
-- not in a list of the live owners the caller had read from task_owner before: an owner
-- that registered and leased in between (a processor starting while another one's row
-- was stale, when every survivor expires at each heartbeat) lost its new leases, and
-- their tasks ran twice. task_citus_expire_owners takes those of the owners listed (read
-- stale, or leasing without a row), as sql/citus/functions.sql has it, delegated to the
-- topic's node as the other task_citus_ functions are. task_citus_expire is dropped: a
-- processor of the release before, still running during an upgrade, fails its expiry
-- (an error it logs and retries at the next heartbeat) rather than take live leases.

DROP FUNCTION IF EXISTS task_citus_expire(text, text, text[]);

-- task_citus_expire_owners takes back, in one topic, the leases of the owners p_owners
-- (TaskExpire of sql/queries/task_process.sql, per topic): the owners the caller found
-- stale in task_owner on the coordinator, or, when it takes orphans back, leasing
-- without a row there (a forced delegated function may read only its topic's tables).
-- The caller names the owners to take back rather than those to spare: an owner that
-- registers and leases after the caller read task_owner is in neither list, and keeps
-- its leases (migration 000045; task_citus_expire before it took the leases of every
-- owner not in a list of the live read beforehand). They become EXPIRED, or READY after
-- a backoff when the topic's retry policy grants another attempt, or FAILED when
-- cancelled. It returns how many were taken back and made READY, and the payload of the
-- notification to send (NULL: none).
CREATE OR REPLACE FUNCTION task_citus_expire_owners(p_topic text, p_owners text[])
RETURNS TABLE (expired bigint, retried bigint, notification text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := now();
    v_epoch   double precision;
    v_topic   record;
    v_stale   bigint[];
    v_jitter  double precision[];
    v_done    task[];
    v_first   record;
    v_notice  text;
BEGIN
    v_epoch := extract(epoch FROM v_now);
    SELECT p.max_attempts, p.backoff_base_ms, p.backoff_cap_ms, p.backoff_jitter_ms,
           p.concurrency IS NOT NULL OR p.key_concurrency IS NOT NULL AS capped
    INTO v_topic FROM task_topic p WHERE p.topic = p_topic;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_stale := ARRAY(
        SELECT t.sequence FROM task t
        WHERE t.topic = p_topic AND t.state = 0 AND t.owner = ANY (p_owners)
        FOR UPDATE OF t SKIP LOCKED);
    IF cardinality(v_stale) = 0 THEN
        RETURN;
    END IF;
    v_jitter := ARRAY(SELECT random() * v_topic.backoff_jitter_ms FROM generate_series(1, cardinality(v_stale)));
    WITH done AS (
        UPDATE task t
        SET state      = CASE WHEN t.cancelled THEN 3
                              WHEN t.attempt - t.returned < v_topic.max_attempts THEN 1
                              ELSE 2 END,
            not_before = CASE WHEN NOT t.cancelled AND t.attempt - t.returned < v_topic.max_attempts
                              THEN to_timestamp(v_epoch + (least(v_topic.backoff_cap_ms::double precision,
                                                                 v_topic.backoff_base_ms * power(2::double precision, least(t.attempt - t.returned - 1, 60)))
                                                           + s.jitter) / 1e3)
                              ELSE t.not_before END,
            completed  = CASE WHEN t.cancelled THEN v_now ELSE t.completed END,
            output     = CASE WHEN t.cancelled THEN 'cancelled'
                              ELSE 'expired: owner ' || t.owner || ' stopped heart-beating' END,
            errors     = array_append(t.errors, CASE WHEN t.cancelled THEN 'cancelled'
                              ELSE 'expired: owner ' || t.owner || ' stopped heart-beating' END)
        FROM unnest(v_stale, v_jitter) AS s(sequence, jitter)
        WHERE t.topic = p_topic AND t.sequence = s.sequence
        RETURNING t.*
    )
    SELECT coalesce(array_agg(done), '{}') INTO v_done FROM done;
    SELECT r.priority, r.sequence, min(coalesce(r.not_before, '-infinity')) OVER () AS due INTO v_first
    FROM unnest(v_done) r WHERE r.state = 1 ORDER BY r.priority, r.sequence LIMIT 1;
    IF FOUND THEN
        v_notice := task_citus_work(p_topic, v_first.priority, v_first.sequence, v_first.due);
    ELSIF v_topic.capped THEN
        -- processors waiting at a concurrency limit may poll again
        v_notice := 'WORK ' || md5(p_topic);
    END IF;
    RETURN QUERY
    SELECT cardinality(v_done)::bigint, (SELECT count(*) FROM unnest(v_done) r WHERE r.state = 1), v_notice;
END
$$;

-- delegated to the topic's node (a plain database, where repository's tests apply the
-- forms too, has no Citus to ask)
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_distributed_function('task_citus_expire_owners(text,text[])'::regprocedure, 'p_topic',
                                            colocate_with := 'task', force_delegation := true);
    END IF;
END
$$;
