//! Chime's durable state: jobs, firings, the executing table, queued firings.
//!
//! # One implementation, two databases
//!
//! [`Store`] is a single implementation over sqlx's `Any` driver, with a
//! [`Backend`] switch for the few statements that differ (see `dialect.rs`:
//! row locks, how a write transaction begins, and how a JSON batch is expanded
//! into rows). Every other statement, and all of the logic around them (misfire
//! planning, overlap, retries, alerts, queue release) exists once. A trait or
//! an enum with one implementation per backend would have duplicated that
//! logic, or every SQL text, for two databases that accept the same SQL.
//!
//! Batches travel as one JSON parameter (`json_to_recordset` on PostgreSQL,
//! `json_each` on SQLite) rather than as arrays for `UNNEST`, which `Any`
//! cannot bind: staging a slice of N firings is a handful of statements,
//! whatever N is.
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

mod clock;
mod dependencies;
mod dialect;
mod error;
mod history;
mod jobs;
mod lifecycle;
mod plan;
mod rows;
mod slices;
mod types;
mod waiting;

pub use dialect::Backend;
pub use error::StoreError;
pub use lifecycle::RetryDelay;
pub use types::{
    Deleted, ExecutingRow, FinishOutcome, FiringFilter, JobFilter, Page, RequeueOutcome, Running,
    StageOutcome, StageRequest, StagedFiring, StartDecision, StoreOptions, DEFAULT_MAX_CATCH_UP,
    DEFAULT_MAX_JOBS, DEFAULT_PAGE, MAX_PAGE,
};

use chime_common::Limits;
use chrono::{DateTime, Utc};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};
use std::future::Future;
use std::time::Duration;

/// How often an operation the database aborted for contention is run again
/// before [`StoreError::Busy`] reaches the caller.
const BUSY_RETRIES: u32 = 5;

/// Serializes SQLite migrations within the process.
static SQLITE_MIGRATIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Chime's durable state. Cheap to clone; clones share the pools.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// Reads outside transactions.
    read: AnyPool,
    /// Write transactions (the same pool as `read` on PostgreSQL).
    write: AnyPool,
    /// The one-statement start and finish of a batch, the hottest
    /// statements (the same pool as `write` on SQLite). On PostgreSQL its
    /// connections plan each statement once ([`PLANNED_ONCE`]).
    lifecycle: AnyPool,
    partitions: u32,
    limits: Limits,
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
                    chime_common::secret::redact_url(url)
                ),
            )
        })?;
        if options.partitions == 0 {
            return Err(StoreError::invalid("partitions", "must be at least 1"));
        }
        let max_connections = options.max_connections.max(1);
        let (read, write, lifecycle) = match backend {
            Backend::Postgres => {
                let pool = postgres_pool(max_connections, PLANNED_PER_EXECUTION)
                    .connect(url)
                    .await?;
                let lifecycle = postgres_pool(max_connections, PLANNED_ONCE)
                    .connect(url)
                    .await?;
                (pool.clone(), pool, lifecycle)
            }
            Backend::Sqlite => {
                let memory = url.contains(":memory:") || url.contains("mode=memory");
                if memory {
                    // An in-memory database lives as long as its one
                    // connection: keep exactly one, for reads and writes.
                    let pool = sqlite_pool(1)
                        .min_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None)
                        .connect(url)
                        .await?;
                    (pool.clone(), pool.clone(), pool)
                } else {
                    let url = sqlite_url(url);
                    let write = sqlite_pool(1).connect(&url).await?;
                    let read = sqlite_pool(max_connections).connect(&url).await?;
                    (read, write.clone(), write)
                }
            }
        };
        let migrator = match backend {
            Backend::Postgres => sqlx::migrate!("./migrations/postgres"),
            Backend::Sqlite => sqlx::migrate!("./migrations/sqlite"),
        };
        {
            // sqlx's SQLite migrator takes no lock; serialize stores opened
            // together in one process (PostgreSQL's takes an advisory lock).
            let _guard = match backend {
                Backend::Sqlite => Some(SQLITE_MIGRATIONS.lock().await),
                Backend::Postgres => None,
            };
            migrator.run(&write).await?;
        }
        let store = Store {
            backend,
            read,
            write,
            lifecycle,
            partitions: options.partitions,
            limits: options.limits,
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
        self.lifecycle.close().await;
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
            .bind(batch.clone())
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!(
                "UPDATE waiting SET part = r.part FROM {src}, firings f \
                 WHERE f.job_id = r.id AND waiting.firing_id = f.id \
                     AND waiting.slice IS NULL AND waiting.published_at IS NULL"
            ))
            .bind(batch)
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

