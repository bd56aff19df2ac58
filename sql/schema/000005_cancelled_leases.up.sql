-- 000005: a processor's periodic check for cancelled leases reads an index of its own.
--
-- TaskCancelledLeases (the fallback for a CANCEL notification a processor missed) ran
-- every heartbeat on task_open's ACTIVE entries: under load tens of thousands of them,
-- most pointing at versions that completions had already replaced, about 20 ms a
-- second. task_cancelled holds only ACTIVE tasks flagged cancelled, normally none, so
-- the check reads an empty index and no update of an uncancelled task writes to it.
CREATE INDEX task_cancelled ON task (owner) WHERE state = 0 AND cancelled;
