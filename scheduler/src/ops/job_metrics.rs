//! The per-job freshness gauges: `chime_job_last_success_timestamp_seconds`
//! and `chime_job_last_failure_timestamp_seconds{job,group}`, on every
//! replica alike.
//!
//! The store keeps each job's newest ends (`store/outcomes.rs`), written by
//! whichever replica records a finish, so the gauges are a copy of it, never
//! counted locally: a replica that just started exports what the others do.
//! Every replica reads the whole set (the first `--job-metrics-limit` jobs
//! by id, and how many there are) when it starts and every `interval`
//! after, so a finish recorded on another replica, a changed group or a
//! deleted job shows within that interval. The jobs whose firings this
//! replica ended (or deleted) are read again at the next `tick`, a second by
//! default, so the replica that records a finish shows it at once.
//!
//! Past the limit, the jobs after the first `limit` by id get no series;
//! `chime_job_metrics_dropped` says how many, and a warning is logged each
//! time that number changes.

use crate::ops::metrics::Metrics;
use crate::pass::check_pass;
use crate::store::{JobOutcome, JobOutcomes, Store, StoreError};
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Per-job series settings.
#[derive(Debug, Clone)]
pub struct JobMetricsConfig {
    /// At most this many jobs get per-job series (`--job-metrics-limit`).
    pub limit: usize,
    /// How often the whole set is read from the store (`--job-metrics-interval`).
    pub interval: Duration,
    /// How often the jobs this replica changed are read again.
    pub tick: Duration,
}

impl Default for JobMetricsConfig {
    fn default() -> Self {
        JobMetricsConfig {
            limit: 10_000,
            interval: Duration::from_secs(15),
            tick: Duration::from_secs(1),
        }
    }
}

/// The most jobs `--job-metrics-limit` may give series (each costs two
/// series on every replica and in Prometheus).
pub const MAX_JOB_METRICS_LIMIT: usize = 1_000_000;

impl JobMetricsConfig {
    /// Checks the settings; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.limit > MAX_JOB_METRICS_LIMIT {
            return Err(format!(
                "--job-metrics-limit must be at most {MAX_JOB_METRICS_LIMIT}"
            ));
        }
        if self.interval.is_zero() {
            return Err("--job-metrics-interval must be above zero".into());
        }
        check_pass("job metrics", self.tick, None, None)
    }
}

/// Jobs whose ends this replica changed (a finish, a requeue, a delete), to
/// be read again at the next tick. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct JobChanges(Arc<Mutex<Changed>>);

#[derive(Debug, Default)]
struct Changed {
    jobs: HashSet<String>,
    /// More jobs changed than one tick reads: read the whole set instead.
    overflowed: bool,
}

/// The most job ids one tick reads again; beyond it the whole set is read.
const MAX_CHANGED: usize = 10_000;

impl JobChanges {
    /// Notes that `job_id`'s ends (or its existence) changed.
    pub fn changed(&self, job_id: &str) {
        let mut changed = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if changed.overflowed || changed.jobs.contains(job_id) {
            return;
        }
        if changed.jobs.len() >= MAX_CHANGED {
            changed.overflowed = true;
            changed.jobs.clear();
            return;
        }
        changed.jobs.insert(job_id.to_string());
    }

