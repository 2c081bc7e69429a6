-- The job's version when it was last written without on_success; NULL if
-- it has one. The one-statement finish takes a success for one that
-- triggers nothing only while this equals jobs.version, so it reads a
-- column instead of parsing the spec (payload included) of every firing
-- it ends, and a write that does not know this column (a replica of the
-- previous release, during a rolling upgrade) bumps the version and so
-- sends that job's successes to the transaction path, which reads the
-- spec. A spec without on_success does not carry the key.
ALTER TABLE jobs ADD COLUMN no_on_success_version BIGINT;
UPDATE jobs SET no_on_success_version = version WHERE spec NOT LIKE '%"on_success"%';
