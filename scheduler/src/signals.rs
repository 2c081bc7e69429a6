//! What a replica's services report for tests to wait on (see
//! `chime_runtime::signal`): with no test listening, emitting costs nothing.
//!
//! Every periodic service reports each pass ([`Pass`]); the message-driven
//! services report what they applied.

use crate::firing::immediate::ImmediateOutcome;
use crate::firing::offers::OffersOutcome;
use crate::ops::consumers::ConsumersOutcome;
use crate::ops::job_metrics::JobMetricsOutcome;
use crate::ops::maintenance_windows::MaintenanceOutcome;
use crate::ops::webhooks::WebhookReport;
use crate::recovery::expiry_monitor::ExpiryOutcome;
use crate::recovery::housekeeping::HousekeepingOutcome;
use crate::recovery::limit_release::LimitReleaseOutcome;
use crate::recovery::republisher::RepublishOutcome;
use chime_runtime::service::Pass;
use chime_runtime::signal::TestSignal;

/// The test signals of one replica. Cheap to clone; clones share listeners.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// Each expiry scan (only on the lease holder).
    pub expiry: TestSignal<Pass<ExpiryOutcome>>,
    /// Each republisher pass (only on the lease holder).
    pub republish: TestSignal<Pass<RepublishOutcome>>,
    /// Each housekeeping pass (only on the lease holder).
    pub housekeeping: TestSignal<Pass<HousekeepingOutcome>>,
    /// Each SQLite checkpoint: the log's pages the database file holds.
    pub checkpoint: TestSignal<Pass<u64>>,
    /// Each maintenance window pass (only on the lease holder).
    pub maintenance: TestSignal<Pass<MaintenanceOutcome>>,
    /// Each pass putting unadopted due firings in the wheel.
    pub immediate: TestSignal<Pass<ImmediateOutcome>>,
    /// Each pass offering broadcast firings again.
    pub offers: TestSignal<Pass<OffersOutcome>>,
    /// Each pass releasing held firings (only on the lease holder).
    pub limit_release: TestSignal<Pass<LimitReleaseOutcome>>,
    /// Each clock offset measurement.
    pub clock: TestSignal<Pass<chrono::Duration>>,
    /// Each consumer reconciliation pass.
    pub consumers: TestSignal<Pass<ConsumersOutcome>>,
    /// Finished events applied to the store, per batch.
    pub finished: TestSignal<usize>,
    /// Each pass of the per-job gauges.
    pub job_metrics: TestSignal<Pass<JobMetricsOutcome>>,
    /// Each alert a webhook took, was given up on for, or handed back.
    pub webhooks: TestSignal<WebhookReport>,
}
