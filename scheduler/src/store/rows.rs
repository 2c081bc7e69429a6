//! Reading stored rows back into contract types. Anything that does not fit
//! is a [`StoreError::Corrupt`] naming the row.

use super::error::StoreError;
use super::types::{ExecutingRow, StagedFiring};
use super::values::{instant, RowExt};
use chime_common::{Firing, FiringId, FiringState, Job, JobSpec, JobState, Limits};
use sqlx::any::AnyRow;
use sqlx::Row;
use std::time::Duration;

/// Columns [`job`] reads, from [`JOB_TABLES`].
pub(crate) const JOB_COLUMNS: &str =
    "j.id, j.spec, s.state, s.next_fire_at, s.paused_until, j.version, j.created_at, j.updated_at";

/// A job's definition (`j`) joined with where it is in its schedule (`s`).
pub(crate) const JOB_TABLES: &str = "jobs j JOIN job_schedule s ON s.job_id = j.id";

/// Columns [`firing`] reads.
pub(crate) const FIRING_COLUMNS: &str = "id, job_id, scheduled_at, attempt, state, group_name, \
     priority, due_at, worker, published_at, started_at, finished_at, error, output, backfill, \
     worker_id";

/// Columns [`staged`] reads.
pub(crate) const STAGED_COLUMNS: &str = "id, job_id, group_name, priority, handler, payload, \
     scheduled_at, due_at, attempt, timeout_ms, publish_seq, shards, traceparent, created_at, \
     worker_id";

/// Columns [`executing`] reads.
pub(crate) const EXECUTING_COLUMNS: &str =
    "firing_id, job_id, group_name, worker_id, attempt, started_at, deadline_at";

/// The rows `decode` can read. The others are logged (as a corrupt `what`)
/// and left out: a scan that drives the scheduler must not stall on one bad
/// row.
pub(crate) fn readable<T>(
    rows: &[AnyRow],
    decode: impl Fn(&AnyRow) -> Result<T, StoreError>,
    what: &str,
) -> Vec<T> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        match decode(row) {
            Ok(item) => out.push(item),
            Err(e) => tracing::error!(error = %e, "{what} is corrupt; skipped"),
        }
    }
    out
}

/// The row's key, for naming it in errors.
fn key(row: &AnyRow, column: &str) -> String {
    row.try_get::<String, _>(column)
        .unwrap_or_else(|_| format!("<unreadable {column}>"))
}

/// A stored spec, read as [`Limits::stored`] says: lowering the payload
/// limit or a rule added to the built-in payloads must not make stored jobs
/// unreadable.
pub(crate) fn spec(id: &str, text: &str) -> Result<JobSpec, StoreError> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| StoreError::corrupt(id, format!("spec is not JSON: {e}")))?;
    let spec = JobSpec::from_json(&value, &Limits::stored()).map_err(|errors| {
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        StoreError::corrupt(id, format!("spec does not parse: {}", text.join("; ")))
    })?;
    if spec.id != id {
        return Err(StoreError::corrupt(
            id,
            format!("spec names job {:?}, the row {id:?}", spec.id),
        ));
    }
    Ok(spec)
}

/// A stored job state.
pub(crate) fn job_state(id: &str, text: &str) -> Result<JobState, StoreError> {
    text.parse()
        .map_err(|e: String| StoreError::corrupt(id, format!("job state: {e}")))
}

/// A stored firing state.
pub(crate) fn firing_state(id: &str, text: &str) -> Result<FiringState, StoreError> {
    text.parse()
        .map_err(|e: String| StoreError::corrupt(id, format!("firing state: {e}")))
}

/// A stored firing id.
pub(crate) fn firing_id(id: &str) -> Result<FiringId, StoreError> {
    id.parse().map_err(|e: String| StoreError::corrupt(id, e))
}

fn attempt(id: &str, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value)
        .ok()
        .filter(|a| *a >= 1)
        .ok_or_else(|| {
            StoreError::corrupt(id, format!("attempt {value} is not a positive integer"))
        })
}

fn priority(id: &str, value: i64) -> Result<u8, StoreError> {
    u8::try_from(value)
        .ok()
        .filter(|p| *p <= 9)
        .ok_or_else(|| StoreError::corrupt(id, format!("priority {value} is not 0 to 9")))
}

