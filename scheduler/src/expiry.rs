//! The expiry monitor: re-queues firings whose worker vanished or whose
//! deadline passed. Published firings no worker started are the
//! republisher's (`republish.rs`).
//!
//! One replica runs it at a time (see `lease.rs`). A worker is gone when its
//! heartbeat key in `chime-workers` has expired. Re-queuing is atomic and
//! once in the store: the attempt ends `lost` and the next attempt is staged
//! while attempts remain, so an attempt never runs twice concurrently.

use crate::metrics::Metrics;
use crate::retry::retry_delay;
use crate::store::{Store, StoreError};
use crate::worker_reports::WorkerReports;
use async_nats::jetstream::kv;
use chime_common::service::{Service, ServiceError};
use chime_common::FiringId;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Expiry monitor settings.
#[derive(Debug, Clone)]
pub struct ExpiryConfig {
    /// How often to scan the executing table.
    pub interval: Duration,
    /// Rows handled per scan; bounded so one scan never holds a long transaction.
    pub batch: u32,
    /// A firing started this recently is not judged by its worker's heartbeat
    /// yet (the worker may not have beaten since it started).
    pub start_grace: Duration,
    /// How long past its deadline an executing firing may go unreported
    /// before it is re-queued (the worker cuts it off at the deadline itself).
    pub deadline_grace: Duration,
    /// The lease that makes one replica the monitor.
    pub lease_ttl: Duration,
}

impl Default for ExpiryConfig {
    fn default() -> Self {
        ExpiryConfig {
            interval: Duration::from_secs(1),
            batch: 1_000,
            start_grace: Duration::from_secs(2),
            deadline_grace: Duration::from_secs(5),
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl ExpiryConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.batch == 0 {
            return Err("--expiry-interval and the expiry batch must be above zero".into());
        }
        if self.lease_ttl <= self.interval {
            return Err("the expiry lease must outlast one expiry interval".into());
        }
        Ok(())
    }
}

/// What one scan did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ExpiryOutcome {
    /// Attempts ended `lost` (each re-queued or, with no attempts left, final).
    pub lost: Vec<FiringId>,
    /// Next attempts staged.
    pub retried: Vec<FiringId>,
    /// Firings the store refused to re-queue (not for an outage); retried next scan.
    pub failed: Vec<FiringId>,
    /// Firings whose worker's heartbeat is gone but whose worker's finished
    /// events are still to be applied: judged again next scan.
    pub deferred: Vec<FiringId>,
}

/// A scan could not finish.
#[derive(Debug, thiserror::Error)]
pub enum ExpiryError {
    #[error("cannot scan the store: {0}")]
    Store(#[from] StoreError),
    /// Without the heartbeats no worker can be judged; NATS is unreachable.
    #[error("cannot read the worker heartbeats: {0}")]
    Workers(String),
}

impl ServiceError for ExpiryError {
    fn is_retryable(&self) -> bool {
        match self {
            ExpiryError::Store(e) => e.is_retryable(),
            ExpiryError::Workers(_) => true,
        }
    }
}

/// The expiry monitor.
pub struct ExpiryMonitor {
    pub config: ExpiryConfig,
    pub store: Store,
    pub workers: kv::Store,
    pub reports: WorkerReports,
    pub metrics: Metrics,
}

impl ExpiryMonitor {
    /// A monitor over `store`, judging workers by the `workers` bucket.
    pub fn new(
        config: ExpiryConfig,
        store: Store,
        workers: kv::Store,
        reports: WorkerReports,
        metrics: Metrics,
    ) -> Self {
        ExpiryMonitor {
            config,
            store,
            workers,
            reports,
            metrics,
        }
    }

    async fn live_workers(&self) -> Result<HashSet<String>, ExpiryError> {
        let failed = |e: &dyn std::fmt::Display| ExpiryError::Workers(e.to_string());
        let mut keys = self.workers.keys().await.map_err(|e| failed(&e))?;
        let mut live = HashSet::new();
        while let Some(key) = keys.next().await {
            live.insert(key.map_err(|e| failed(&e))?);
        }
        Ok(live)
    }

