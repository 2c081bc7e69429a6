//! Console login sessions, kept in the store so every replica behind a load
//! balancer knows them and a logout ends them everywhere.

use super::error::StoreError;
use super::handle::Store;
use super::values::{ms, RowExt};
use chrono::{DateTime, Utc};

/// A live session: whose it is and its CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub user: String,
    pub csrf: String,
    pub expires_at: i64,
}

impl Store {
    /// Records a session for `user`, keyed by the SHA-256 of its token.
    pub async fn create_session(
        &self,
        token_sha256: &str,
        user: &str,
        csrf: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.retrying(|| async {
            sqlx::query(
                "INSERT INTO sessions (token_sha256, user_name, csrf, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(token_sha256)
            .bind(user)
            .bind(csrf)
            .bind(ms(now))
            .bind(ms(expires_at))
            .execute(&self.write)
            .await?;
            Ok(())
        })
        .await
    }

    /// The session of this token, unless it expired by `now`.
    pub async fn session(
        &self,
        token_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Session>, StoreError> {
        let row = sqlx::query(
            "SELECT user_name, csrf, expires_at FROM sessions \
             WHERE token_sha256 = $1 AND expires_at > $2",
        )
        .bind(token_sha256)
        .bind(ms(now))
        .fetch_optional(&self.read)
        .await?;
        row.map(|row| {
            Ok(Session {
                user: row.text("session", "user_name")?,
                csrf: row.text("session", "csrf")?,
                expires_at: row.int("session", "expires_at")?,
            })
        })
        .transpose()
    }

    /// Ends a session (logout); ending one that does not exist is no error.
    pub async fn delete_session(&self, token_sha256: &str) -> Result<(), StoreError> {
        self.retrying(|| async {
            sqlx::query("DELETE FROM sessions WHERE token_sha256 = $1")
                .bind(token_sha256)
                .execute(&self.write)
                .await?;
            Ok(())
        })
        .await
    }

    /// Deletes sessions expired by `now`; returns how many.
    pub async fn prune_sessions(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        self.retrying(|| async {
            let done = sqlx::query("DELETE FROM sessions WHERE expires_at <= $1")
                .bind(ms(now))
                .execute(&self.write)
                .await?;
            Ok(done.rows_affected())
        })
        .await
    }
}
