//! PostgreSQL: row locks, batches as `json_to_recordset`, two pools, and the
//! statements that combine several writes in one (data-modifying `WITH`),
//! which SQLite cannot run.

use super::super::jobs::{Put, UPSERT_JOB, UPSERT_SCHEDULE};
use super::super::{Store, StoreError};
use super::{BindRows, Col, JsonRows, Pools};
use chrono::Utc;
use sqlx::any::{AnyPoolOptions, AnyRow};
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

/// Both halves of a put in one statement instead of a transaction of two: one
/// round trip instead of four (begin, two upserts, commit). `job` runs first
/// (the query reads it), `schedule` after it: `jobs` is locked first, as
/// always.
pub(super) async fn upsert_job(store: &Store, put: &Put<'_>) -> Result<AnyRow, StoreError> {
    Ok(put
        .bind_all(sqlx::query(&format!(
            "WITH job AS ({UPSERT_JOB}), schedule AS ({UPSERT_SCHEDULE}) \
             SELECT version, created_at FROM job"
        )))
        .fetch_one(&store.write)
        .await?)
}

/// Records a batch published in one statement: the `waiting` rows of exactly
/// the firings marked (not those skipped as locked), after them.
///
/// A mark is, with start and finish, a statement of every firing's path,
/// and like theirs it finds every row by its key (its generic plan probes
/// the primary keys of `firings`, `held` and `waiting`, driven by the
/// batch), so it runs on their held connections: planned once instead of
/// at each execution, where planning costs as much as running it.
pub(super) async fn record_published(
    store: &Store,
    mark_firings: &str,
    batch: &JsonRows,
    at: i64,
) -> Result<u64, StoreError> {
    let sql = format!(
        "WITH marked AS ({mark_firings}), \
         published AS (UPDATE waiting SET published_at = $1, stream_seq = NULLIF(r.seq, 0) \
             FROM marked, {} \
             WHERE waiting.firing_id = marked.id AND r.id = marked.id) \
         SELECT COUNT(*) FROM marked",
        json_rows(2, crate::store::publish::MARK_COLUMNS)
    );
    let query = sqlx::query_as(&sql).bind(at).bind_rows(batch);
    let counted: Vec<(i64,)> = match &store.fast_path_connections {
        Some(held) => held.fetch_all(query).await?,
        None => query.fetch_all(&store.write).await?,
    };
    let count = counted.first().map_or(0, |(count,)| *count);
    Ok(u64::try_from(count).unwrap_or(0))
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
