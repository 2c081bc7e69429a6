-- Chime's durable state (scheduler/src/store). Instants are BIGINT UTC milliseconds.
-- Kept in step with ../sqlite/20250101000000_store.sql: same tables, columns and indexes.

-- Job definitions and where each one is in its schedule.
CREATE TABLE jobs (
    id                   TEXT PRIMARY KEY,
    group_name           TEXT NOT NULL,
    -- The JobSpec as JSON text.
    spec                 TEXT NOT NULL,
    -- active | paused | completed
    state                TEXT NOT NULL,
    -- The next instant not yet staged; NULL when the schedule is exhausted.
    next_fire_at         BIGINT,
    -- When the job was put: the anchor of `every` schedules without `start_at`.
    anchor_ms            BIGINT NOT NULL,
    -- FNV-1a(id) mod the configured partition count (see store/mod.rs).
    part                 BIGINT NOT NULL,
    version              BIGINT NOT NULL,
    consecutive_failures BIGINT NOT NULL DEFAULT 0,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL
);

-- "Active jobs of partition P due before T", the slicer's query.
CREATE INDEX jobs_due ON jobs (part, next_fire_at) WHERE state = 'active';
-- jobs.list, newest first, optionally by group.
CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
CREATE INDEX jobs_group_created ON jobs (group_name, created_at DESC, id DESC);

-- One row per (job, scheduled instant, attempt): staged work and history.
CREATE TABLE firings (
    -- The FiringId text, <job id>@<scheduled ms>#<attempt>.
    id           TEXT PRIMARY KEY,
    job_id       TEXT NOT NULL,
    scheduled_at BIGINT NOT NULL,
    attempt      BIGINT NOT NULL,
    group_name   TEXT NOT NULL,
    priority     BIGINT NOT NULL,
    handler      TEXT NOT NULL,
    -- Snapshot of the payload at staging (a trigger may override it), JSON text.
    payload      TEXT NOT NULL,
    timeout_ms   BIGINT NOT NULL,
    -- When to publish: the scheduled instant, later for retries, now for catch-ups.
    due_at       BIGINT NOT NULL,
    -- staged | published | executing | succeeded | failed | lost | skipped | cancelled
    state        TEXT NOT NULL,
    -- The slice claim that owns publishing it; NULL = not yet adopted by a slice.
    slice        TEXT,
    part         BIGINT NOT NULL,
    -- Bumped when a queued firing is released and published again.
    publish_seq  BIGINT NOT NULL DEFAULT 0,
    worker       TEXT,
    published_at BIGINT,
    started_at   BIGINT,
    finished_at  BIGINT,
    error        TEXT,
    output       TEXT,
    created_at   BIGINT NOT NULL,
    -- At most once per (job, instant, attempt); also serves firings.list by job, newest first.
    CONSTRAINT firings_instant UNIQUE (job_id, scheduled_at, attempt)
);

-- firings.list without a job filter, newest first.
CREATE INDEX firings_recent ON firings (scheduled_at DESC, attempt DESC, id DESC);
-- Staged firings no slice has adopted yet (retries, triggers, released queue firings).
CREATE INDEX firings_unadopted ON firings (part, due_at) WHERE state = 'staged' AND slice IS NULL;
-- Staged firings by owning slice (takeover of a dead replica's claim).
CREATE INDEX firings_slice ON firings (slice) WHERE state = 'staged';
-- Staged firings by due instant (the safety net for overdue ones).
CREATE INDEX firings_staged_due ON firings (due_at) WHERE state = 'staged';
-- Published firings no worker started (the not-started alert).
CREATE INDEX firings_published ON firings (published_at) WHERE state = 'published';

-- Firings a worker is running. Small by design, so the expiry scan stays cheap.
CREATE TABLE executing (
    firing_id   TEXT PRIMARY KEY,
    job_id      TEXT NOT NULL,
    group_name  TEXT NOT NULL,
    worker_id   TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    deadline_at BIGINT NOT NULL
);

CREATE INDEX executing_deadline ON executing (deadline_at);
CREATE INDEX executing_job ON executing (job_id);

-- `overlap: queue`: the one firing of a job waiting for the running one to end.
CREATE TABLE pending (
    job_id    TEXT PRIMARY KEY,
    firing_id TEXT NOT NULL
);

-- Store settings that must agree across replicas (the partition count).
CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