    /// The jobs noted since the last call, or None after an overflow.
    fn take(&self) -> Option<Vec<String>> {
        let mut changed = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let overflowed = std::mem::take(&mut changed.overflowed);
        let jobs: Vec<String> = changed.jobs.drain().collect();
        (!overflowed).then_some(jobs)
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobMetricsOutcome {
    /// The whole set was read (else only the changed jobs, if any).
    pub full: bool,
    /// Jobs read from the store in this pass.
    pub read: usize,
    /// Jobs with series after the pass.
    pub exported: usize,
    /// Jobs left out by the limit (as of the last whole read).
    pub dropped: u64,
}

/// What a job's series say now.
#[derive(Debug, Clone, PartialEq)]
struct Exported {
    group: String,
    success: Option<DateTime<Utc>>,
    failure: Option<DateTime<Utc>>,
}

#[derive(Debug, Default)]
struct State {
    exported: HashMap<String, Exported>,
    last_full: Option<DateTime<Utc>>,
    /// The dropped count last logged.
    warned: u64,
}

/// The per-job gauges of one replica (every replica runs one).
pub struct JobMetrics {
    config: JobMetricsConfig,
    store: Store,
    metrics: Metrics,
    changes: JobChanges,
    state: Mutex<State>,
}

impl JobMetrics {
    pub fn new(
        config: JobMetricsConfig,
        store: Store,
        metrics: Metrics,
        changes: JobChanges,
    ) -> Self {
        JobMetrics {
            config,
            store,
            metrics,
            changes,
            state: Mutex::new(State::default()),
        }
    }

    /// One pass: the whole set when `interval` has passed since the last
    /// whole read (or after too many changes), else the changed jobs.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<JobMetricsOutcome, StoreError> {
        let changed = self.changes.take();
        let interval = chrono::Duration::from_std(self.config.interval)
            .unwrap_or_else(|_| chrono::Duration::seconds(15));
        let due = {
            let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.last_full.is_none_or(|at| now - at >= interval)
        };
        match changed {
            Some(jobs) if !due => self.read_changed(jobs).await,
            _ => self.read_all(now).await,
        }
    }

    async fn read_all(&self, now: DateTime<Utc>) -> Result<JobMetricsOutcome, StoreError> {
        let JobOutcomes { jobs, total } = self.store.job_outcomes(self.config.limit).await?;
        let dropped = total.saturating_sub(jobs.len() as u64);
        let read = jobs.len();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let kept: HashSet<&str> = jobs.iter().map(|job| job.job_id.as_str()).collect();
        let gone: Vec<String> = state
            .exported
            .keys()
            .filter(|id| !kept.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.remove(&mut state, &id);
        }
        for job in jobs {
            self.set(&mut state, job);
        }
        state.last_full = Some(now);
        self.metrics
            .job_metrics_dropped
            .set(i64::try_from(dropped).unwrap_or(i64::MAX));
        if dropped != state.warned {
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    limit = self.config.limit,
                    "jobs left without per-job metrics: more jobs have finished firings than \
                     --job-metrics-limit allows (chime_job_metrics_dropped)"
                );
            }
            state.warned = dropped;
        }
        Ok(JobMetricsOutcome {
            full: true,
            read,
            exported: state.exported.len(),
            dropped,
        })
    }

    async fn read_changed(&self, ids: Vec<String>) -> Result<JobMetricsOutcome, StoreError> {
        let jobs = self.store.job_outcomes_of(&ids).await?;
        let read = jobs.len();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let found: HashSet<&str> = jobs.iter().map(|job| job.job_id.as_str()).collect();
        for id in ids.iter().filter(|id| !found.contains(id.as_str())) {
            self.remove(&mut state, id);
        }
        for job in jobs {
            // Past the limit only the jobs already shown change; which jobs
            // those are is the whole read's choice (the first by id).
            if state.exported.contains_key(&job.job_id) || state.exported.len() < self.config.limit
            {
                self.set(&mut state, job);
            }
        }
        Ok(JobMetricsOutcome {
            full: false,
            read,
            exported: state.exported.len(),
            dropped: state.warned,
        })
    }

    /// Shows `job`'s ends, replacing what its series said.
    fn set(&self, state: &mut State, job: JobOutcome) {
        let now = Exported {
            group: job.group,
            success: job.last_success,
            failure: job.last_failure,
        };
        if state.exported.get(&job.job_id) == Some(&now) {
            return;
        }
        if let Some(before) = state.exported.get(&job.job_id) {
            if before.group != now.group {
                self.remove(state, &job.job_id);
            }
        }
        let labels = [job.job_id.as_str(), now.group.as_str()];
        for (gauge, at) in [
            (&self.metrics.job_last_success, now.success),
            (&self.metrics.job_last_failure, now.failure),
        ] {
            match at {
                Some(at) => gauge.with_label_values(&labels).set(seconds(at)),
                None => {
                    let _ = gauge.remove_label_values(&labels);
                }
            }
        }
        state.exported.insert(job.job_id, now);
    }

    /// Removes `job_id`'s series.
    fn remove(&self, state: &mut State, job_id: &str) {
        let Some(before) = state.exported.remove(job_id) else {
            return;
        };
        let labels = [job_id, before.group.as_str()];
        let _ = self.metrics.job_last_success.remove_label_values(&labels);
        let _ = self.metrics.job_last_failure.remove_label_values(&labels);
    }
}

/// Unix time in seconds, with milliseconds.
fn seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

impl Service for JobMetrics {
    type Outcome = JobMetricsOutcome;
    type Error = StoreError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<JobMetricsOutcome, StoreError> {
        JobMetrics::run_once(self, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_taken_once_and_overflow_into_a_whole_read() {
        let changes = JobChanges::default();
        changes.changed("a");
        changes.changed("b");
        changes.changed("a");
        let mut taken = changes.take().expect("no overflow");
        taken.sort();
        assert_eq!(taken, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(changes.take(), Some(Vec::new()));
        for i in 0..=MAX_CHANGED {
            changes.changed(&format!("job-{i}"));
        }
        assert_eq!(changes.take(), None, "too many changes: read everything");
        assert_eq!(changes.take(), Some(Vec::new()));
    }

    #[test]
    fn the_limit_is_bounded_and_the_interval_above_zero() {
        let ok = JobMetricsConfig::default();
        assert!(ok.validate().is_ok());
        let too_many = JobMetricsConfig {
            limit: MAX_JOB_METRICS_LIMIT + 1,
            ..ok.clone()
        };
        assert!(too_many
            .validate()
            .unwrap_err()
            .contains("--job-metrics-limit"));
        let zero = JobMetricsConfig {
            interval: Duration::ZERO,
            ..ok
        };
        assert!(zero.validate().is_err());
    }
}
