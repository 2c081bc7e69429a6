//! Stores on real databases for the store's own unit tests: a SQLite file
//! in a temporary directory, and a fresh database on the test PostgreSQL
//! (`CHIME_TEST_PG_URL`), dropped afterwards.

use super::handle::Store;
use super::types::StoreOptions;
use chime_common::{FiringId, JobSpec, Limits};
use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection};

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A store and what it lives on.
pub(crate) struct TestStore {
    pub store: Store,
    _dir: Option<tempfile::TempDir>,
    /// The server's URL and the database's name, to drop it.
    pg: Option<(String, String)>,
}

impl TestStore {
    /// A store on a new SQLite file.
    pub async fn sqlite() -> TestStore {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("chime.db").display());
        TestStore {
            store: Store::connect(&url, StoreOptions::default())
                .await
                .expect("a SQLite store"),
            _dir: Some(dir),
            pg: None,
        }
    }

    /// A store on a new database of the test PostgreSQL.
    pub async fn postgres() -> TestStore {
        let admin = std::env::var("CHIME_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_PG_URL.into());
        let name = format!("chime_unit_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin)
            .await
            .expect("the test PostgreSQL ($CHIME_TEST_PG_URL)");
        sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut conn)
            .await
            .expect("a new database");
        let _ = conn.close().await;
        let (base, query) = admin.split_once('?').unwrap_or((admin.as_str(), ""));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        let url = format!("{server}/{name}?{query}");
        TestStore {
            store: Store::connect(&url, StoreOptions::default())
                .await
                .expect("a PostgreSQL store"),
            _dir: None,
            pg: Some((admin, name)),
        }
    }

    /// Puts a job that fires hourly and triggers it: one firing, staged.
    pub async fn triggered(&self, now: DateTime<Utc>) -> FiringId {
        self.triggered_job("hourly", now).await
    }

    /// [`TestStore::triggered`] for a job named `job`.
    pub async fn triggered_job(&self, job: &str, now: DateTime<Utc>) -> FiringId {
        let spec = JobSpec::from_json(
            &serde_json::json!({
                "id": job,
                "schedule": {"every": "1h"},
                "handler": "test",
            }),
            &Limits::default(),
        )
        .expect("a valid spec");
        self.store.put_job(&spec, now).await.expect("put");
        self.store
            .trigger(job, None, now)
            .await
            .expect("trigger")
            .expect("a firing")
    }
}

impl Drop for TestStore {
    /// Drops the PostgreSQL database, also after a failed test (on a thread
    /// of its own: a test's runtime cannot block on it).
    fn drop(&mut self) {
        let Some((admin, name)) = self.pg.take() else {
            return;
        };
        let database = name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut conn = PgConnection::connect(&admin)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query(&format!(
                    r#"DROP DATABASE IF EXISTS "{database}" WITH (FORCE)"#
                ))
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
                let _ = conn.close().await;
                Ok::<(), String>(())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("warning: test database {name} not dropped: {e}");
        }
    }
}
