//! This replica's clock offset from the database's.
//!
//! Slices are claimed by wall-clock time: a replica whose clock runs ahead
//! would claim and publish slices early, one running behind would find them
//! taken. Every replica therefore measures its offset from the database
//! clock, which all replicas share: it reads `clock_timestamp()` and compares
//! it with the local time at the midpoint of the round trip. While the offset
//! exceeds `max_offset` the replica claims no slices (those it holds are
//! taken over by the others as usual), `/readyz` says not ready, and a
//! `clock_offset` alert is raised.
//!
//! SQLite lives in this process, so its clock is the local clock: the offset
//! is 0 by definition (one replica, nothing to disagree with).

use crate::ops::alerts::Alerts;
use crate::ops::metrics::Metrics;
use crate::pass::check_pass;
use crate::store::{Store, StoreError};
use chime_common::protocol::{Alert, AlertKind};
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Clock check settings.
#[derive(Debug, Clone)]
pub struct ClockMonitorConfig {
    /// How often the offset is measured.
    pub interval: Duration,
    /// Above this offset the replica stops claiming slices and is not ready.
    pub max_offset: Duration,
}

impl Default for ClockMonitorConfig {
    fn default() -> Self {
        ClockMonitorConfig {
            interval: Duration::from_secs(5),
            max_offset: Duration::from_millis(500),
        }
    }
}

impl ClockMonitorConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_offset < Duration::from_millis(10) || self.max_offset > Duration::from_secs(60)
        {
            return Err("--max-clock-offset must be from 10ms to 60s".into());
        }
        check_pass("clock check", self.interval, None, None)
    }
}

/// The last measurement, shared with the slicer and `/readyz`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ClockStatus {
    in_sync: Arc<AtomicBool>,
    offset_micros: Arc<AtomicI64>,
}

impl Default for ClockStatus {
    /// In sync until a measurement says otherwise.
    fn default() -> Self {
        ClockStatus {
            in_sync: Arc::new(AtomicBool::new(true)),
            offset_micros: Arc::new(AtomicI64::new(0)),
        }
    }
}

impl ClockStatus {
    /// Whether the last measured offset was within the limit.
    pub fn in_sync(&self) -> bool {
        self.in_sync.load(Ordering::Relaxed)
    }

    /// The last measured offset: database clock minus local clock.
    pub fn offset(&self) -> chrono::Duration {
        chrono::Duration::microseconds(self.offset_micros.load(Ordering::Relaxed))
    }
}

/// Measures the offset every interval.
pub struct ClockMonitor {
    config: ClockMonitorConfig,
    store: Store,
    status: ClockStatus,
    alerts: Alerts,
    metrics: Metrics,
    replica: String,
}

impl ClockMonitor {
    /// A monitor of the store's database clock; alerts go through `alerts`.
    pub fn new(
        config: ClockMonitorConfig,
        store: Store,
        alerts: Alerts,
        metrics: Metrics,
        replica: String,
    ) -> Self {
        ClockMonitor {
            config,
            store,
            status: ClockStatus::default(),
            alerts,
            metrics,
            replica,
        }
    }

    /// The status this monitor keeps up to date.
    pub fn status(&self) -> ClockStatus {
        self.status.clone()
    }

    /// One measurement: updates the status and the metric, raises an alert
    /// when the offset goes over the limit. Returns the offset.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<chrono::Duration, StoreError> {
        let offset = self.store.clock_offset().await?;
        let micros = offset.num_microseconds().unwrap_or(i64::MAX);
        self.status.offset_micros.store(micros, Ordering::Relaxed);
        self.metrics.clock_offset.set(micros as f64 / 1e6);
        let limit = i64::try_from(self.config.max_offset.as_micros()).unwrap_or(i64::MAX);
        let in_sync = micros.unsigned_abs() <= limit.unsigned_abs();
        let was_in_sync = self.status.in_sync.swap(in_sync, Ordering::Relaxed);
        if was_in_sync && !in_sync {
            let message = format!(
                "replica {}: clock offset from the database is {:.3}s, above the {:?} limit; it claims no slices and is not ready until its clock is fixed",
                self.replica,
                micros as f64 / 1e6,
                self.config.max_offset
            );
            self.alerts
                .publish(&Alert {
                    kind: AlertKind::ClockOffset,
                    job_id: String::new(),
                    group: String::new(),
                    firing_id: None,
                    message,
                    at: now,
                    consecutive_failures: None,
                    paused: false,
                    lateness_ms: None,
                })
                .await;
        } else if !was_in_sync && in_sync {
            tracing::info!(offset = ?offset, "clock offset back within the limit; claiming slices again");
        }
        Ok(offset)
    }
}

impl Service for ClockMonitor {
    type Outcome = chrono::Duration;
    type Error = StoreError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<chrono::Duration, StoreError> {
        ClockMonitor::run_once(self, now).await
    }
}
