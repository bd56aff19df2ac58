-- 100 jobs per statement
INSERT INTO jobs (payload) SELECT '' FROM generate_series(1, 100);
