-- one job per statement
INSERT INTO jobs (payload) VALUES ('');