    /// Whether finished events of the worker wait in the events stream,
    /// not yet applied (the stream keeps an event until a replica applied
    /// it). On an error, false: the firing is judged as before.
    async fn has_unapplied_reports(&self, group: &str, worker_id: &str) -> bool {
        let subject = self.reports.subjects.finished_as(group, worker_id);
        let stream = match self
            .reports
            .jetstream
            .get_stream(self.reports.subjects.events_stream())
            .await
        {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the events stream");
                return false;
            }
        };
        let mut subjects = match stream.info_with_subjects(&subject).await {
            Ok(subjects) => subjects,
            Err(e) => {
                tracing::debug!(error = %e, "cannot count a worker's finished events");
                return false;
            }
        };
        while let Some(counted) = subjects.next().await {
            match counted {
                Ok((_, count)) if count > 0 => return true,
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "cannot count a worker's finished events");
                    return false;
                }
            }
        }
        false
    }

    /// One scan. Returns what it did, for logs, metrics and tests.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<ExpiryOutcome, ExpiryError> {
        let mut outcome = ExpiryOutcome::default();
        let rows = self.store.executing(self.config.batch).await?;
        if !rows.is_empty() {
            let live = self.live_workers().await?;
            let grace = chrono::Duration::from_std(self.config.start_grace).unwrap_or_default();
            let deadline_grace =
                chrono::Duration::from_std(self.config.deadline_grace).unwrap_or_default();
            let mut reporting: HashMap<(String, String), bool> = HashMap::new();
            for row in rows {
                let reason = if row.deadline_at + deadline_grace < now {
                    format!("worker {} did not report by the deadline", row.worker_id)
                } else if !live.contains(&row.worker_id) && row.started_at + grace < now {
                    let key = (row.group.clone(), row.worker_id.clone());
                    let pending = match reporting.get(&key) {
                        Some(pending) => *pending,
                        None => {
                            let pending = self.has_unapplied_reports(&key.0, &key.1).await;
                            reporting.insert(key, pending);
                            pending
                        }
                    };
                    if pending {
                        // A worker that stops reports its runs, then deletes
                        // its heartbeat: what it reported is applied soon.
                        outcome.deferred.push(row.firing_id.clone());
                        continue;
                    }
                    format!("worker {} vanished (no heartbeat)", row.worker_id)
                } else {
                    continue;
                };
                match self.store.requeue(&row, &reason, now, &retry_delay).await {
                    Ok(Some(requeued)) => {
                        tracing::warn!(firing_id = %requeued.lost, %reason, retry = ?requeued.retry, "re-queued a lost firing");
                        self.metrics.requeued.inc();
                        outcome.lost.push(requeued.lost.clone());
                        match requeued.retry {
                            Some((next, _)) => {
                                self.metrics.retries.inc();
                                self.reports.immediate.wake();
                                outcome.retried.push(next);
                            }
                            None => self.metrics.lost.inc(),
                        }
                        if let Some(alert) = &requeued.alert {
                            self.reports.alert(alert).await;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        self.metrics
                            .store_errors
                            .with_label_values(&["requeue"])
                            .inc();
                        if e.is_retryable() {
                            return Err(e.into());
                        }
                        // One firing the store refuses to re-queue must not
                        // keep every row after it waiting; it is tried again
                        // next scan.
                        tracing::error!(firing_id = %row.firing_id, error = %e, "cannot re-queue a firing; skipped this scan");
                        outcome.failed.push(row.firing_id.clone());
                    }
                }
            }
        }
        Ok(outcome)
    }
}

impl Service for ExpiryMonitor {
    type Outcome = ExpiryOutcome;
    type Error = ExpiryError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<ExpiryOutcome, ExpiryError> {
        ExpiryMonitor::run_once(self, now).await
    }
}
