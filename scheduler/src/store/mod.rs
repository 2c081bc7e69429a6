//! Chime's durable state: jobs, firings, the executing table, held firings.
//!
//! # One implementation, two databases
//!
//! [`Store`] is a single implementation over sqlx's `Any` driver. What the
//! two databases do differently (row locks, how a write transaction begins,
//! how a JSON batch is expanded into rows, the pools, the migrations, the
//! writes PostgreSQL combines into one statement) lives behind the seam in
//! `dialect/`, one file per backend. Every other statement, and all of the
//! logic around them (misfire planning, overlap, limits, retries, alerts,
//! releases) exists once: a full implementation per backend would have
//! duplicated that logic, or every SQL text, for two databases that accept
//! the same SQL.
//!
//! # Layout: one file per firing transition
//!
//! `states.rs` states the firing state machine (a table of every state and
//! transition). Each transition is one file: `stage.rs`, `publish.rs`,
//! `start.rs`, `skip.rs` (skipped or failed without starting), `hold.rs`
//! (held back by a concurrency limit, and released), `finish.rs`, `retry.rs`, `requeue.rs`
//! (lost), `cancel.rs` (an operator's cancel). `locks.rs` reads and locks what they decide on; `waiting.rs` and
//! `executing.rs` keep the two small tables that say which firings wait and
//! which run. Jobs are `jobs.rs`, `dependencies.rs` (cycles through
//! `on_success` and `after`), `fan_in.rs` (what counted towards a fan-in
//! schedule) and `plan.rs` (misfire planning); `calendars.rs` keeps the
//! exclusion calendars staging applies; `groups.rs` the limits of whole groups.
//!
//! Batches travel as one JSON parameter (`json_to_recordset` on PostgreSQL,
//! `json_each` on SQLite) rather than as arrays for `UNNEST`, which `Any`
//! cannot bind: staging a slice of N firings is a handful of statements,
//! whatever N is. Instants are milliseconds inside the store, converted once
//! where an operation takes or returns a `DateTime`.
//!
//! # Storage
//!
//! Migrations are embedded and applied by [`Store::connect`]; on PostgreSQL
//! sqlx's migrator holds an advisory lock, so replicas starting together are
//! safe. Instants are `BIGINT` UTC milliseconds; the API uses
//! `DateTime<Utc>` (sub-millisecond parts are dropped on the way in).
//!
//! SQLite runs in WAL mode with a busy timeout and foreign keys on. It has one
//! writer, so the store keeps a one-connection write pool whose transactions
//! begin `IMMEDIATE`, and a separate pool of readers.
//!
//! # Partitions
//!
//! A job's partition is the 32-bit FNV-1a hash of its id's UTF-8 bytes
//! (offset basis 2166136261, prime 16777619) modulo [`StoreOptions::partitions`],
//! computed when the job is put and stored with it and with its waiting
//! firings (`waiting.rs`). All replicas must agree on the partition count;
//! when a store is opened with a count different from the one the database
//! was last written with, it re-partitions every job and unadopted staged
//! firing at connect.
//!
//! # Bad rows
//!
//! A row that cannot be read back (a spec that does not parse, an unknown state)
//! is reported as [`StoreError::Corrupt`] naming its id; nothing panics on
//! stored data. Reads that answer a request (`get_job`, the lists, `delete_job`,
//! `set_paused`, `trigger`) fail with it. Scans that drive the scheduler must
//! not stall on one bad row: `stage_slice` reports corrupt due jobs in
//! [`StageOutcome::corrupt`] and stages the others; `slice_firings`,
//! `overdue_staged`, `executing` and `unstarted` log and leave corrupt rows
//! out; `start`, `finish` and `requeue` treat an unreadable firing as unknown
//! and an unreadable job as deleted (logged).

mod audit;
mod backfill;
mod calendars;
mod cancel;
mod clock;
mod conditions;
mod dependencies;
mod dialect;
mod error;
mod executing;
mod fan_in;
mod finish;
mod groups;
mod held;
mod history;
mod hold;
mod jobs;
mod lateness;
mod listing;
mod locks;
mod pause;
mod plan;
mod publish;
mod republish;
mod requeue;
mod retry;
mod rows;
mod schedule;
mod selection;
mod sessions;
mod skip;
mod spec_cache;
mod stage;
mod start;
mod states;
#[cfg(test)]
pub(crate) mod test_stores;
mod types;
mod waiting;

