//! Creates and reconciles the firing consumers of every group.
//!
//! Schedulers own the NATS topology (see `chime_runtime::topology`): workers
//! only wait for their group's consumers. A group needs its three band
//! consumers once it has a stored job or a live worker, so each pass reads
//! the groups of stored jobs (one index step per group) and of the heartbeat
//! bucket, ensures the consumers of groups it has not handled yet, and
//! re-checks every group's settings every `recheck` (a consumer someone
//! deleted or changed is put back).

use crate::ops::metrics::Metrics;
use crate::store::{Store, StoreError};
use chime_common::bounds::check_name;
use chime_common::protocol::{heartbeat_matches_key, WorkerInfo};
use chime_common::Band;
use chime_runtime::service::{Service, ServiceError};
use chime_runtime::topology::{Topology, TopologyError};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// Consumer reconciliation settings.
#[derive(Debug, Clone)]
pub struct ConsumersConfig {
    /// How often new groups are looked for (a new group's worker waits at most this long).
    pub interval: Duration,
    /// How often the consumers of known groups are checked again.
    pub recheck: Duration,
}

impl Default for ConsumersConfig {
    fn default() -> Self {
        ConsumersConfig {
            interval: Duration::from_secs(2),
            recheck: Duration::from_secs(60),
        }
    }
}

impl ConsumersConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.recheck.is_zero() {
            return Err(
                "the consumer reconciliation interval and recheck must be above zero".into(),
            );
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConsumersOutcome {
    /// Groups whose consumers were created or checked in this pass.
    pub ensured: Vec<String>,
}

/// A pass could not finish.
#[derive(Debug, thiserror::Error)]
pub enum ConsumersError {
    #[error("cannot read the groups of stored jobs: {0}")]
    Store(#[from] StoreError),
    #[error("cannot read the worker registry: {0}")]
    Workers(String),
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

impl ServiceError for ConsumersError {
    /// A store or heartbeat outage is waited out; a consumer JetStream
    /// refuses to create is reported (a restart, then `/healthz`).
    fn is_retryable(&self) -> bool {
        match self {
            ConsumersError::Store(e) => e.is_retryable(),
            ConsumersError::Workers(_) => true,
            ConsumersError::Topology(_) => false,
        }
    }
}

/// The reconciler of one replica (every replica runs one: creation is idempotent).
pub struct Consumers {
    config: ConsumersConfig,
    topology: Topology,
    workers: async_nats::jetstream::kv::Store,
    store: Store,
    /// When each group's consumers were last ensured.
    checked: Mutex<HashMap<String, DateTime<Utc>>>,
    /// Each live worker's group: a worker id keeps its group for life, so
    /// only new heartbeat keys are read.
    worker_group: Mutex<HashMap<String, String>>,
    /// Where each known group's counters are started at zero.
    metrics: Option<Metrics>,
}

impl Consumers {
    /// A reconciler reading job groups from `store` and worker groups from `workers`.
    pub fn new(
        config: ConsumersConfig,
        topology: Topology,
        workers: async_nats::jetstream::kv::Store,
        store: Store,
    ) -> Self {
        Consumers {
            config,
            topology,
            workers,
            store,
            checked: Mutex::new(HashMap::new()),
            worker_group: Mutex::new(HashMap::new()),
            metrics: None,
        }
    }

    /// Starts each group's counters at zero when its consumers are first
    /// ensured, so a dashboard's rate shows 0 for a known group instead of
    /// nothing until its first event.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    async fn worker_groups(&self) -> Result<BTreeSet<String>, ConsumersError> {
        let failed = |e: &dyn std::fmt::Display| ConsumersError::Workers(e.to_string());
        let mut keys = self.workers.keys().await.map_err(|e| failed(&e))?;
        let mut live = HashMap::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| failed(&e))?;
            let known = self
                .worker_group
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .cloned();
            if let Some(group) = known {
                live.insert(key, group);
                continue;
            }
            let Ok(Some(bytes)) = self.workers.get(&key).await else {
                continue;
            };
            match serde_json::from_slice::<WorkerInfo>(&bytes) {
                // A heartbeat names the group: never trust it into a subject,
                // nor take a group its key does not name.
                Ok(info)
                    if check_name(&info.group, 64).is_ok()
                        && heartbeat_matches_key(&key, &info) =>
                {
                    live.insert(key, info.group);
                }
                _ => tracing::debug!(key, "ignoring a heartbeat without a valid group"),
            }
        }
        let groups = live.values().cloned().collect();
        *self.worker_group.lock().unwrap_or_else(|p| p.into_inner()) = live;
        Ok(groups)
    }

    /// One pass: ensures the consumers of every group not handled within
    /// `recheck`. Time is passed in so tests control it.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<ConsumersOutcome, ConsumersError> {
        let mut groups = self.store.job_groups().await?;
        groups.extend(self.worker_groups().await?);
        let recheck = chrono::Duration::from_std(self.config.recheck)
            .unwrap_or_else(|_| chrono::Duration::seconds(60));
        let mut outcome = ConsumersOutcome::default();
        for group in groups {
            let due = {
                let checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
                checked.get(&group).is_none_or(|at| now - *at >= recheck)
            };
            if !due {
                continue;
            }
            for band in Band::ALL {
                self.topology.fire_consumer(&group, band).await?;
            }
            self.checked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(group.clone(), now);
            if let Some(metrics) = &self.metrics {
                metrics.start_group_at_zero(&group);
            }
            outcome.ensured.push(group);
        }
        if !outcome.ensured.is_empty() {
            tracing::debug!(groups = ?outcome.ensured, "firing consumers ensured");
        }
        Ok(outcome)
    }
}

impl Service for Consumers {
    type Outcome = ConsumersOutcome;
    type Error = ConsumersError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<ConsumersOutcome, ConsumersError> {
        Consumers::run_once(self, now).await
    }
}
