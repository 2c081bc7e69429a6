//! [`Store`]: the handle every operation is a method of, its pools and
//! settings, how it connects and how it runs a transaction again when the
//! database aborted it for contention. Each transition adds its methods in
//! its own file.

use super::audience::Audiences;
use super::dialect::{self, Backend, BindRows};
use super::error::StoreError;
use super::types::StoreOptions;
use super::values::{fnv1a, json_text};
use super::{held, spec_cache};
use chime_common::Limits;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::QueryAs;
use sqlx::{Any, AnyPool, FromRow, Transaction};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often an operation the database aborted for contention is run again
/// before [`StoreError::Busy`] reaches the caller.
const BUSY_RETRIES: u32 = 5;

/// Chime's durable state. Cheap to clone; clones share the pools.
#[derive(Clone)]
pub struct Store {
    pub(super) backend: Backend,
    /// Reads outside transactions.
    pub(super) read: AnyPool,
    /// Write transactions (the same pool as `read` on PostgreSQL).
    pub(super) write: AnyPool,
    /// PostgreSQL's one-statement fast paths of start and finish, and the
    /// publish mark, the hottest statements: connections that plan each
    /// statement once (see
    /// `dialect/postgres.rs`), kept between statements (`held.rs`). None on
    /// SQLite, whose fast paths run on the writer.
    pub(super) fast_path_connections: Option<held::HeldConnections>,
    /// Whether start and finish try their fast paths first
    /// ([`StoreOptions::fast_paths`]).
    pub(super) fast_paths: bool,
    /// [`StoreOptions::infra_retries`].
    pub(super) infra_retries: u32,
    pub(super) partitions: u32,
    pub(super) limits: Limits,
    /// Parsed definitions of recently staged jobs (`spec_cache.rs`).
    pub(super) specs: spec_cache::SpecCache,
    /// A SQLite file's checkpoints ([`Store::checkpoint`]).
    pub(super) checkpoints: Option<dialect::Checkpoints>,
    /// Who broadcast firings go to, as the heartbeats last said
    /// ([`Store::set_audiences`]).
    pub(super) audiences: Arc<RwLock<Audiences>>,
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
            audiences: Arc::default(),
        };
        store.check_partitions().await?;
        Ok(store)
    }

    /// Who the broadcast firings staged from now on go to: the live
    /// workers the heartbeats list, kept fresh by the offers pass. Every
    /// path that stages a firing (a slice, a trigger, an `on_success`)
    /// reads it without waiting on NATS inside its transaction.
    pub fn set_audiences(&self, audiences: Audiences) {
        *self.audiences.write().unwrap_or_else(|p| p.into_inner()) = audiences;
    }

    /// The audiences last set.
    pub(super) fn audiences(&self) -> Audiences {
        self.audiences
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
    pub(super) async fn begin(&self) -> Result<Transaction<'static, Any>, StoreError> {
        Ok(self.write.begin_with(self.backend.begin_write()).await?)
    }

    /// Runs `op` again while the database aborts it for contention. Each run
    /// must be one transaction, so an aborted run changed nothing.
    pub(super) async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T, StoreError>
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
    pub(super) async fn check_partitions(&self) -> Result<(), StoreError> {
        self.retrying(|| self.check_partitions_once()).await
    }

    pub(super) async fn check_partitions_once(&self) -> Result<(), StoreError> {
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

impl Store {
    /// Runs a fast path of start or finish, `query` as its backend writes
    /// it (on PostgreSQL one statement, on the held connections, which only
    /// PostgreSQL has; on SQLite `BEGIN IMMEDIATE; …; COMMIT`, on the writer
    /// in one command), and returns the rows it selects.
    pub(crate) async fn fast_path<'q, O>(
        &self,
        query: QueryAs<'q, Any, O, AnyArguments<'q>>,
    ) -> Result<Vec<O>, sqlx::Error>
    where
        O: Send + Unpin + for<'r> FromRow<'r, AnyRow>,
    {
        match &self.fast_path_connections {
            Some(held) => held.fetch_all(query).await,
            None => dialect::in_one_command(&self.write, query).await,
        }
    }

    /// Runs `statements` (`BEGIN IMMEDIATE; …; COMMIT`) on SQLite's writer
    /// in one command, and returns the rows they select. SQLite only: a
    /// PostgreSQL store refuses it.
    pub(crate) async fn in_one_command<'q, O>(
        &self,
        statements: QueryAs<'q, Any, O, AnyArguments<'q>>,
    ) -> Result<Vec<O>, StoreError>
    where
        O: Send + Unpin + for<'r> FromRow<'r, AnyRow>,
    {
        match self.backend {
            Backend::Sqlite => Ok(dialect::in_one_command(&self.write, statements).await?),
            Backend::Postgres => Err(StoreError::Internal(
                "a command of several statements runs on SQLite only".into(),
            )),
        }
    }

    /// Copies what SQLite's write-ahead log holds into the database file,
    /// on a connection of its own, without stopping the one writer (which
    /// still checkpoints itself now and then: `ops/checkpointer.rs`), and syncs
    /// what it copied (`sqlite/checkpoint.rs`); returns how many of the
    /// log's pages the file now holds. PostgreSQL checkpoints by itself, and
    /// an in-memory SQLite database has no log: 0.
    pub async fn checkpoint(&self) -> Result<u64, StoreError> {
        match &self.checkpoints {
            Some(checkpoints) => checkpoints.run().await,
            None => Ok(0),
        }
    }
}
