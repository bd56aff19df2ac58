-- 000046 on a distributed database: task_schedule_topic_check, as sql/citus/functions.sql
-- has it, stands for task_schedule's foreign key to task_topic, which distributing
-- dropped: an INSERT or UPDATE of task_schedule by hand could name a topic that does not
-- exist (the schedule then failed at every round), and a schedule created while the
-- topic was being destroyed outlived it (and pushed into a new topic of that name).
-- The plain migration changes nothing: the foreign key does it there.

-- task_schedule_topic_check is, on a distributed database, what task_schedule's foreign
-- key to task_topic does on a plain one (a table of the coordinator cannot keep one to a
-- distributed table; migration 000046): a schedule written (INSERT, or an UPDATE of its
-- topic) must name a topic that exists, or 23503 (foreign_key_violation) is raised, by
-- hand as through Go; and the topic's row is locked as the key's check locks it (KEY
-- SHARE, until the end of the transaction), so that a task_topic_destroy running
-- meanwhile either waits for the schedule and deletes it, or deletes the topic first
-- and the schedule is refused, never leaving a schedule of a topic gone.
CREATE OR REPLACE FUNCTION task_schedule_topic_check() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.topic IS DISTINCT FROM OLD.topic THEN
        PERFORM FROM task_topic tt WHERE tt.topic = NEW.topic FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'schedule %: unknown topic %', quote_literal(NEW.name), quote_nullable(NEW.topic)
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'topic';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER task_schedule_topic_check BEFORE INSERT OR UPDATE OF topic ON task_schedule
    FOR EACH ROW EXECUTE FUNCTION task_schedule_topic_check();
