//! Housekeeping: rescues staged firings nobody published, enforces history
//! and audit retention, ends expired console sessions, and refreshes the
//! firing gauges.
//!
//! Slice takeover (see `slicer.rs`) recovers a dead replica's firings within
//! about a slice; this is the net under it: any firing still `staged` well
//! after its due instant (its claim expired from the bucket, or the takeover
//! could not read the store) is published from here. Dedup by `Nats-Msg-Id`
//! makes an overlap with a late original harmless. One replica runs it at a
//! time (see `lease.rs`).

use crate::firing::wheel::Wheel;
use crate::ops::metrics::Metrics;
use crate::pass::check_pass;
use crate::store::{RetentionCursor, Store, StoreError};
use chime_common::FiringId;
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;

/// Housekeeping settings.
#[derive(Debug, Clone)]
pub struct HousekeepingConfig {
    /// How often to run.
    pub interval: Duration,
    /// A staged firing this far past due is rescued.
    pub rescue_after: Duration,
    /// Rescued per pass.
    pub rescue_batch: u32,
    /// Final firings older than this are pruned...
    pub retention: Duration,
    /// ...except the newest this many per job.
    pub keep_per_job: u32,
    /// Firings the retention sweep scans per statement, and at most
    /// [`MAX_PRUNE_BATCHES`] statements a pass: each statement is short, so
    /// on SQLite the one writer serves starts and finishes between them.
    pub prune_batch: u32,
    /// Audit entries older than this are pruned.
    pub audit_retention: Duration,
    /// How often to prune audit entries and expired sessions (history is
    /// swept every pass, a batch at a time).
    pub prune_interval: Duration,
    /// How often to count live firings for the `firings{group,state}`
    /// gauges: the count reads every staged and published row, tens of
    /// milliseconds of database time at thousands of firings per second.
    pub count_interval: Duration,
    /// The lease that makes one replica the housekeeper.
    pub lease_ttl: Duration,
}

impl Default for HousekeepingConfig {
    fn default() -> Self {
        HousekeepingConfig {
            interval: Duration::from_secs(1),
            rescue_after: Duration::from_secs(10),
            rescue_batch: 5_000,
            retention: Duration::from_secs(7 * 24 * 3600),
            keep_per_job: 100,
            prune_batch: 1_000,
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            prune_interval: Duration::from_secs(60),
            count_interval: Duration::from_secs(10),
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl HousekeepingConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_pass(
            "housekeeping",
            self.interval,
            Some(self.rescue_batch.min(self.prune_batch)),
            Some(self.lease_ttl),
        )?;
        if self.retention.is_zero() {
            return Err("--history-retention must be above zero".into());
        }
        if self.audit_retention.is_zero() {
            return Err("--audit-retention must be above zero".into());
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HousekeepingOutcome {
    pub rescued: usize,
    pub pruned: u64,
    /// Audit entries past their retention and expired sessions deleted.
    pub pruned_audit: u64,
    pub pruned_sessions: u64,
}

/// The housekeeper.
pub struct Housekeeping {
    pub config: HousekeepingConfig,
    pub store: Store,
    pub wheel: Wheel,
    pub metrics: Metrics,
    last_prune: std::sync::Mutex<Option<DateTime<Utc>>>,
    /// Where the retention sweep goes on from; a new housekeeper starts
    /// from the oldest firing.
    retention_cursor: std::sync::Mutex<RetentionCursor>,
    last_count: std::sync::Mutex<Option<DateTime<Utc>>>,
    /// Firings handed to the wheel recently, so a pass does not hand the same
    /// ones over again while their publish is still under way.
    rescued: std::sync::Mutex<HashMap<FiringId, DateTime<Utc>>>,
}

impl Housekeeping {
    /// A housekeeper that hands rescued firings to `wheel`.
    pub fn new(config: HousekeepingConfig, store: Store, wheel: Wheel, metrics: Metrics) -> Self {
        Housekeeping {
            config,
            store,
            wheel,
            metrics,
            last_prune: Default::default(),
            retention_cursor: Default::default(),
            last_count: Default::default(),
            rescued: Default::default(),
        }
    }

    /// One pass.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<HousekeepingOutcome, StoreError> {
        let mut outcome = HousekeepingOutcome::default();
        let due_before =
            now - chrono::Duration::from_std(self.config.rescue_after).unwrap_or_default();
        let orphans = self
            .store
            .overdue_staged(due_before, self.config.rescue_batch)
            .await?;
        let orphans: Vec<_> = {
            let mut rescued = self.rescued.lock().unwrap_or_else(|p| p.into_inner());
            let again_after =
                chrono::Duration::from_std(self.config.rescue_after).unwrap_or_default();
            rescued.retain(|_, at| now - *at < again_after);
            orphans
                .into_iter()
                .filter(|f| rescued.insert(f.id.clone(), now).is_none())
                .collect()
        };
        if !orphans.is_empty() {
            tracing::warn!(
                count = orphans.len(),
                "rescuing staged firings nobody published"
            );
            outcome.rescued = orphans.len();
            self.metrics.rescued.inc_by(orphans.len() as u64);
            self.wheel.insert(orphans, None);
        }
        outcome.pruned = self.prune_history(now).await?;
        if due(&self.last_prune, self.config.prune_interval, now) {
            let audit_before =
                now - chrono::Duration::from_std(self.config.audit_retention).unwrap_or_default();
            outcome.pruned_audit = self.store.prune_audit(audit_before).await?;
            outcome.pruned_sessions = self.store.prune_sessions(now).await?;
            *self.last_prune.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        }
        if due(&self.last_count, self.config.count_interval, now) {
            let counts = self.store.counts_by_state().await?;
            self.metrics.firings_by_state.reset();
            for (group, state, count) in counts {
                self.metrics
                    .firings_by_state
                    .with_label_values(&[group.as_str(), state.as_str()])
                    .set(count);
            }
            *self.last_count.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        }
        Ok(outcome)
    }

    /// Sweeps history on from where the last pass stopped, a batch at a
    /// time, until it reaches the retention age or [`MAX_PRUNE_BATCHES`].
    async fn prune_history(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let before = now - chrono::Duration::from_std(self.config.retention).unwrap_or_default();
        let mut cursor = self
            .retention_cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut deleted = 0;
        for _ in 0..MAX_PRUNE_BATCHES {
            let pruned = self
                .store
                .prune_history(
                    before,
                    self.config.keep_per_job,
                    &cursor,
                    self.config.prune_batch,
                )
                .await?;
            deleted += pruned.deleted;
            self.metrics.pruned.inc_by(pruned.deleted);
            cursor = pruned.cursor;
            *self
                .retention_cursor
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = cursor.clone();
            if pruned.scanned < self.config.prune_batch as usize {
                break;
            }
        }
        Ok(deleted)
    }
}

/// The most retention batches one pass runs: a history far behind its
/// retention (a new housekeeper's first sweep, a retention made shorter) is
/// caught up over several passes, so a pass stays short.
pub const MAX_PRUNE_BATCHES: usize = 50;

impl Service for Housekeeping {
    type Outcome = HousekeepingOutcome;
    type Error = StoreError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<HousekeepingOutcome, StoreError> {
        Housekeeping::run_once(self, now).await
    }
}

/// Whether a step last run at `last` is due again at `now`.
fn due(
    last: &std::sync::Mutex<Option<DateTime<Utc>>>,
    every: Duration,
    now: DateTime<Utc>,
) -> bool {
    let last = last.lock().unwrap_or_else(|p| p.into_inner());
    last.is_none_or(|t| now - t >= chrono::Duration::from_std(every).unwrap_or_default())
}
