//! The seam between the store's logic and its two databases.
//!
//! Everything the backends do differently lives under this module: SQL
//! fragments (row locks, how a write transaction begins, how a JSON batch is
//! expanded into rows), the pools and migrations, and the few writes that
//! PostgreSQL combines into one statement where SQLite runs a transaction.
//! Each such item dispatches here, once, to `postgres.rs` or `sqlite.rs`; the
//! logic files never ask which database they talk to.
//!
//! The exceptions are the fast paths of start and finish, written once
//! per backend: on PostgreSQL one data-modifying `WITH` statement each, on
//! SQLite (which has no such statement) a transaction of statements sent as
//! one command ([`Store::fast_path`]); and staging, which on SQLite reads on
//! a reader and writes in one such command ([`Store::in_one_command`]).
//! They stay in `start.rs`, `finish.rs` and `stage.rs`, next to the
//! transaction path they shortcut and built from the same fragments.
//!
//! Everything else in the store is one SQL text for both: `$n` parameters,
//! `ON CONFLICT`, `RETURNING`, `UPDATE … FROM`, partial indexes and row-value
//! comparisons mean the same on PostgreSQL 14+ and SQLite 3.35+ (sqlx bundles
//! a newer SQLite).

mod postgres;
mod sqlite;

pub(crate) use sqlite::{in_one_command, Checkpoints};

use super::error::StoreError;
use sqlx::any::AnyArguments;
use sqlx::query::{Query, QueryAs, QueryScalar};
use sqlx::{Any, AnyPool};

/// Which database the store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PostgreSQL: the production store, many replicas.
    Postgres,
    /// SQLite: the embedded single-node default.
    Sqlite,
}

/// SQL type of a column in a JSON batch (see [`Backend::json_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    Int,
    Text,
}

impl Backend {
    /// The backend a database URL names.
    pub fn from_url(url: &str) -> Option<Backend> {
        let scheme = url.split(':').next().unwrap_or("");
        match scheme {
            "postgres" | "postgresql" => Some(Backend::Postgres),
            "sqlite" => Some(Backend::Sqlite),
            _ => None,
        }
    }

    /// The name used in logs and errors.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }

    /// Row lock for rows a transaction reads and then changes. SQLite needs
    /// none: write transactions begin `IMMEDIATE`, so they run one at a time.
    pub(crate) fn for_update(self) -> &'static str {
        match self {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        }
    }

    /// Row lock on one table of a join (`alias`), for rows a transaction
    /// reads and then changes.
    pub(crate) fn for_update_of(self, alias: &str) -> String {
        match self {
            Backend::Postgres => postgres::for_update_of(alias),
            Backend::Sqlite => String::new(),
        }
    }

    /// Row lock on one table of a query (`alias`) that passes over rows
    /// another transaction holds: replicas staging the same partition split
    /// the due jobs between them instead of waiting.
    pub(crate) fn for_update_skip_locked(self, alias: &str) -> String {
        match self {
            Backend::Postgres => postgres::for_update_skip_locked(alias),
            Backend::Sqlite => String::new(),
        }
    }

    /// The most due jobs one staging transaction takes, whatever the slicer
    /// asks, once `staged` jobs of the same staging are written. SQLite has
    /// one writer: while a staging command writes, every start and finish
    /// waits, so a second's jobs are staged in short commands the starts of
    /// the running slice can pass between; and since each command also
    /// waits its turn behind them, a dense slice's jobs past the first
    /// thousand go in longer ones, or it would be staged too late.
    /// PostgreSQL stages beside them and takes the slicer's batch whole.
    pub(crate) fn stage_jobs_per_transaction(self, asked: u32, staged: usize) -> usize {
        let asked = asked.max(1) as usize;
        match self {
            Backend::Postgres => asked,
            Backend::Sqlite => asked.min(sqlite::stage_jobs_per_command(staged)),
        }
    }

    /// The statement that opens a write transaction.
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Backend::Postgres => "BEGIN",
            // Take the write lock up front: a deferred transaction that reads
            // and then writes can fail with SQLITE_BUSY instead of waiting.
            Backend::Sqlite => "BEGIN IMMEDIATE",
        }
    }

    /// A FROM item, aliased `r`, that expands the JSON array of objects bound
    /// as parameter `$param` into rows with the given columns; `$param + 1`
    /// is the array's length (both bound by [`BindRows::bind_rows`]).
    ///
    /// This is how every batch reaches the database: one statement, any
    /// number of rows (PostgreSQL `json_to_recordset`, SQLite `json_each`).
    /// It plays the part of PostgreSQL's `UNNEST($1::text[], …)`, which
    /// sqlx's `Any` driver cannot bind, and keeps one SQL text per statement
    /// on both backends. Text values are JSON strings, integers JSON numbers
    /// (milliseconds stay below 2^53), absent values JSON null.
    pub(crate) fn json_rows(self, param: usize, columns: &[(&str, Col)]) -> String {
        match self {
            Backend::Postgres => postgres::json_rows(param, columns),
            Backend::Sqlite => sqlite::json_rows(param, columns),
        }
    }

    /// The value of the label whose key is bound as `key` (a placeholder,
    /// `$n`), read from the spec JSON of `jobs` alias `j`; NULL when the job
    /// has no such label.
    pub(crate) fn label_value(self, key: String) -> String {
        match self {
            Backend::Postgres => format!("(j.spec::jsonb -> 'labels' ->> {key})"),
            // A quoted path step: keys may hold `.` and `/`, never `"`.
            Backend::Sqlite => {
                format!("json_extract(j.spec, '$.labels.' || json_quote({key}))")
            }
        }
    }

    /// The database clock minus this process's clock (see
    /// `Store::clock_offset`).
    pub(crate) async fn clock_offset(self, pool: &AnyPool) -> Result<chrono::Duration, StoreError> {
        match self {
            Backend::Postgres => postgres::clock_offset(pool).await,
            Backend::Sqlite => Ok(chrono::Duration::zero()),
        }
    }

    /// Opens the store's pools on `url`.
    pub(crate) async fn open(self, url: &str, max_connections: u32) -> Result<Pools, StoreError> {
        match self {
            Backend::Postgres => postgres::open(url, max_connections).await,
            Backend::Sqlite => sqlite::open(url, max_connections).await,
        }
    }

    /// Applies the backend's migrations. sqlx's SQLite migrator takes no
    /// lock, so stores opened together in one process are serialized here
    /// (PostgreSQL's takes an advisory lock, which covers replicas too).
    ///
    /// Migrations this release does not know (a newer release applied
    /// them) are ignored rather than refused: migrations only expand the
    /// schema while a previous release may still run on it
    /// (docs/OPERATIONS.md, "Upgrades"), so a replica of the older release
    /// that restarts mid-upgrade, or a rollback, must still start.
    pub(crate) async fn migrate(self, pool: &AnyPool) -> Result<(), StoreError> {
        match self {
            Backend::Postgres => {
                let mut migrator = sqlx::migrate!("./migrations/postgres");
                migrator.set_ignore_missing(true);
                migrator.run(pool).await?
            }
            Backend::Sqlite => {
                let _guard = SQLITE_MIGRATIONS.lock().await;
                let mut migrator = sqlx::migrate!("./migrations/sqlite");
                migrator.set_ignore_missing(true);
                migrator.run(pool).await?
            }
        }
        Ok(())
    }
}

