-- The SHA-256 (hex) of the firing message's body, written at staging: a
-- start is accepted only from a worker that received this payload
-- (docs/PROTOCOL.md, section 4). NULL for firings staged before it existed.
ALTER TABLE firings ADD COLUMN payload_sha256 TEXT;
