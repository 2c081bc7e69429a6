-- 1 for a firing staged by jobs.backfill (store/backfill.rs) or a retry of
-- one, so history tells a re-run of the past from the schedule's own runs.
ALTER TABLE firings ADD COLUMN backfill INTEGER NOT NULL DEFAULT 0;
