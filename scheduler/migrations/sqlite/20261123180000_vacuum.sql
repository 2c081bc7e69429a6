-- PostgreSQL's 20261123180000_vacuum.sql tunes autovacuum for the tables
-- rewritten once per firing. SQLite frees a deleted or updated row's index
-- entries at once and has no autovacuum of that kind: nothing to set. The
-- migration exists so that both backends carry the same versions.
SELECT 1;
