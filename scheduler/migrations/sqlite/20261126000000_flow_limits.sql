-- Concurrency limits (CONTRACT.md v1.1: max_concurrent, queue_limit, groups.*).

-- The job's max_concurrent, copied out of the spec on every write like
-- overlap, so the one-statement start can tell a limited job (NULL: no
-- limit of its own beyond what overlap says).
ALTER TABLE jobs ADD COLUMN max_concurrent INTEGER;

-- Limits of a whole group: all its firings together, across replicas and
-- workers (store/groups.rs). NULL: no such limit.
CREATE TABLE group_limits (
    name           TEXT PRIMARY KEY,
    max_concurrent INTEGER,
    max_per_second INTEGER,
    updated_at     INTEGER NOT NULL
);

-- Starts of rate-limited groups in the last second: the sliding window
-- max_per_second is judged on. Pruned by every limited start.
CREATE TABLE group_starts (
    group_name TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    firing_id  TEXT NOT NULL
);
CREATE INDEX group_starts_window ON group_starts (group_name, started_at);

-- A group limit counts the group's running firings.
CREATE INDEX executing_group ON executing (group_name);

-- Firings held back by a limit (store/hold.rs), in the order they were
-- held: cause 'job' (the job's max_concurrent under overlap queue or
-- allow), 'group' (the group's max_concurrent) or 'rate' (the group's
-- max_per_second). A held firing stays staged or published. released_at is
-- set when a slot was freed for it: it is published again and its slot is
-- kept for it until it starts or ends. Replaces pending, which held one
-- firing per job; pending stays (a release never drops what the previous
-- release reads) and is no longer written.
CREATE TABLE held (
    firing_id   TEXT PRIMARY KEY,
    job_id      TEXT NOT NULL,
    group_name  TEXT NOT NULL,
    cause       TEXT NOT NULL,
    held_at     INTEGER NOT NULL,
    released_at INTEGER
);
CREATE INDEX held_job ON held (job_id, held_at);
CREATE INDEX held_group ON held (group_name, held_at);

INSERT INTO held (firing_id, job_id, group_name, cause, held_at, released_at)
SELECT p.firing_id, p.job_id, f.group_name, 'job', 0, NULL
FROM pending p JOIN firings f ON f.id = p.firing_id;
DELETE FROM pending;
