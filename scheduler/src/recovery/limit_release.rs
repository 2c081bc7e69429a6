//! Releases firings held by a concurrency limit when the limit leaves room
//! that no finish announced: a rate window that moved on
//! (`max_per_second`), a limit raised or removed (`groups.put`, `jobs.put`),
//! a slot that a crash freed. A finish releases into the slot it frees
//! itself (`store/hold.rs`); this pass is what makes a held firing wait
//! only as long as its limit says, whatever else happens. One replica runs
//! it at a time (see `lease.rs`).

use crate::firing::immediate::Wake;
use crate::pass::check_pass;
use crate::store::{Store, StoreError};
use chime_common::FiringId;
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Release pass settings.
#[derive(Debug, Clone)]
pub struct LimitReleaseConfig {
    /// How often to look at held firings: a rate-limited firing starts at
    /// most about this much later than its limit allows.
    pub interval: Duration,
    /// Jobs looked at per pass; bounded so one pass never runs long (the
    /// next pass takes the rest).
    pub batch: u32,
    /// The lease that makes one replica release.
    pub lease_ttl: Duration,
}

impl Default for LimitReleaseConfig {
    fn default() -> Self {
        LimitReleaseConfig {
            interval: Duration::from_millis(200),
            batch: 1_000,
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl LimitReleaseConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_pass(
            "limit release",
            self.interval,
            Some(self.batch),
            Some(self.lease_ttl),
        )
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LimitReleaseOutcome {
    /// The held firings released, staged again to be published.
    pub released: Vec<FiringId>,
}

/// Releases held firings as their limits allow.
pub struct LimitRelease {
    pub config: LimitReleaseConfig,
    pub store: Store,
    /// Woken when a pass released firings, so they are published at once.
    pub immediate: Wake,
}

impl LimitRelease {
    /// One pass: for each job holding firings, releases what its limit and
    /// its group's leave room for at `now`.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<LimitReleaseOutcome, StoreError> {
        let mut released = Vec::new();
        for (job_id, group) in self.store.holding(self.config.batch).await? {
            released.extend(self.store.release_for(&job_id, &group, now).await?);
        }
        if !released.is_empty() {
            tracing::debug!(count = released.len(), "held firings released");
            self.immediate.wake();
        }
        Ok(LimitReleaseOutcome { released })
    }
}

impl Service for LimitRelease {
    type Outcome = LimitReleaseOutcome;
    type Error = StoreError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<LimitReleaseOutcome, StoreError> {
        LimitRelease::run_once(self, now).await
    }
}
