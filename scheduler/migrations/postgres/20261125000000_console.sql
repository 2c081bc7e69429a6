-- The HTTP API's audit trail and the console's login sessions (scheduler/src/web).

-- One row per mutating API request, over HTTP or NATS (docs/API.md, "Audit trail").
CREATE TABLE audit (
    -- Time-ordered (UUID v7): the page cursor of audit.list.
    id             TEXT PRIMARY KEY,
    at             BIGINT NOT NULL,
    actor          TEXT NOT NULL,
    -- http | nats
    via            TEXT NOT NULL,
    verb           TEXT NOT NULL,
    -- The job or firing the request named.
    target         TEXT NOT NULL,
    before_version BIGINT,
    after_version  BIGINT,
    -- ok | the error code
    outcome        TEXT NOT NULL,
    message        TEXT
);
CREATE INDEX audit_target ON audit (target, id);

-- Console logins. The cookie holds a random token; only its SHA-256 is kept,
-- so a read of this table cannot be replayed as a login.
CREATE TABLE sessions (
    token_sha256 TEXT PRIMARY KEY,
    user_name    TEXT NOT NULL,
    -- Sent back in X-Chime-CSRF on every mutating request of the session.
    csrf         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_at);
