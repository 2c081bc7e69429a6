//! The database's clock and what the replicas' own clocks are measured
//! against (see `crate::ops::clock_monitor`).

use super::error::StoreError;
use super::handle::Store;

impl Store {
    /// The database clock minus this process's clock, at the midpoint of the
    /// query's round trip (the wait for a connection is not part of it).
    /// SQLite's clock is this machine's: zero.
    pub async fn clock_offset(&self) -> Result<chrono::Duration, StoreError> {
        self.backend.clock_offset(&self.read).await
    }
}
