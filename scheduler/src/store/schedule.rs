//! A job's schedule as the store computes it: compiled at the anchor the
//! job was put with, and enumerated in the store's milliseconds. Staging,
//! backfills, puts and the definition cache all ask the same question.

use super::error::StoreError;
use super::values::at_ms;
use chime_common::schedule::Schedule;
use chime_common::JobSpec;
use chrono::{DateTime, Utc};

/// The schedule's first instant strictly after millisecond `t`, in milliseconds.
///
/// Asking for the first instant after the *end* of millisecond `t` keeps
/// enumeration moving forward even if a schedule yields sub-millisecond
/// instants, which the store truncates.
pub(crate) fn next_ms(schedule: &Schedule, t: i64) -> Option<i64> {
    let after = at_ms(t) + chrono::Duration::nanoseconds(999_999);
    schedule.next_after(after).map(|n| n.timestamp_millis())
}

/// A job's schedule, anchored where it was put, under its time rules
/// (`H`, `jitter`, `dst`).
pub(crate) fn compile(spec: &JobSpec, anchor_ms: i64) -> Result<Schedule, StoreError> {
    job_schedule(spec, at_ms(anchor_ms))
        .map_err(|e| StoreError::corrupt(&spec.id, format!("schedule does not compile: {e}")))
}

pub(super) fn job_schedule(
    spec: &JobSpec,
    anchor: DateTime<Utc>,
) -> Result<Schedule, chime_common::FieldError> {
    let options = spec.time.schedule_options(Some(&spec.id));
    Schedule::compile_with(&spec.schedule, anchor, &options)
}
