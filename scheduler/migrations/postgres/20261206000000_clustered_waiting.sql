-- ../sqlite/20261206000000_clustered_waiting.sql rebuilds `executing` and
-- `waiting` clustered on their firing id, so that SQLite writes one page
-- where it wrote two. PostgreSQL keeps a table apart from its indexes
-- whatever the key, and logs a change, not the page: nothing to do. The
-- migration exists so that both backends carry the same versions.
SELECT 1;
