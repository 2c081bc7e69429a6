-- What the republisher (scheduler/src/republish.rs) needs to know of a
-- published firing no worker has started: where JetStream put its message,
-- and how often it was published again because that message was gone.
--
-- `stream_seq` is the `CHIME_FIRE` sequence of the publish ack (NULL: not
-- known, as for firings published before this version); the marker writes
-- it with `published_at`, in the same statement. `republishes` counts the
-- copies published under a fresh message id; past the bound the firing
-- fails. Kept in step with ../postgres/20261207200000_republish.sql.
ALTER TABLE waiting ADD COLUMN stream_seq INTEGER;
ALTER TABLE waiting ADD COLUMN republishes INTEGER NOT NULL DEFAULT 0;
