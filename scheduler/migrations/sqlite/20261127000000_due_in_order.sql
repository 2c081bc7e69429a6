-- Staging reads a partition's due jobs a batch at a time, in
-- (next_fire_at, job_id) order. With the job id in the index that order is
-- the index's own, so a batch reads its own rows and no more; without it,
-- every batch read and sorted every job due at the same instant (all of a
-- burst's). Kept in step with ../postgres/20261127000000_due_in_order.sql.
DROP INDEX job_schedule_due;
CREATE INDEX job_schedule_due ON job_schedule (part, next_fire_at, job_id) WHERE state = 'active';
