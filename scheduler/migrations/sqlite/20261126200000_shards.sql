-- Shards (docs/API.md, "Shards"): each instant of a job with `shards: N`
-- becomes N firings, shard 0…N-1, each with its own attempts. `shards` is
-- the instant's count, copied to every shard and every retry, so a finish
-- can tell when all shards of its instant succeeded without reading the
-- job's spec. Unsharded firings are shard 0 of 1.
--
-- The old key, UNIQUE (job_id, scheduled_at, attempt), is a table
-- constraint, which SQLite cannot drop: the table is rebuilt (new table,
-- copy, drop, rename, indexes again). That is acceptable here only because
-- SQLite runs one replica, so no older release reads the table meanwhile
-- (PostgreSQL, which runs many, swaps the key in place). No other table
-- has a foreign key to `firings`.
CREATE TABLE firings_sharded (
    -- The FiringId text: <job id>@<scheduled ms>#<attempt>, or
    -- <job id>@<scheduled ms>.<shard>#<attempt> for a sharded job.
    id             TEXT PRIMARY KEY,
    job_id         TEXT NOT NULL,
    scheduled_at   INTEGER NOT NULL,
    attempt        INTEGER NOT NULL,
    group_name     TEXT NOT NULL,
    priority       INTEGER NOT NULL,
    handler        TEXT NOT NULL,
    -- Snapshot of the payload at staging (a trigger may override it), JSON text.
    payload        TEXT NOT NULL,
    timeout_ms     INTEGER NOT NULL,
    -- When to publish: the scheduled instant, later for retries, now for catch-ups.
    due_at         INTEGER NOT NULL,
    -- staged | published | executing | succeeded | failed | lost | skipped | cancelled
    state          TEXT NOT NULL,
    -- Bumped when a queued firing is released and published again.
    publish_seq    INTEGER NOT NULL DEFAULT 0,
    worker         TEXT,
    published_at   INTEGER,
    started_at     INTEGER,
    finished_at    INTEGER,
    error          TEXT,
    output         TEXT,
    created_at     INTEGER NOT NULL,
    payload_sha256 TEXT,
    backfill       INTEGER NOT NULL DEFAULT 0,
    shard          INTEGER NOT NULL DEFAULT 0,
    shards         INTEGER NOT NULL DEFAULT 1
);
INSERT INTO firings_sharded (id, job_id, scheduled_at, attempt, group_name, priority,
    handler, payload, timeout_ms, due_at, state, publish_seq, worker, published_at,
    started_at, finished_at, error, output, created_at, payload_sha256, backfill)
SELECT id, job_id, scheduled_at, attempt, group_name, priority,
    handler, payload, timeout_ms, due_at, state, publish_seq, worker, published_at,
    started_at, finished_at, error, output, created_at, payload_sha256, backfill
FROM firings;
DROP TABLE firings;
ALTER TABLE firings_sharded RENAME TO firings;

-- Newest first, a sharded instant's firings together (firings.list,
-- the console's activity).
CREATE INDEX firings_recent_shard ON firings (scheduled_at DESC, shard DESC, attempt DESC, id DESC);
-- At most once per (job, instant, shard, attempt); also serves firings.list
-- by job (instant, then shard, then attempt).
CREATE UNIQUE INDEX firings_instant_shard ON firings (job_id, scheduled_at, shard, attempt);
