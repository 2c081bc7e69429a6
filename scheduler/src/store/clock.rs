//! The database's clock and what the replicas' own clocks are measured
//! against (see `crate::clock`).

use super::{Backend, Store, StoreError};
use chrono::Utc;
use sqlx::Row as _;

impl Store {
    /// The database clock minus this process's clock, at the midpoint of the
    /// query's round trip (the wait for a connection is not part of it).
    /// SQLite's clock is this machine's: zero.
    pub async fn clock_offset(&self) -> Result<chrono::Duration, StoreError> {
        if self.backend == Backend::Sqlite {
            return Ok(chrono::Duration::zero());
        }
        let mut connection = self.read.acquire().await?;
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
}
