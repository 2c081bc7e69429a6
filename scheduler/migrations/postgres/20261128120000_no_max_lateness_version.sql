-- The job's version when it was last written without max_lateness; NULL
-- if it has one. A start judges lateness from the spec (payload included)
-- only while this does not equal jobs.version, so the start of a job
-- without max_lateness reads a column instead of scanning its spec, and a
-- write that does not know this column (a replica of the previous release,
-- during a rolling upgrade) bumps the version and so makes the start read
-- the spec again. A spec without max_lateness does not carry the key.
ALTER TABLE jobs ADD COLUMN no_max_lateness_version BIGINT;
UPDATE jobs SET no_max_lateness_version = version WHERE spec NOT LIKE '%"max_lateness"%';
