-- How many attempts of this firing's instant before it ended for a fault
-- of the infrastructure (a lost or silent worker, a fenced or drained run,
-- a start its worker never ran) and were run again without spending the
-- job's max_attempts. The job's attempts spent are attempt - infra_retries;
-- the scheduler's --infra-retries bounds this count on its own.
ALTER TABLE firings ADD COLUMN infra_retries BIGINT NOT NULL DEFAULT 0;
