-- Fan-in schedules (`{"after": [...], "within"?}`): one row per upstream
-- job a downstream job waits for, written when the downstream is put (a put
-- replaces its rows, so what had counted starts again). `succeeded_at` is
-- when the upstream last succeeded since the downstream last fired (ms),
-- NULL while it has not. A success reads its job's rows by `upstream_id`;
-- the row of an upstream that is deleted stays (the downstream still names
-- it) and counts again once a job of that id is put and succeeds.
CREATE TABLE fan_in (
    job_id TEXT NOT NULL,
    upstream_id TEXT NOT NULL,
    succeeded_at BIGINT,
    PRIMARY KEY (job_id, upstream_id)
);
CREATE INDEX fan_in_upstream ON fan_in (upstream_id);
