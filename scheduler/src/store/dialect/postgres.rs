//! PostgreSQL: row locks, batches as `json_to_recordset`, two pools, and the
//! statements that combine several writes in one (data-modifying `WITH`),
//! which SQLite cannot run.

use super::super::error::StoreError;
use super::{Col, Pools};
use chrono::Utc;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};
use std::time::Duration;

pub(super) fn for_update_of(alias: &str) -> String {
    format!(" FOR UPDATE OF {alias}")
}

pub(super) fn for_update_skip_locked(alias: &str) -> String {
    format!(" FOR UPDATE OF {alias} SKIP LOCKED")
}

/// `json_to_recordset`, cut to the batch's real length: PostgreSQL guesses
/// 100 rows for any set-returning function, and for 100 rows a hash join over
/// a sequential scan of `firings` looks cheaper than index lookups until the
/// table is large. The `LIMIT` changes no result; a custom plan folds it to
/// the batch's size and looks the rows up by index. The length is bound
/// beside the JSON rather than computed from it (`json_array_length`): that
/// folding would parse the whole batch once more while planning.
pub(super) fn json_rows(param: usize, columns: &[(&str, Col)]) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|(name, col)| {
            let ty = match col {
                Col::Int => "bigint",
                Col::Text => "text",
            };
            format!("{name} {ty}")
        })
        .collect();
    format!(
        "(SELECT * FROM json_to_recordset(${param}::json) AS r({}) LIMIT ${}) AS r",
        cols.join(", "),
        param + 1
    )
}

/// The general pool, and the fast paths' pool (the one-statement start and
/// finish, and the publish mark), whose connections plan each statement once.
pub(super) async fn open(url: &str, max_connections: u32) -> Result<Pools, StoreError> {
    let general = pool(max_connections, PLANNED_PER_EXECUTION)
        .connect(url)
        .await?;
    let fast_paths = pool(max_connections, PLANNED_ONCE).connect(url).await?;
    Ok(Pools {
        read: general.clone(),
        write: general,
        fast_paths: Some(fast_paths),
        checkpoints: None,
    })
}

/// Session settings of the general pool. Statements stay prepared (parsed
/// once per connection) but are planned for each execution: a generic plan
/// cached while `firings` is small (a fresh database) joins batches by
/// scanning the whole table, and keeps doing so as it grows; list filters
/// deserve plans for their actual values.
const PLANNED_PER_EXECUTION: &[&str] = &["SET plan_cache_mode = force_custom_plan"];

/// Session settings of the fast paths' pool. Planning those statements cost
/// more than running them, so each connection plans them once and keeps the
/// generic plan. Every row they touch is found by a key, so sequential scans
/// are switched off: without that, the generic plan made on an empty
/// database scans `firings` (the failure described above); with it, the plan
/// is index probes whatever the table statistics say.
const PLANNED_ONCE: &[&str] = &[
    "SET plan_cache_mode = force_generic_plan",
    "SET enable_seqscan = off",
];

/// A pool whose connections start with `settings`.
fn pool(max_connections: u32, settings: &'static [&'static str]) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // sqlx pings a connection (one round trip) before handing it out
        // unless told not to, on top of the ping when it comes back (which
        // the fast paths avoid: store/held.rs); a start is one statement, so
        // that ping would be a large part of its latency. A connection that
        // broke while idle (PostgreSQL restarted) fails the one operation
        // that gets it, and is closed on release.
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                for setting in settings {
                    sqlx::query(setting).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
}

/// The database clock minus this process's clock, at the midpoint of the
/// query's round trip (the wait for a connection is not part of it).
pub(super) async fn clock_offset(pool: &AnyPool) -> Result<chrono::Duration, StoreError> {
    let mut connection = pool.acquire().await?;
    let sent = Utc::now();
    let row = sqlx::query(
        "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) AS micros",
    )
    .fetch_one(&mut *connection)
    .await?;
    let received = Utc::now();
    let database_micros: i64 = row
        .try_get("micros")
        .map_err(|e| StoreError::Internal(format!("reading the database clock: {e}")))?;
    let midpoint = sent + (received - sent) / 2;
    Ok(chrono::Duration::microseconds(
        database_micros.saturating_sub(midpoint.timestamp_micros()),
    ))
}
