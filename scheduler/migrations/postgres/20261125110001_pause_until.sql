-- A maintenance window: a job paused with `until` resumes by itself at this
-- instant (ms), done by the maintenance service (maintenance.rs) on one
-- replica. NULL: paused without an end, or not paused.
ALTER TABLE job_schedule ADD COLUMN paused_until BIGINT;
CREATE INDEX job_schedule_paused_until ON job_schedule (paused_until)
    WHERE paused_until IS NOT NULL;
