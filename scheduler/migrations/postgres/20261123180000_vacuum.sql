-- Vacuum the tables rewritten once per firing by how much they churn, not
-- by how big they are.
--
-- Each staging updates every due job's `job_schedule` row and moves it in
-- `job_schedule_due`, which cannot be a HOT update: the old index entry
-- stays until a vacuum removes it, and the slicer's due scan (which starts
-- at the index's low end, so that overdue jobs are caught up) walks every
-- one of them. Autovacuum's default trigger is 20 % of the table: with a
-- million mostly idle jobs held that is 200,000 updates, and its default
-- index cleanup (`auto`) skips the indexes when the dead rows sit on under
-- 2 % of the pages, which is where a few busy jobs among many idle ones
-- leave them. So the due scan slowed with the number of jobs held, not
-- with the number firing. A fixed threshold and forced index cleanup make
-- each vacuum follow the firing rate instead.
--
-- `waiting` gains and loses a row per firing; a fixed threshold keeps its
-- partial indexes, scanned from their low end too, as small as its live
-- rows. Kept in step with ../sqlite/20261123180000_vacuum.sql.
ALTER TABLE job_schedule SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    vacuum_index_cleanup = on
);
ALTER TABLE waiting SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000
);
