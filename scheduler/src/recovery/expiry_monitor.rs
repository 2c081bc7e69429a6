//! The expiry monitor: re-queues firings whose worker vanished, whose
//! deadline passed, or that their live worker does not run (`requeue.rs`).
//! Published firings no worker started are the republisher's
//! (`republisher.rs`).
//!
//! One replica runs it at a time (see `lease.rs`). A worker is gone when its
//! heartbeat key in `chime-workers` has expired. Re-queuing is atomic and
//! once in the store: the attempt ends `lost` and the next attempt is staged
//! while the infrastructure budget lasts, so an attempt never runs twice
//! concurrently.

use crate::firing::immediate::Wake;
use crate::nats::Nats;
use crate::ops::alerts::Alerts;
use crate::ops::job_metrics::JobChanges;
use crate::ops::metrics::Metrics;
use crate::pass::check_pass;
use crate::recovery::requeue::{Beat, NotRunning, RequeueCause, MISSED_BEATS};
use crate::store::{ExecutingRow, Store, StoreError};
use crate::workers::retry::retry_delay;
use async_nats::jetstream::kv;
use chime_common::protocol::{heartbeat_key, Alert, AlertKind};
use chime_common::FiringId;
use chime_runtime::service::{Service, ServiceError};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Expiry monitor settings.
#[derive(Debug, Clone)]
pub struct ExpiryMonitorConfig {
    /// How often to scan the executing table.
    pub interval: Duration,
    /// Rows handled per scan; bounded so one scan never holds a long transaction.
    pub batch: u32,
    /// A firing started this recently is not judged by its worker's heartbeat
    /// yet (the worker may not have beaten since it started).
    pub start_grace: Duration,
    /// A heartbeat deleted this recently does not yet prove its worker
    /// gone: a worker that is alive writes it again within its interval, so
    /// one delete (by anyone who may write the group's keys) never re-queues
    /// a running firing on its own. A key that expired waited a whole TTL.
    pub deleted_grace: Duration,
    /// How long past its deadline an executing firing may go unreported
    /// before it is re-queued (the worker cuts it off at the deadline itself).
    pub deadline_grace: Duration,
    /// The lease that makes one replica the monitor.
    pub lease_ttl: Duration,
}

