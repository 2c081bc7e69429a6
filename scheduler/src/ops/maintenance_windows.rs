//! Maintenance windows: resumes the jobs paused with `until` once that
//! instant passes (`jobs.pause`, docs/API.md). The window is stored with the
//! job, so whichever replica holds the lease ends it, one of them at a time
//! (see `lease.rs`); resuming applies each job's misfire policy to the
//! instants the window covered. Each resume is recorded in the audit trail
//! (actor `maintenance`), next to the pause that opened the window.

use crate::pass::check_pass;
use crate::store::{AuditRecord, Store, StoreError};
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Maintenance window settings.
#[derive(Debug, Clone)]
pub struct MaintenanceWindowsConfig {
    /// How often to look for windows that ended: a job resumes at most
    /// this late.
    pub interval: Duration,
    /// Jobs resumed per pass; bounded so one pass never runs long (the
    /// next pass takes the rest).
    pub batch: u32,
    /// The lease that makes one replica end the windows.
    pub lease_ttl: Duration,
}

impl Default for MaintenanceWindowsConfig {
    fn default() -> Self {
        MaintenanceWindowsConfig {
            interval: Duration::from_secs(1),
            batch: 1_000,
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl MaintenanceWindowsConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_pass(
            "maintenance",
            self.interval,
            Some(self.batch),
            Some(self.lease_ttl),
        )
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MaintenanceOutcome {
    /// The jobs resumed because their window ended.
    pub resumed: Vec<String>,
}

/// Ends maintenance windows.
pub struct MaintenanceWindows {
    pub config: MaintenanceWindowsConfig,
    pub store: Store,
}

impl MaintenanceWindows {
    /// One pass: resumes the jobs whose window ended at or before `now`.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<MaintenanceOutcome, StoreError> {
        let jobs = self.store.resume_due_pauses(now, self.config.batch).await?;
        for job in &jobs {
            let record = AuditRecord {
                actor: "maintenance",
                via: "scheduler",
                verb: "jobs.resume",
                target: &job.spec.id,
                before_version: job.version.checked_sub(1),
                after_version: Some(job.version),
                outcome: "ok",
                message: Some("the maintenance window ended"),
            };
            // The job is resumed; a lost audit line is logged, not retried
            // into a second resume.
            if let Err(e) = self.store.record_audit(&record, now).await {
                tracing::error!(job = %job.spec.id, error = %e, "cannot record an audit entry");
            }
        }
        let resumed: Vec<String> = jobs.into_iter().map(|job| job.spec.id).collect();
        if !resumed.is_empty() {
            tracing::info!(count = resumed.len(), jobs = ?resumed, "maintenance window ended: jobs resumed");
        }
        Ok(MaintenanceOutcome { resumed })
    }
}

impl Service for MaintenanceWindows {
    type Outcome = MaintenanceOutcome;
    type Error = StoreError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<MaintenanceOutcome, StoreError> {
        MaintenanceWindows::run_once(self, now).await
    }
}
