-- How many jobs the job's on_success starts, copied out of the spec on
-- every write like overlap and max_concurrent, so the one-statement finish
-- reads a column instead of parsing the spec (payload included) for every
-- firing it ends. NULL: not known; such a job's successes take the
-- transaction path, which reads the spec. A spec without on_success does
-- not carry the key, so only the jobs that mention it stay unknown here
-- until they are next written.
ALTER TABLE jobs ADD COLUMN on_success_jobs INTEGER;
UPDATE jobs SET on_success_jobs = 0 WHERE spec NOT LIKE '%"on_success"%';
