-- Traces (docs/OPERATIONS.md, "Traces"): the W3C `traceparent` a firing's
-- spans and message carry when it did not start a trace of its own.
--
-- `firings.traceparent` is the trace a trigger began or was given (its
-- `trigger` span as the parent), copied to every attempt of the instant;
-- NULL for a firing whose trace is derived from its instant. It is also
-- what a one-shot job submitted with a `traceparent` header stages its
-- firings with: `jobs.traceparent`, written by that submission and cleared
-- by any later put. Both nullable and without a default, so an older
-- release's inserts still work. Kept in step with
-- ../sqlite/20261209143000_traceparent.sql.
ALTER TABLE firings ADD COLUMN traceparent TEXT;
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
