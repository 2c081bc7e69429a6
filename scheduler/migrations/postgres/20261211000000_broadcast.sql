-- Broadcast jobs (docs/API.md, "Broadcast"): a broadcast job's firing is
-- addressed to one worker, which alone may start it, and it reaches that
-- worker as an offer rather than through the group's consumers.
--
-- `firings.worker_id` is that worker; NULL for every other firing. The
-- offers pass reads the addressed firings not started yet: the partial
-- index holds addressed firings only, by state first, so the few that wait
-- are a range of it however much history it keeps. Nullable without a
-- default, so an older release's inserts still work. Kept in step with
-- ../sqlite/20261211000000_broadcast.sql.
ALTER TABLE firings ADD COLUMN worker_id TEXT;
CREATE INDEX firings_offered ON firings (state, due_at) WHERE worker_id IS NOT NULL;
