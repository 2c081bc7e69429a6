//! SQLite: one writer (a one-connection write pool whose transactions begin
//! `IMMEDIATE`), readers beside it, batches as `json_each`, and a
//! transaction where PostgreSQL combines writes in one statement.

use super::super::error::StoreError;
use super::{Col, Pools};
use sqlx::any::{AnyArguments, AnyPoolOptions, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::query::QueryAs;
use sqlx::{Any, AnyPool, FromRow};
use std::time::Duration;

mod checkpoint;

pub(crate) use checkpoint::Checkpoints;

pub(super) fn json_rows(param: usize, columns: &[(&str, Col)]) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|(name, _)| format!("json_extract(value, '$.{name}') AS {name}"))
        .collect();
    // The length is only read to keep the placeholders the same as
    // PostgreSQL's.
    format!(
        "(SELECT {} FROM json_each(${param}) LIMIT ${}) AS r",
        cols.join(", "),
        param + 1
    )
}

/// See [`super::Backend::stage_jobs_per_transaction`]: commands short enough
/// that a start waits a millisecond or two for one's writes, not the whole
/// slice's, for the first thousand jobs of a staging; longer ones after.
pub(super) fn stage_jobs_per_command(staged: usize) -> usize {
    if staged < 1_000 {
        25
    } else {
        100
    }
}

/// The pools of a SQLite database: one writer, `max_connections` readers.
pub(super) async fn open(url: &str, max_connections: u32) -> Result<Pools, StoreError> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        // An in-memory database lives as long as its one connection: keep
        // exactly one, for reads and writes.
        let pool = pool(1, &[])
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect(url)
            .await?;
        return Ok(Pools {
            read: pool.clone(),
            write: pool,
            fast_paths: None,
            checkpoints: None,
        });
    }
    let url = creating(url);
    let write = pool(1, &[WRITER_AUTOCHECKPOINT]).connect(&url).await?;
    let read = pool(max_connections, &[]).connect(&url).await?;
    Ok(Pools {
        read,
        write,
        fast_paths: None,
        checkpoints: Some(Checkpoints::new(url)),
    })
}

/// The settings of every connection.
///
/// `temp_store = MEMORY`: a statement inside a transaction keeps the old
/// content of every page it changes in a statement journal, so that it can
/// be undone alone; past 64 KiB SQLite spilled that journal to a new file
/// in the system's temporary directory (`/var/tmp`), which a staging
/// command reached once the unique index of its jobs' firings spread over
/// a page per job: thousands of temporary file writes a second on the
/// disk the database shares. In memory it stays as large as one
/// statement's pages.
const PRAGMAS: [&str; 5] = [
    "PRAGMA temp_store = MEMORY",
    "PRAGMA busy_timeout = 5000",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
];

/// The writer's own checkpoint: by default the committing connection
/// checkpoints every 1,000 pages, which would stop every start and finish
/// for the copy and its syncs. The checkpointer service (`ops/checkpointer.rs`)
/// copies on a connection of its own instead ([`Checkpoints`]), but only a
/// checkpoint that holds off commits lets the log start over (see there),
/// so under load the writer still checkpoints each time the log reaches
/// this many pages. A smaller value, each checkpoint with less to sync but
/// five times as many, lengthened the tail (docs/PERFORMANCE.md, "Tuning").
const WRITER_AUTOCHECKPOINT: &str = "PRAGMA wal_autocheckpoint = 20000";

/// Pool options for SQLite: [`PRAGMAS`], then `own`, on every new connection.
fn pool(max_connections: u32, own: &'static [&'static str]) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // sqlx pings a connection before handing it out unless told not to:
        // a round trip to the connection's thread that finds nothing (a
        // SQLite connection is a file in this process; it cannot drop while
        // idle), and on the one writer every start and finish paid it.
        .test_before_acquire(false)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                for pragma in PRAGMAS.iter().chain(own) {
                    sqlx::query(pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
}

/// A SQLite URL that creates the file if it is missing.
fn creating(url: &str) -> String {
    if url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

/// Runs `statements` as one write transaction in one command to the
/// writer's thread, and returns the rows they select.
///
/// sqlx runs each SQLite connection on a thread of its own, and every
/// statement is a round trip to it: two thread wake-ups, which cost more
/// than the statement. A transaction of four statements sent one by one is
/// six round trips, and the pool's ping on release a seventh; sent as one
/// text (`BEGIN IMMEDIATE; …; COMMIT`, whose `$n` parameters mean the same
/// in every statement) it is one, and the ping. A command that stops between
/// `BEGIN` and `COMMIT` (a statement failed, or its caller went away) leaves
/// its transaction open on the connection, so it is rolled back before the
/// connection serves anyone else.
pub(crate) async fn in_one_command<'q, O>(
    write: &AnyPool,
    statements: QueryAs<'q, Any, O, AnyArguments<'q>>,
) -> Result<Vec<O>, sqlx::Error>
where
    O: Send + Unpin + for<'r> FromRow<'r, AnyRow>,
{
    let mut writer = RollbackOnDrop(None);
    let connection = writer.0.insert(write.acquire().await?);
    let rows = statements.fetch_all(&mut **connection).await?;
    writer.finished();
    Ok(rows)
}

/// The writer while [`in_one_command`] runs a command on it: dropped before
/// the command finished, it rolls the command's transaction back.
struct RollbackOnDrop(Option<PoolConnection<Any>>);

impl RollbackOnDrop {
    /// The command committed (or failed at `BEGIN`): the connection goes
    /// back to the pool as it is.
    fn finished(mut self) {
        self.0.take();
    }
}

impl Drop for RollbackOnDrop {
    fn drop(&mut self) {
        let Some(mut connection) = self.0.take() else {
            return;
        };
        // sqlx needs a runtime to return a connection at all; without one
        // the pool's own drop handles it, as for any connection.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The ROLLBACK queues behind whatever the thread still runs of the
        // command, and the connection returns to the pool after it. With no
        // transaction open (the command failed at `BEGIN`, or after
        // `COMMIT`) it fails harmlessly; a ROLLBACK that fails otherwise may
        // leave the transaction open, so the connection is closed instead
        // (which ends it).
        runtime.spawn(async move {
            if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *connection).await {
                let none_open = e
                    .as_database_error()
                    .is_some_and(|e| e.message().contains("no transaction is active"));
                if !none_open {
                    tracing::warn!(error = %e, "rolling back a SQLite command that stopped part way failed; closing the writer connection");
                    connection.close_on_drop();
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_create_missing_files() {
        assert_eq!(creating("sqlite://chime.db"), "sqlite://chime.db?mode=rwc");
        assert_eq!(
            creating("sqlite://a.db?cache=shared"),
            "sqlite://a.db?cache=shared&mode=rwc"
        );
        assert_eq!(creating("sqlite://a.db?mode=ro"), "sqlite://a.db?mode=ro");
    }
}
