//! SQLite's checkpointer: copies the write-ahead log into the database file
//! often, on a connection of its own, so that little is left for the one
//! writer to copy when it must checkpoint itself.
//!
//! Each checkpoint that copies anything syncs the log first, and each sync
//! writes out everything committed since the one before. Checkpointing once
//! a second would make each sync flush a second of commits, and on a disk
//! shared with the log the writer's own writes would wait behind that flush:
//! the tail of every start and finish would be set by the checkpoint's
//! cadence. A short interval keeps each flush small (docs/PERFORMANCE.md,
//! "Tuning").
//!
//! The log starts over from its beginning only after a checkpoint that
//! copied all of it and synced the database file, and while commits keep
//! coming only the writer's own checkpoint gets there: one lands while this
//! one copies. So the writer still checkpoints each time the log reaches
//! its `wal_autocheckpoint` pages (`store/dialect/sqlite.rs`), and pauses for
//! what this one has not copied and for the database file's sync. This one
//! syncs the database file itself after each checkpoint that copied pages
//! (`store/dialect/sqlite/checkpoint.rs`), so the writer's sync finds
//! little left to write. PostgreSQL checkpoints by itself; this runs on
//! SQLite only.

use crate::pass::check_pass;
use crate::store::{Store, StoreError};
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Checkpointer settings.
#[derive(Debug, Clone)]
pub struct CheckpointerConfig {
    /// How often the log is copied into the database file.
    pub interval: Duration,
}

impl Default for CheckpointerConfig {
    fn default() -> Self {
        CheckpointerConfig {
            interval: Duration::from_millis(200),
        }
    }
}

impl CheckpointerConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_pass("checkpoint", self.interval, None, None)
    }
}

/// Checkpoints one store.
pub struct Checkpointer {
    pub config: CheckpointerConfig,
    pub store: Store,
}

impl Checkpointer {
    /// One checkpoint; returns how many of the log's pages the database file
    /// holds afterwards.
    pub async fn run_once(&self) -> Result<u64, StoreError> {
        self.store.checkpoint().await
    }
}

impl Service for Checkpointer {
    type Outcome = u64;
    type Error = StoreError;

    async fn run_once(&self, _now: DateTime<Utc>) -> Result<u64, StoreError> {
        Checkpointer::run_once(self).await
    }
}
