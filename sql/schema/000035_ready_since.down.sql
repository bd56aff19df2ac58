-- 000035 changed nothing on a plain database (its up says why).
SELECT 1;
