-- The job's overlap policy (allow | forbid | queue | replace), copied out of
-- the spec on every write so a start can be decided in one statement
-- (store/lifecycle.rs, `start_at_once`). NULL (jobs written before this
-- column existed) sends the job's starts down the transaction path.
ALTER TABLE jobs ADD COLUMN overlap TEXT;
