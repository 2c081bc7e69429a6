-- Shards (docs/API.md, "Shards"): each instant of a job with `shards: N`
-- becomes N firings, shard 0…N-1, each with its own attempts. `shards` is
-- the instant's count, copied to every shard and every retry, so a finish
-- can tell when all shards of its instant succeeded without reading the
-- job's spec. Unsharded firings (and those of an older release) are shard
-- 0 of 1.
ALTER TABLE firings ADD COLUMN shard BIGINT NOT NULL DEFAULT 0;
ALTER TABLE firings ADD COLUMN shards BIGINT NOT NULL DEFAULT 1;

-- At most once per (job, instant, shard, attempt): the new key is created
-- before the old one goes, so a firing is never without one. It also
-- serves firings.list by job (instant, then shard, then attempt).
CREATE UNIQUE INDEX firings_instant_shard ON firings (job_id, scheduled_at, shard, attempt);
ALTER TABLE firings DROP CONSTRAINT firings_instant;

-- Newest first, a sharded instant's firings together (firings.list,
-- the console's activity).
CREATE INDEX firings_recent_shard ON firings (scheduled_at DESC, shard DESC, attempt DESC, id DESC);
DROP INDEX firings_recent;