pub use audit::{AuditFilter, AuditRecord};
pub use cancel::{CancelOutcome, CANCELLED_BY_OPERATOR};
pub use dialect::Backend;
use dialect::{BindRows, JsonRows};
pub use error::StoreError;
pub use groups::MAX_GROUPS;
pub use history::{Activity, Pruned, RetentionCursor};
pub use pause::{JobSelection, Pause, MAX_PAUSED_AT_ONCE};
pub use publish::AckedFiring;
pub use republish::PublishedFiring;
pub use retry::RetryDelay;
pub use sessions::Session;
pub use types::{
    Deleted, ExecutingRow, FinishOutcome, FiringFilter, HoldCause, JobFilter, MissCause, Missed,
    Page, RequeueOutcome, RunningFiring, StageOutcome, StagePace, StageRequest, StagedFiring,
    StartOutcome, StoreOptions, DEFAULT_INFRA_RETRIES, DEFAULT_MAX_CATCH_UP, DEFAULT_MAX_JOBS,
};

use chime_common::api::page_limit;
use chime_common::Limits;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Row, Transaction};
use std::future::Future;
use std::time::Duration;

/// How often an operation the database aborted for contention is run again
/// before [`StoreError::Busy`] reaches the caller.
const BUSY_RETRIES: u32 = 5;

/// Chime's durable state. Cheap to clone; clones share the pools.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// Reads outside transactions.
    read: AnyPool,
    /// Write transactions (the same pool as `read` on PostgreSQL).
    write: AnyPool,
    /// PostgreSQL's one-statement fast paths of start and finish, and the
    /// publish mark, the hottest statements: connections that plan each
    /// statement once (see
    /// `dialect/postgres.rs`), kept between statements (`held.rs`). None on
    /// SQLite, whose fast paths run on the writer.
    fast_path_connections: Option<held::HeldConnections>,
    /// Whether start and finish try their fast paths first
    /// ([`StoreOptions::fast_paths`]).
    fast_paths: bool,
    /// [`StoreOptions::infra_retries`].
    infra_retries: u32,
    partitions: u32,
    limits: Limits,
    /// Parsed definitions of recently staged jobs (`spec_cache.rs`).
    specs: spec_cache::SpecCache,
    /// A SQLite file's checkpoints ([`Store::checkpoint`]).
    checkpoints: Option<dialect::Checkpoints>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Connects to `postgres://…` or `sqlite://…` (the SQLite file is created
    /// if missing) and applies the migrations.
    pub async fn connect(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url).ok_or_else(|| {
            StoreError::invalid(
                "database_url",
                format!(
                    "{:?} is not a database URL this store supports; use postgres://… or sqlite://…",
                    chime_runtime::secret::redact_url(url)
                ),
            )
        })?;
        if options.partitions == 0 {
            return Err(StoreError::invalid("partitions", "must be at least 1"));
        }
        let pools = backend.open(url, options.max_connections.max(1)).await?;
        backend.migrate(&pools.write).await?;
        let store = Store {
            backend,
            read: pools.read,
            write: pools.write,
            fast_path_connections: pools.fast_paths.map(held::HeldConnections::new),
            fast_paths: options.fast_paths,
            infra_retries: options.infra_retries,
            partitions: options.partitions,
            limits: options.limits,
            specs: spec_cache::SpecCache::new(spec_cache::DEFAULT_BUDGET_BYTES),
            checkpoints: pools.checkpoints,
        };
        store.check_partitions().await?;
        Ok(store)
    }

    /// The database behind the store.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The partition count this store was opened with.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Succeeds when the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    /// Closes the pools; later operations fail with `Unavailable`.
    pub async fn close(&self) {
        if let Some(held) = &self.fast_path_connections {
            held.close().await;
        }
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.close().await;
        }
        self.write.close().await;
        self.read.close().await;
    }

    /// The partition of a job id: FNV-1a(id) mod the partition count.
    pub fn partition_of(&self, job_id: &str) -> u32 {
        fnv1a(job_id.as_bytes()) % self.partitions
    }

    /// Opens a write transaction.
    async fn begin(&self) -> Result<Transaction<'static, Any>, StoreError> {
        Ok(self.write.begin_with(self.backend.begin_write()).await?)
    }

    /// Runs `op` again while the database aborts it for contention. Each run
    /// must be one transaction, so an aborted run changed nothing.
    async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut tries = 0;
        loop {
            match op().await {
                Err(StoreError::Busy(message)) if tries < BUSY_RETRIES => {
                    tries += 1;
                    tracing::debug!(%message, tries, "store transaction aborted for contention; retrying");
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(tries))).await;
                }
                other => return other,
            }
        }
    }

    /// Re-partitions jobs if the stored partition count differs from ours.
    async fn check_partitions(&self) -> Result<(), StoreError> {
        self.retrying(|| self.check_partitions_once()).await
    }

    async fn check_partitions_once(&self) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        let stored: Option<String> =
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = 'partitions'")
                .fetch_optional(&mut *tx)
                .await?;
        let wanted = self.partitions.to_string();
        if stored.as_deref() == Some(wanted.as_str()) {
            return Ok(());
        }
        let ids: Vec<String> = sqlx::query_scalar("SELECT job_id FROM job_schedule")
            .fetch_all(&mut *tx)
            .await?;
        if !ids.is_empty() {
            tracing::info!(
                from = stored.as_deref().unwrap_or("unset"),
                to = self.partitions,
                jobs = ids.len(),
                "partition count changed; re-partitioning jobs"
            );
        }
        for chunk in ids.chunks(10_000) {
            let rows: Vec<serde_json::Value> = chunk
                .iter()
                .map(|id| serde_json::json!({"id": id, "part": self.partition_of(id)}))
                .collect();
            let src = self.backend.json_rows(
                1,
                &[("id", dialect::Col::Text), ("part", dialect::Col::Int)],
            );
            let batch = json_text(&rows)?;
            sqlx::query(&format!(
                "UPDATE job_schedule SET part = r.part FROM {src} WHERE job_schedule.job_id = r.id"
            ))
            .bind_rows(&batch)
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!(
                "UPDATE waiting SET part = r.part FROM {src}, firings f \
                 WHERE f.job_id = r.id AND waiting.firing_id = f.id \
                     AND waiting.slice IS NULL AND waiting.published_at IS NULL"
            ))
            .bind_rows(&batch)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO store_meta (key, value) VALUES ('partitions', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(wanted)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// 32-bit FNV-1a.
pub fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 2_166_136_261;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(16_777_619);
    }
    hash
}

