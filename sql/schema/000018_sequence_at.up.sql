-- 000018: a time becomes a sequence without reading the tasks before it.
--
-- The dashboard's and the CLI's creation-time filters turn a time into a sequence range
-- (Repository.Resolve): the first sequence created at or after a time, the last created
-- at or before it. min(sequence) WHERE created >= t read every task table, and with 10
-- million tasks took 3 to 12 seconds. Sequences are taken in creation order (created is
-- the pushing transaction's start, the sequence is taken during it), so the boundary is
-- found by a binary search over the sequences instead: each step reads the first task
-- at or after a sequence through the primary keys, about 40 steps whatever the number
-- of tasks. Where concurrent pushes' transactions overlap the time, their tasks' order
-- by sequence and by creation time may differ; the boundary then falls among them.

-- task_sequence_at returns the first sequence, among all tasks, created after p_at (at
-- or after unless p_strictly), or NULL when none.
CREATE FUNCTION task_sequence_at(p_at timestamptz, p_strictly boolean) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_lo      bigint := 0; -- every task at or below it was created before the time
    v_hi      bigint;      -- the answer, if any, is below it or is v_found
    v_mid     bigint;
    v_seq     bigint;
    v_created timestamptz;
    v_found   bigint;
BEGIN
    SELECT t.sequence INTO v_hi FROM task t ORDER BY t.sequence DESC LIMIT 1;
    IF v_hi IS NULL THEN
        RETURN NULL;
    END IF;
    v_hi := v_hi + 1;
    WHILE v_lo + 1 < v_hi LOOP
        v_mid := v_lo + (v_hi - v_lo) / 2;
        SELECT t.sequence, t.created INTO v_seq, v_created FROM task t
        WHERE t.sequence >= v_mid AND t.sequence < v_hi
        ORDER BY t.sequence LIMIT 1;
        IF NOT FOUND THEN
            v_hi := v_mid;
        ELSIF v_created > p_at OR (v_created = p_at AND NOT p_strictly) THEN
            v_found := v_seq;
            v_hi := v_mid;
        ELSE
            v_lo := v_seq;
        END IF;
    END LOOP;
    RETURN v_found;
END
$$;