impl Default for ExpiryMonitorConfig {
    fn default() -> Self {
        ExpiryMonitorConfig {
            interval: Duration::from_secs(1),
            batch: 1_000,
            start_grace: Duration::from_secs(2),
            deleted_grace: Duration::from_secs(6),
            deadline_grace: Duration::from_secs(5),
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl ExpiryMonitorConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        check_pass(
            "expiry",
            self.interval,
            Some(self.batch),
            Some(self.lease_ttl),
        )
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
    /// Firings whose worker's heartbeat is gone (or does not list them)
    /// but whose worker's finished events are still to be applied: judged
    /// again next scan.
    pub deferred: Vec<FiringId>,
    /// Of `lost`, the firings whose live worker's heartbeats left them out.
    pub not_running: Vec<FiringId>,
}

/// The `not_running` alert of a firing re-queued because its live worker
/// does not run it.
fn not_running_alert(row: &ExecutingRow, reason: &str, now: DateTime<Utc>) -> Alert {
    Alert {
        kind: AlertKind::NotRunning,
        job_id: row.job_id.clone(),
        group: row.group.clone(),
        firing_id: Some(row.firing_id.clone()),
        message: format!(
            "firing {} was recorded as started by worker {}, but that worker does not run \
             it ({reason}); it runs again without spending the job's attempts",
            row.firing_id, row.worker_id
        ),
        at: now,
        consecutive_failures: None,
        paused: false,
        lateness_ms: None,
    }
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
    pub config: ExpiryMonitorConfig,
    pub store: Store,
    pub workers: kv::Store,
    pub nats: Nats,
    pub alerts: Alerts,
    /// Woken when a re-queue staged firings, so they leave at once.
    pub immediate: Wake,
    pub metrics: Metrics,
    /// Told of each job whose firing ended lost or failed, so this
    /// replica's per-job gauges show it at once.
    job_changes: JobChanges,
    not_running: NotRunning,
}

impl ExpiryMonitor {
    /// A monitor over `store`, judging workers by the `workers` bucket.
    pub fn new(
        config: ExpiryMonitorConfig,
        store: Store,
        workers: kv::Store,
        nats: Nats,
        alerts: Alerts,
        immediate: Wake,
        metrics: Metrics,
    ) -> Self {
        ExpiryMonitor {
            config,
            store,
            workers,
            nats,
            alerts,
            immediate,
            metrics,
            job_changes: JobChanges::default(),
            not_running: NotRunning::default(),
        }
    }

    /// Tells `changes` of each job whose firing a pass ends.
    pub fn with_job_changes(mut self, changes: JobChanges) -> Self {
        self.job_changes = changes;
        self
    }

    /// The keys of the heartbeats in the bucket now.
    async fn live_workers(&self) -> Result<HashSet<String>, ExpiryError> {
        let failed = |e: &dyn std::fmt::Display| ExpiryError::Workers(e.to_string());
        let mut keys = self.workers.keys().await.map_err(|e| failed(&e))?;
        let mut live = HashSet::new();
        while let Some(key) = keys.next().await {
            live.insert(key.map_err(|e| failed(&e))?);
        }
        Ok(live)
    }

    /// Whether the heartbeat of worker `worker_id` of `group` was deleted
    /// (not expired) less than `deleted_grace` before `now`.
    async fn deleted_recently(&self, group: &str, worker_id: &str, now: DateTime<Utc>) -> bool {
        let grace = chrono::Duration::from_std(self.config.deleted_grace).unwrap_or_default();
        for key in [heartbeat_key(group, worker_id), worker_id.to_string()] {
            if let Ok(Some(entry)) = self.workers.entry(key.as_str()).await {
                if entry.operation != kv::Operation::Put {
                    let at = i64::try_from(entry.created.unix_timestamp_nanos() / 1_000_000)
                        .ok()
                        .and_then(DateTime::from_timestamp_millis);
                    return at.is_some_and(|at| at + grace > now);
                }
            }
        }
        false
    }

    /// Whether finished events of the worker wait in the events stream,
    /// not yet applied (the stream keeps an event until a replica applied
    /// it). On an error, false: the firing is judged as before.
    async fn has_unapplied_reports(&self, group: &str, worker_id: &str) -> bool {
        let subject = self.nats.subjects.finished_as(group, worker_id);
        let stream = match self
            .nats
            .jetstream
            .get_stream(self.nats.subjects.events_stream())
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
            let mut beats = HashMap::new();
            for row in &rows {
                if is_live(&live, &row.group, &row.worker_id) && !beats.contains_key(&row.worker_id)
                {
                    if let Some(beat) = Beat::read(&self.workers, &row.group, &row.worker_id).await
                    {
                        beats.insert(row.worker_id.clone(), beat);
                    }
                }
            }
            let not_running = self.not_running.judge(&rows, &beats);
            let grace = chrono::Duration::from_std(self.config.start_grace).unwrap_or_default();
            let deadline_grace =
                chrono::Duration::from_std(self.config.deadline_grace).unwrap_or_default();
            let mut reporting: HashMap<(String, String), bool> = HashMap::new();
            let mut deleted: HashMap<(String, String), bool> = HashMap::new();
            for row in rows {
                let mut vanished =
                    !is_live(&live, &row.group, &row.worker_id) && row.started_at + grace < now;
                if vanished {
                    let key = (row.group.clone(), row.worker_id.clone());
                    let recent = match deleted.get(&key) {
                        Some(recent) => *recent,
                        None => {
                            let recent = self.deleted_recently(&key.0, &key.1, now).await;
                            deleted.insert(key, recent);
                            recent
                        }
                    };
                    if recent {
                        vanished = false;
                        if row.deadline_at + deadline_grace >= now {
                            outcome.deferred.push(row.firing_id.clone());
                            continue;
                        }
                    }
                }
                let (cause, reason) = if row.deadline_at + deadline_grace < now {
                    (
                        RequeueCause::Deadline,
                        format!("worker {} did not report by the deadline", row.worker_id),
                    )
                } else if vanished || not_running.contains(&row.firing_id) {
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
                    if vanished {
                        (
                            RequeueCause::Vanished,
                            format!("worker {} vanished (no heartbeat)", row.worker_id),
                        )
                    } else {
                        (
                            RequeueCause::NotRunning,
                            format!(
                                "worker {} does not run it: {MISSED_BEATS} of its heartbeats \
                                 written since the start was recorded leave it out",
                                row.worker_id
                            ),
                        )
                    }
                } else {
                    continue;
                };
                match self.store.requeue(&row, &reason, now, &retry_delay).await {
                    Ok(Some(requeued)) => {
                        self.job_changes.changed(&row.job_id);
                        tracing::warn!(firing_id = %requeued.lost, %reason, retry = ?requeued.retry, "re-queued a lost firing");
                        outcome.lost.push(requeued.lost.clone());
                        match requeued.retry {
                            Some((next, _)) => {
                                self.metrics
                                    .requeued
                                    .with_label_values(&[&row.group, cause.as_str()])
                                    .inc();
                                self.metrics.retries.inc();
                                self.immediate.wake();
                                outcome.retried.push(next);
                            }
                            None if requeued.exhausted => {
                                self.metrics
                                    .infra_retries_exhausted
                                    .with_label_values(&[&row.group])
                                    .inc();
                            }
                            None => self.metrics.lost.inc(),
                        }
                        if cause == RequeueCause::NotRunning {
                            outcome.not_running.push(requeued.lost.clone());
                            self.alerts
                                .publish(&not_running_alert(&row, &reason, now))
                                .await;
                        }
                        for alert in requeued.alert.iter().chain(&requeued.repeated) {
                            self.alerts.publish(alert).await;
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

/// Whether worker `worker_id` of `group` has a heartbeat among `keys`:
/// under `<group>.<id>`, which only that group's workers may write, or
/// under the older key, the id alone.
fn is_live(keys: &HashSet<String>, group: &str, worker_id: &str) -> bool {
    keys.contains(&heartbeat_key(group, worker_id)) || keys.contains(worker_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_live_only_under_its_own_groups_key_or_its_older_key() {
        let keys: HashSet<String> = ["default.victim", "etl.w2", "w3"]
            .iter()
            .map(|k| k.to_string())
            .collect();
        // A key another group's user wrote does not keep `victim` of `b` alive.
        assert!(!is_live(&keys, "b", "victim"));
        assert!(is_live(&keys, "default", "victim"));
        assert!(is_live(&keys, "etl", "w2"));
        assert!(is_live(&keys, "any", "w3"), "the older key, the id alone");
    }
}
