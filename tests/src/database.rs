//! One test body, both storage backends.
//!
//! Chime promises the same behaviour on PostgreSQL and SQLite, so storage
//! tests run against both. [`backend_tests!`](crate::backend_tests) turns one
//! body into two tests, `<name>::postgres` and `<name>::sqlite`, so a failure
//! names its backend and `cargo test sqlite` selects one side.

use std::fmt;

use crate::{PgDatabase, SqliteDatabase};

/// Which storage backend a [`TestDatabase`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DatabaseKind {
    Postgres,
    Sqlite,
}

impl DatabaseKind {
    /// Both backends, PostgreSQL first.
    pub const ALL: [DatabaseKind; 2] = [DatabaseKind::Postgres, DatabaseKind::Sqlite];

    /// `postgres` or `sqlite`.
    pub fn name(self) -> &'static str {
        match self {
            DatabaseKind::Postgres => "postgres",
            DatabaseKind::Sqlite => "sqlite",
        }
    }
}

impl fmt::Display for DatabaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fresh, empty database of either kind, removed when dropped.
#[derive(Debug)]
pub enum TestDatabase {
    Postgres(PgDatabase),
    Sqlite(SqliteDatabase),
}

impl TestDatabase {
    /// Creates an empty database of the given kind (see
    /// [`PgDatabase::create`] and [`SqliteDatabase::create`]).
    pub async fn create(kind: DatabaseKind) -> Self {
        match kind {
            DatabaseKind::Postgres => TestDatabase::Postgres(PgDatabase::create().await),
            DatabaseKind::Sqlite => TestDatabase::Sqlite(SqliteDatabase::create()),
        }
    }

    /// The URL to hand to the scheduler (`--database-url`).
    pub fn url(&self) -> String {
        match self {
            TestDatabase::Postgres(db) => db.url().to_owned(),
            TestDatabase::Sqlite(db) => db.url(),
        }
    }

    /// Which backend this is.
    pub fn kind(&self) -> DatabaseKind {
        match self {
            TestDatabase::Postgres(_) => DatabaseKind::Postgres,
            TestDatabase::Sqlite(_) => DatabaseKind::Sqlite,
        }
    }
}

/// Defines each test once per backend.
///
/// ```ignore
/// use chime_tests::{backend_tests, TestDatabase};
///
/// backend_tests! {
///     /// Doc comments and attributes such as `#[ignore]` apply to both.
///     async fn put_then_get_returns_the_job(db: TestDatabase) {
///         let store = Store::connect(&db.url()).await.unwrap();
///         // …
///     }
///
///     async fn may_return_a_result(db: TestDatabase) -> anyhow::Result<()> {
///         Ok(())
///     }
/// }
/// ```
///
/// expands to modules `put_then_get_returns_the_job` and
/// `may_return_a_result`, each with `#[tokio::test]` functions `postgres`
/// and `sqlite` that create a fresh [`TestDatabase`], bind it to the
/// parameter (whose type must be `TestDatabase`) and run the body. The body
/// sees the enclosing module's items (`use super::*`). The calling crate
/// needs `tokio` as a dependency, as every suite in `chime-tests` has.
#[macro_export]
macro_rules! backend_tests {
    ($(
        $(#[$meta:meta])*
        async fn $name:ident($db:ident : $db_type:ty) $(-> $ret:ty)? $body:block
    )*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$meta])*
            #[tokio::test]
            async fn postgres() $(-> $ret)? {
                let $db: $db_type = $crate::TestDatabase::create($crate::DatabaseKind::Postgres).await;
                $body
            }

            $(#[$meta])*
            #[tokio::test]
            async fn sqlite() $(-> $ret)? {
                let $db: $db_type = $crate::TestDatabase::create($crate::DatabaseKind::Sqlite).await;
                $body
            }
        }
    )*};
}
