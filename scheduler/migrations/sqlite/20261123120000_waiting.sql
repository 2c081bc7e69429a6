-- Firings waiting for a worker to start them, apart from their history.
--
-- The partial indexes that found staged and published firings named
-- `state` in their predicates, so on PostgreSQL no update of a firing could
-- be HOT; here the searches run on a small table that holds a row only
-- while its firing waits. A row exists exactly while the firing's state is
-- `staged` (published_at NULL) or `published` (published_at set). Kept in
-- step with ../postgres/20261123120000_waiting.sql (SQLite has no
-- fillfactor).
CREATE TABLE waiting (
    firing_id    TEXT PRIMARY KEY,
    group_name   TEXT NOT NULL,
    -- FNV-1a(job id) mod the configured partition count (see store/mod.rs).
    part         INTEGER NOT NULL,
    -- When to publish it (the firing's `due_at`).
    due_at       INTEGER NOT NULL,
    -- The slice claim that owns publishing it; NULL = not yet adopted by a slice.
    slice        TEXT,
    -- When it was published; NULL while staged.
    published_at INTEGER
);

INSERT INTO waiting (firing_id, group_name, part, due_at, slice, published_at)
SELECT id, group_name, part, due_at, slice,
       CASE WHEN state = 'published' THEN published_at END
FROM firings WHERE state IN ('staged', 'published');

DROP INDEX firings_unadopted;
DROP INDEX firings_slice;
DROP INDEX firings_staged_due;
DROP INDEX firings_published;
ALTER TABLE firings DROP COLUMN slice;
ALTER TABLE firings DROP COLUMN part;

-- Staged firings no slice has adopted yet (retries, triggers, released queue firings).
CREATE INDEX waiting_unadopted ON waiting (part, due_at) WHERE slice IS NULL AND published_at IS NULL;
-- Staged firings by owning slice (takeover of a dead replica's claim).
CREATE INDEX waiting_slice ON waiting (slice) WHERE published_at IS NULL;
-- Staged firings by due instant (the safety net for overdue ones).
CREATE INDEX waiting_staged_due ON waiting (due_at) WHERE published_at IS NULL;
-- Published firings no worker started (the not-started alert).
CREATE INDEX waiting_published ON waiting (published_at) WHERE published_at IS NOT NULL;
