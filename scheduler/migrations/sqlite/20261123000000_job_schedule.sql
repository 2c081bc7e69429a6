-- Where each job is in its schedule, apart from what the job is.
--
-- Staging advances every due job once per firing. In `jobs` that update
-- rewrote the whole row (the spec JSON is inline) and, because
-- `next_fire_at` is indexed, added an entry to all four of its indexes.
-- Here it rewrites a row of a few dozen bytes with two indexes, and `jobs`
-- changes only when a job definition does. Kept in step with
-- ../postgres/20261123000000_job_schedule.sql (SQLite has no fillfactor).
CREATE TABLE job_schedule (
    job_id       TEXT PRIMARY KEY,
    -- FNV-1a(id) mod the configured partition count (see store/mod.rs).
    part         INTEGER NOT NULL,
    -- active | paused | completed
    state        TEXT NOT NULL,
    -- The next instant not yet staged; NULL when the schedule is exhausted.
    next_fire_at INTEGER
);

INSERT INTO job_schedule (job_id, part, state, next_fire_at)
SELECT id, part, state, next_fire_at FROM jobs;

DROP INDEX jobs_due;
ALTER TABLE jobs DROP COLUMN state;
ALTER TABLE jobs DROP COLUMN next_fire_at;
ALTER TABLE jobs DROP COLUMN part;

-- "Active jobs of partition P due before T", the slicer's query.
CREATE INDEX job_schedule_due ON job_schedule (part, next_fire_at) WHERE state = 'active';
