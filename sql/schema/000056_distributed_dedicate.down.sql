-- 000056 reverted: nothing to undo on a plain database.
SELECT 1;