/// A batch for [`Backend::json_rows`]: its rows as one JSON array, and how
/// many there are. Only `json_text` and `id_batch` build one, from the rows
/// themselves, so the count is always the array's.
#[derive(Debug)]
pub(crate) struct JsonRows {
    text: String,
    len: i64,
}

impl JsonRows {
    pub(crate) fn new(text: String, len: usize) -> JsonRows {
        JsonRows {
            text,
            len: i64::try_from(len).unwrap_or(i64::MAX),
        }
    }
}

/// Binds a [`JsonRows`] to the two placeholders [`Backend::json_rows`]
/// reads, in order: the JSON, then its length. Borrowed, so one batch can
/// serve several statements without a copy.
pub(crate) trait BindRows<'q> {
    fn bind_rows(self, rows: &'q JsonRows) -> Self;
}

impl<'q> BindRows<'q> for Query<'q, Any, AnyArguments<'q>> {
    fn bind_rows(self, rows: &'q JsonRows) -> Self {
        self.bind(rows.text.as_str()).bind(rows.len)
    }
}

impl<'q, O> BindRows<'q> for QueryAs<'q, Any, O, AnyArguments<'q>> {
    fn bind_rows(self, rows: &'q JsonRows) -> Self {
        self.bind(rows.text.as_str()).bind(rows.len)
    }
}

impl<'q, O> BindRows<'q> for QueryScalar<'q, Any, O, AnyArguments<'q>> {
    fn bind_rows(self, rows: &'q JsonRows) -> Self {
        self.bind(rows.text.as_str()).bind(rows.len)
    }
}

/// Serializes SQLite migrations within the process.
static SQLITE_MIGRATIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The connection pools of a store.
pub(crate) struct Pools {
    /// Reads outside transactions.
    pub read: AnyPool,
    /// Write transactions (the same pool as `read` on PostgreSQL).
    pub write: AnyPool,
    /// The one-statement fast paths of start and finish, and the publish
    /// mark, on PostgreSQL; none on SQLite, whose fast paths run on the writer.
    pub fast_paths: Option<AnyPool>,
    /// The checkpoints of a SQLite file; none on PostgreSQL, which
    /// checkpoints by itself, nor for an in-memory database, which has no log.
    pub checkpoints: Option<Checkpoints>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(
            Backend::from_url("postgres://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("postgresql://u@h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(
            Backend::from_url("sqlite://chime.db"),
            Some(Backend::Sqlite)
        );
        assert_eq!(Backend::from_url("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(Backend::from_url("mysql://h/db"), None);
    }

    #[test]
    fn json_rows_declare_columns_per_backend() {
        let cols = [("id", Col::Text), ("n", Col::Int)];
        assert_eq!(
            Backend::Postgres.json_rows(1, &cols),
            "(SELECT * FROM json_to_recordset($1::json) AS r(id text, n bigint) LIMIT $2) AS r"
        );
        assert_eq!(
            Backend::Sqlite.json_rows(2, &cols),
            "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.n') AS n FROM json_each($2) LIMIT $3) AS r"
        );
    }
}