/// Session settings of the general PostgreSQL pool. Statements stay
/// prepared (parsed once per connection) but are planned for each execution:
/// a cached generic plan made while `firings` was small (a fresh database)
/// joined batches by scanning the whole table, and kept doing so as it grew
/// (7–10 ms per start batch after a minute at 1,000 firings/s instead of
/// index probes), and list filters deserve plans for their actual values.
const PLANNED_PER_EXECUTION: &[&str] = &["SET plan_cache_mode = force_custom_plan"];

/// Session settings of the lifecycle pool (the one-statement start and
/// finish). Planning them cost more than running them (a one-firing start on
/// an idle machine: 0.62–0.67 ms planned each time, 0.46 ms with a cached
/// plan), so each connection plans them once and keeps the generic plan. Every row they touch is found by a key, so
/// sequential scans are switched off: without that, the generic plan made on
/// an empty database scans `firings` (the failure described above); with it,
/// the plan is index probes whatever the table statistics say.
const PLANNED_ONCE: &[&str] = &[
    "SET plan_cache_mode = force_generic_plan",
    "SET enable_seqscan = off",
];

/// A PostgreSQL pool whose connections start with `settings`.
fn postgres_pool(max_connections: u32, settings: &'static [&'static str]) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // sqlx pings a connection (one round trip) before handing it out
        // unless told not to, on top of the ping when it comes back. A start
        // is one statement, so that ping was a third of its latency. A
        // connection that broke while idle (PostgreSQL restarted) now fails
        // the one operation that gets it, and is closed on release.
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

/// Pool options for SQLite: pragmas on every new connection.
fn sqlite_pool(max_connections: u32) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA busy_timeout = 5000",
                    "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = NORMAL",
                    "PRAGMA foreign_keys = ON",
                ] {
                    sqlx::query(pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
}

/// A SQLite URL that creates the file if it is missing.
fn sqlite_url(url: &str) -> String {
    if url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
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

/// A batch as the JSON text bound to [`Backend::json_rows`].
fn json_text<T: serde::Serialize>(rows: &[T]) -> Result<String, StoreError> {
    serde_json::to_string(rows).map_err(|e| StoreError::Internal(format!("encoding a batch: {e}")))
}

/// A batch of ids as the JSON text bound to `json_rows` with one `id` column.
fn id_batch<S: AsRef<str>>(ids: &[S]) -> Result<String, StoreError> {
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

/// The page size of a list request: 0 means the default, at most the maximum.
fn page_limit(limit: u32) -> u32 {
    match limit {
        0 => types::DEFAULT_PAGE,
        n => n.min(types::MAX_PAGE),
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

    #[test]
    fn sqlite_urls_create_missing_files() {
        assert_eq!(
            sqlite_url("sqlite://chime.db"),
            "sqlite://chime.db?mode=rwc"
        );
        assert_eq!(
            sqlite_url("sqlite://a.db?cache=shared"),
            "sqlite://a.db?cache=shared&mode=rwc"
        );
        assert_eq!(sqlite_url("sqlite://a.db?mode=ro"), "sqlite://a.db?mode=ro");
    }

    #[test]
    fn page_limits_are_bounded() {
        assert_eq!(page_limit(0), 100);
        assert_eq!(page_limit(7), 7);
        assert_eq!(page_limit(5000), 1000);
    }
}
