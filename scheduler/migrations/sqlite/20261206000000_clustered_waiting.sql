-- `executing` and `waiting` as WITHOUT ROWID tables, clustered on their
-- firing id.
--
-- Each start deletes a `waiting` row and inserts an `executing` row, and
-- each finish deletes the `executing` row, each in a transaction of its own
-- at ordinary rates. A rowid table with a TEXT PRIMARY KEY keeps the row and
-- its key in two b-trees, so every one of those writes changed a page of
-- each, and SQLite writes every page a transaction changed into the log in
-- full. Clustered on the key, the row and its key are one page
-- (BENCHMARKS.md, "Milestone 2, thirty-sixth session"). Both tables hold
-- only the firings waiting or running, so the copy is as large as the
-- backlog, not the history. Older releases read and write them unchanged
-- (they never name a rowid).
CREATE TABLE executing_clustered (
    firing_id   TEXT PRIMARY KEY,
    job_id      TEXT NOT NULL,
    group_name  TEXT NOT NULL,
    worker_id   TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    deadline_at INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO executing_clustered (firing_id, job_id, group_name, worker_id, attempt,
    started_at, deadline_at)
SELECT firing_id, job_id, group_name, worker_id, attempt, started_at, deadline_at
FROM executing;
DROP TABLE executing;
ALTER TABLE executing_clustered RENAME TO executing;
CREATE INDEX executing_deadline ON executing (deadline_at);
CREATE INDEX executing_job ON executing (job_id);
CREATE INDEX executing_group ON executing (group_name);

CREATE TABLE waiting_clustered (
    firing_id    TEXT PRIMARY KEY,
    group_name   TEXT NOT NULL,
    part         INTEGER NOT NULL,
    due_at       INTEGER NOT NULL,
    slice        TEXT,
    published_at INTEGER
) WITHOUT ROWID;
INSERT INTO waiting_clustered (firing_id, group_name, part, due_at, slice, published_at)
SELECT firing_id, group_name, part, due_at, slice, published_at
FROM waiting;
DROP TABLE waiting;
ALTER TABLE waiting_clustered RENAME TO waiting;
CREATE INDEX waiting_unadopted ON waiting (part, due_at) WHERE slice IS NULL AND published_at IS NULL;
CREATE INDEX waiting_slice ON waiting (slice) WHERE published_at IS NULL;
CREATE INDEX waiting_staged_due ON waiting (due_at) WHERE published_at IS NULL;
CREATE INDEX waiting_published ON waiting (published_at) WHERE published_at IS NOT NULL;
