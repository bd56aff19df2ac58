-- 000051 on a distributed database: task_citus_expire_owners tells a topic with a
-- concurrency limit 'WORK <md5(topic)>', without a delay, when the tasks it made READY
-- are not due yet, as the plain TaskExpire statement now does: the processors waiting at
-- the limit poll at once, not when the retried tasks fall due. Citus passes the new body
-- of the distributed function on to every node.

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
    IF FOUND AND NOT (v_topic.capped AND v_first.due > clock_timestamp()) THEN
        v_notice := task_citus_work(p_topic, v_first.priority, v_first.sequence, v_first.due);
    ELSIF v_topic.capped THEN
        -- processors waiting at a concurrency limit may poll again, not only when the
        -- retried tasks fall due (000051)
        v_notice := 'WORK ' || md5(p_topic);
    END IF;
    RETURN QUERY
    SELECT cardinality(v_done)::bigint, (SELECT count(*) FROM unnest(v_done) r WHERE r.state = 1), v_notice;
END
$$;