/// Milliseconds since the epoch.
fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// An instant from stored milliseconds; out of range is a corrupt row.
fn instant(id: &str, column: &str, ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::corrupt(id, format!("{column} {ms} is not a valid instant")))
}

/// An instant for the API from milliseconds we computed ourselves.
fn at_ms(ms: i64) -> DateTime<Utc> {
    chime_common::duration::from_millis(ms)
}

/// `now` truncated to the millisecond, as the store keeps it.
fn truncate(now: DateTime<Utc>) -> DateTime<Utc> {
    at_ms(ms(now))
}

/// A batch as bound to [`Backend::json_rows`].
fn json_text<T: serde::Serialize>(rows: &[T]) -> Result<JsonRows, StoreError> {
    let text = serde_json::to_string(rows)
        .map_err(|e| StoreError::Internal(format!("encoding a batch: {e}")))?;
    Ok(JsonRows::new(text, rows.len()))
}

/// A batch of ids as bound to `json_rows` with one `id` column.
fn id_batch<S: AsRef<str>>(ids: &[S]) -> Result<JsonRows, StoreError> {
    #[derive(serde::Serialize)]
    struct Id<'a> {
        id: &'a str,
    }
    let rows: Vec<Id> = ids.iter().map(|id| Id { id: id.as_ref() }).collect();
    json_text(&rows)
}

/// Typed column access that names the row when a value does not fit.
trait RowExt {
    fn text(&self, id: &str, column: &str) -> Result<String, StoreError>;
    fn opt_text(&self, id: &str, column: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, id: &str, column: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, id: &str, column: &str) -> Result<Option<i64>, StoreError>;
}

impl RowExt for AnyRow {
    fn text(&self, id: &str, column: &str) -> Result<String, StoreError> {
        self.try_get::<String, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }

    fn opt_text(&self, id: &str, column: &str) -> Result<Option<String>, StoreError> {
        self.try_get::<Option<String>, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }

    fn int(&self, id: &str, column: &str) -> Result<i64, StoreError> {
        self.try_get::<i64, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }

    fn opt_int(&self, id: &str, column: &str) -> Result<Option<i64>, StoreError> {
        self.try_get::<Option<i64>, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
    }
}