/// A job row (columns [`JOB_COLUMNS`]).
pub(crate) fn job(row: &AnyRow) -> Result<Job, StoreError> {
    let id = key(row, "id");
    let spec = spec(&id, &row.text(&id, "spec")?)?;
    let state = job_state(&id, &row.text(&id, "state")?)?;
    let next_fire_at = match row.opt_int(&id, "next_fire_at")? {
        Some(ms) => Some(instant(&id, "next_fire_at", ms)?),
        None => None,
    };
    Ok(Job {
        spec,
        state,
        next_fire_at,
        paused_until: opt_instant(row, &id, "paused_until")?,
        version: row.int(&id, "version")?,
        created_at: instant(&id, "created_at", row.int(&id, "created_at")?)?,
        updated_at: instant(&id, "updated_at", row.int(&id, "updated_at")?)?,
        // Filled in by the reads that answer requests (`fan_in.rs`).
        upstream_missing: Vec::new(),
        // Filled in by the reads that answer `jobs.get` and `jobs.list` (`outcomes.rs`).
        last_success_at: None,
    })
}

fn opt_instant(
    row: &AnyRow,
    id: &str,
    column: &str,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
    match row.opt_int(id, column)? {
        Some(ms) => Ok(Some(instant(id, column, ms)?)),
        None => Ok(None),
    }
}

/// A firing row (columns [`FIRING_COLUMNS`]).
pub(crate) fn firing(row: &AnyRow) -> Result<Firing, StoreError> {
    let id_text = key(row, "id");
    let id = firing_id(&id_text)?;
    let i = id_text.as_str();
    Ok(Firing {
        job_id: row.text(i, "job_id")?,
        scheduled_at: instant(i, "scheduled_at", row.int(i, "scheduled_at")?)?,
        attempt: attempt(i, row.int(i, "attempt")?)?,
        state: firing_state(i, &row.text(i, "state")?)?,
        group: row.text(i, "group_name")?,
        priority: priority(i, row.int(i, "priority")?)?,
        due_at: instant(i, "due_at", row.int(i, "due_at")?)?,
        worker: row.opt_text(i, "worker")?,
        worker_id: row.opt_text(i, "worker_id")?,
        published_at: opt_instant(row, i, "published_at")?,
        started_at: opt_instant(row, i, "started_at")?,
        finished_at: opt_instant(row, i, "finished_at")?,
        error: row.opt_text(i, "error")?,
        output: row.opt_text(i, "output")?,
        backfill: row.int(i, "backfill")? != 0,
        held_by: None,
        held_since: None,
        shard: id.shard,
        id,
    })
}

/// A staged firing row (columns [`STAGED_COLUMNS`]).
pub(crate) fn staged(row: &AnyRow) -> Result<StagedFiring, StoreError> {
    let id_text = key(row, "id");
    let id = firing_id(&id_text)?;
    let i = id_text.as_str();
    let payload = row.text(i, "payload")?;
    serde_json::from_str::<serde::de::IgnoredAny>(&payload)
        .map_err(|e| StoreError::corrupt(i, format!("payload is not JSON: {e}")))?;
    let payload = bytes::Bytes::from(payload);
    let timeout_ms = row.int(i, "timeout_ms")?;
    let timeout = u64::try_from(timeout_ms)
        .map(Duration::from_millis)
        .map_err(|_| StoreError::corrupt(i, format!("timeout_ms {timeout_ms} is negative")))?;
    let publish_seq = row.int(i, "publish_seq")?;
    let shards = row.int(i, "shards")?;
    let shards = u32::try_from(shards)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| StoreError::corrupt(i, format!("shards {shards} is not positive")))?;
    Ok(StagedFiring {
        job_id: row.text(i, "job_id")?,
        group: row.text(i, "group_name")?,
        priority: priority(i, row.int(i, "priority")?)?,
        handler: row.text(i, "handler")?,
        payload,
        scheduled_at: instant(i, "scheduled_at", row.int(i, "scheduled_at")?)?,
        due_at: instant(i, "due_at", row.int(i, "due_at")?)?,
        attempt: attempt(i, row.int(i, "attempt")?)?,
        timeout,
        publish_seq: u32::try_from(publish_seq).map_err(|_| {
            StoreError::corrupt(i, format!("publish_seq {publish_seq} is out of range"))
        })?,
        shards,
        traceparent: super::stage::stored_trace(row.opt_text(i, "traceparent")?.as_deref()),
        staged_at: instant(i, "created_at", row.int(i, "created_at")?)?,
        worker_id: row.opt_text(i, "worker_id")?,
        id,
    })
}

/// An executing row (columns [`EXECUTING_COLUMNS`]).
pub(crate) fn executing(row: &AnyRow) -> Result<ExecutingRow, StoreError> {
    let id_text = key(row, "firing_id");
    let i = id_text.as_str();
    Ok(ExecutingRow {
        firing_id: firing_id(i)?,
        job_id: row.text(i, "job_id")?,
        group: row.text(i, "group_name")?,
        worker_id: row.text(i, "worker_id")?,
        attempt: attempt(i, row.int(i, "attempt")?)?,
        started_at: instant(i, "started_at", row.int(i, "started_at")?)?,
        deadline_at: instant(i, "deadline_at", row.int(i, "deadline_at")?)?,
    })
}
