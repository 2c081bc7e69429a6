//! A fresh PostgreSQL database per test.
//!
//! Tests share one PostgreSQL server (starting one per test would cost
//! seconds) but never a database: each [`PgDatabase`] is a new, empty
//! database with a random name, so tests run in parallel without seeing each
//! other's rows, and migrations run from scratch every time.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

/// Environment variable with the URL of the server tests create databases
/// on. The user must be allowed to `CREATE DATABASE`.
pub const PG_URL_ENV: &str = "CHIME_TEST_PG_URL";

/// Used when [`PG_URL_ENV`] is unset: the local server, trusted user
/// `postgres`, as `./deploy/local/test.sh` sets it up.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Bound on connecting to the server; a firewall may drop packets silently.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Bound on dropping a database in `Drop`, which must not hang a test.
const DROP_TIMEOUT: Duration = Duration::from_secs(20);

/// An empty database created for one test, dropped when this is dropped.
#[derive(Debug)]
pub struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    /// Creates `chime_test_<random>` on the server at `$CHIME_TEST_PG_URL`
    /// (default [`DEFAULT_PG_URL`]). Panics, naming the URL, if the server
    /// cannot be reached or refuses.
    pub async fn create() -> Self {
        let admin_url = admin_url();
        let mut admin = connect(&admin_url).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach PostgreSQL at {admin_url}: {e}\n\
                 Start PostgreSQL there (`./deploy/local/test.sh` does), or set {PG_URL_ENV} to the URL \
                 of a server where this user may CREATE DATABASE."
            )
        });
        let name = format!("chime_test_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot create database {name} on {admin_url}: {e}\n\
                     The user in {PG_URL_ENV} needs the CREATEDB privilege."
                )
            });
        let _ = admin.close().await;
        let url = with_database(&admin_url, &name);
        PgDatabase {
            admin_url,
            name,
            url,
        }
    }

    /// The URL of the new database, same server and credentials.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name, `chime_test_<32 hex digits>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of the server's administrative database this one was
    /// created from (`$CHIME_TEST_PG_URL`).
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }
}

impl Drop for PgDatabase {
    /// Drops the database, best effort: a leftover database is harmless, a
    /// panic in `Drop` during unwinding aborts the test binary. `Drop` cannot
    /// await and cannot block on the test's own runtime, so the work runs on
    /// a thread with its own small runtime, joined so that the database is
    /// gone when `drop` returns. `WITH (FORCE)` ends connections that pools
    /// or killed processes under test still hold.
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let worker = std::thread::Builder::new()
            .name("chime-test-pg-drop".to_owned())
            .spawn(move || -> Result<(), String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async {
                    tokio::time::timeout(DROP_TIMEOUT, drop_database(&admin_url, &name))
                        .await
                        .map_err(|_| format!("timed out after {DROP_TIMEOUT:?}"))?
                })
            });
        let outcome = match worker {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|_| Err("the drop thread panicked".to_owned())),
            Err(e) => Err(format!("cannot start a thread: {e}")),
        };
        if let Err(e) = outcome {
            eprintln!("warning: test database {} was not dropped: {e}", self.name);
        }
    }
}

async fn drop_database(admin_url: &str, name: &str) -> Result<(), String> {
    let mut admin = connect(admin_url).await?;
    sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
        .execute(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let _ = admin.close().await;
    Ok(())
}

/// `$CHIME_TEST_PG_URL`, or [`DEFAULT_PG_URL`] when unset or empty.
pub fn admin_url() -> String {
    std::env::var(PG_URL_ENV)
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| DEFAULT_PG_URL.to_owned())
}

async fn connect(url: &str) -> Result<PgConnection, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect(url))
        .await
        .map_err(|_| format!("no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())
}

/// `url` with its database (the path) replaced by `database`, keeping
/// credentials, host and query parameters.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{database}", &base[..path]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "t1"),
            "postgres://postgres@127.0.0.1:5432/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@db:5433", "t1"),
            "postgres://u:p@db:5433/t1"
        );
        assert_eq!(
            with_database("postgres://u@h/postgres?sslmode=disable", "t1"),
            "postgres://u@h/t1?sslmode=disable"
        );
    }
}
