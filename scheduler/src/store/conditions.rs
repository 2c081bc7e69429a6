//! SQL conditions on a firing row `f` that the batch lock query
//! (`locks.rs`) and the transitions' set-based fast paths (`start.rs`,
//! `finish.rs`) both evaluate: written once, below both.

use super::states::{sources_sql, Transition};
use chime_common::bounds::MAX_TIMEOUT;
use std::sync::LazyLock;

/// The longest timeout a firing may start with, in stored milliseconds.
pub(super) const MAX_TIMEOUT_MS: i64 = MAX_TIMEOUT.as_millis() as i64;

/// Whether firing `f`, its job joined as `j`, may start without a policy
/// decision: waiting to start, a timeout validation accepts, its job's
/// overlap `allow` without a `max_concurrent` (a job that is gone joins as
/// NULLs and fails it), nothing of its job held, its group without limits.
/// (Not running anywhere is checked by each path: PostgreSQL's fast path
/// fails on a conflicting executing row, SQLite's leaves that firing out.)
/// The job is read once for this and for [`LATENESS_SPEC`](super::lateness::LATENESS_SPEC), except by
/// SQLite's fast path, whose `RETURNING` may not name the joined `j`.
pub(super) static PLAIN_START: LazyLock<String> = LazyLock::new(|| {
    format!(
        "f.state IN {} AND f.timeout_ms BETWEEN 1 AND {MAX_TIMEOUT_MS} \
         AND j.overlap = 'allow' AND j.max_concurrent IS NULL \
         AND NOT EXISTS (SELECT 1 FROM held h WHERE h.job_id = f.job_id) \
         AND NOT EXISTS (SELECT 1 FROM group_limits g WHERE g.name = f.group_name)",
        sources_sql(Transition::Start)
    )
});

/// Whether nothing is held in the group of firing `f`: a finish that frees a
/// slot must release held firings of its job or group, so a batch's finish
/// is set-based only when this holds (every held firing of a job is in the
/// job's group).
pub(super) const NOTHING_HELD_IN_GROUP: &str =
    "NOT EXISTS (SELECT 1 FROM held h WHERE h.group_name = f.group_name)";

/// A condition on firing row `f`: no fan-in job waits for its job's
/// success. The set-based success paths (the fast path's statement and
/// [`super::locks::BatchRow::plain_success`]'s column) require it, so a
/// success that counts towards a fan-in takes [`Store::count_fan_in_success`].
pub(super) const NO_FAN_IN_DEPENDENTS: &str =
    "NOT EXISTS (SELECT 1 FROM fan_in d WHERE d.upstream_id = f.job_id)";
