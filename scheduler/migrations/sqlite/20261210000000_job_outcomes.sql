-- The newest succeeded and the newest failed end of each job, for the
-- per-job freshness gauges (chime_job_last_success_timestamp_seconds and
-- chime_job_last_failure_timestamp_seconds, scheduler/src/ops/job_metrics.rs).
--
-- History cannot answer it: retention prunes it, and a job that failed more
-- than --history-keep times since its last success would lose that success.
-- A row of its own table, not a column of `jobs` or `job_schedule`, so the
-- finish that writes it never locks what a put or a staging locks.
-- `last_failure_at` covers `failed` (timed out included) and `lost`.
-- Instants are UTC milliseconds, the firing's `finished_at`. Kept in step
-- with ../postgres/20261210000000_job_outcomes.sql (SQLite has no fillfactor).
CREATE TABLE job_outcomes (
    job_id          TEXT PRIMARY KEY,
    last_success_at INTEGER,
    last_failure_at INTEGER
);

INSERT INTO job_outcomes (job_id, last_success_at, last_failure_at)
SELECT f.job_id,
       MAX(CASE WHEN f.state = 'succeeded' THEN f.finished_at END),
       MAX(CASE WHEN f.state IN ('failed', 'lost') THEN f.finished_at END)
FROM firings f JOIN jobs j ON j.id = f.job_id
WHERE f.state IN ('succeeded', 'failed', 'lost') AND f.finished_at IS NOT NULL
GROUP BY f.job_id;
