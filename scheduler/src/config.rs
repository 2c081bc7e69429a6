//! A replica's settings: every service's, checked together before
//! anything starts (the binary fills them from flags and environment).

use crate::firing::immediate::ImmediateConfig;
use crate::firing::offers::OffersConfig;
use crate::firing::publisher::PublisherConfig;
use crate::firing::slicer::SlicerConfig;
use crate::intake::api::ApiConfig;
use crate::intake::submit::SubmitConfig;
use crate::intake::web::WebConfig;
use crate::ops::checkpointer::CheckpointerConfig;
use crate::ops::clock_monitor::ClockMonitorConfig;
use crate::ops::consumers::ConsumersConfig;
use crate::ops::job_metrics::JobMetricsConfig;
use crate::ops::maintenance_windows::MaintenanceWindowsConfig;
use crate::ops::webhooks::AlertWebhooksConfig;
use crate::recovery::expiry_monitor::ExpiryMonitorConfig;
use crate::recovery::housekeeping::HousekeepingConfig;
use crate::recovery::limit_release::LimitReleaseConfig;
use crate::recovery::republisher::RepublisherConfig;
use crate::store::StoreOptions;
use crate::workers::finishes::FinishesConfig;
use crate::workers::starts::StartsConfig;
use chime_common::Subjects;
use chime_runtime::connection::{NatsConnection, ReplyCredentials};
use chime_runtime::supervisor::SupervisorConfig;
use chime_runtime::topology::TopologyConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// Everything a replica needs.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    pub nats: NatsConnection,
    /// The user answers to requests leave as; none: the main connection's.
    pub reply_credentials: ReplyCredentials,
    /// How long start-up keeps trying to reach NATS before giving up.
    pub nats_connect_wait: Duration,
    pub database_url: String,
    /// None: no metrics endpoint (tests).
    pub metrics_addr: Option<SocketAddr>,
    pub subjects: Subjects,
    /// This replica's id, unique across the cluster.
    pub replica_id: String,
    pub topology: TopologyConfig,
    pub store: StoreOptions,
    pub slicer: SlicerConfig,
    pub publisher: PublisherConfig,
    pub api: ApiConfig,
    pub submit: SubmitConfig,
    pub starts: StartsConfig,
    pub finishes: FinishesConfig,
    pub expiry: ExpiryMonitorConfig,
    pub republish: RepublisherConfig,
    pub housekeeping: HousekeepingConfig,
    /// Copying SQLite's write-ahead log into its file (SQLite only).
    pub checkpoint: CheckpointerConfig,
    /// Ending maintenance windows (pauses with `until`).
    pub maintenance: MaintenanceWindowsConfig,
    /// Releasing firings held by concurrency limits.
    pub limit_release: LimitReleaseConfig,
    /// Publishing firings staged outside a slice at once.
    pub immediate: ImmediateConfig,
    /// Offering broadcast firings to their workers again until they start.
    pub offers: OffersConfig,
    /// How failed services are restarted and when they make `/healthz` fail.
    pub supervisor: SupervisorConfig,
    /// The clock offset check (`--max-clock-offset`).
    pub clock: ClockMonitorConfig,
    /// The firing consumers of every group.
    pub consumers: ConsumersConfig,
    /// The per-job freshness gauges (`--job-metrics-limit`).
    pub job_metrics: JobMetricsConfig,
    /// Where alerts are POSTed (`--alert-webhook`); none: nowhere.
    pub webhooks: AlertWebhooksConfig,
    /// On shutdown, the wheel keeps publishing for at most this long.
    pub shutdown_drain: Duration,
    /// The HTTP API and console; None: not served.
    pub web: Option<WebConfig>,
}

impl SchedulerConfig {
    /// Defaults for a replica on `nats_url` and `database_url`.
    pub fn new(nats_url: impl Into<String>, database_url: impl Into<String>) -> Self {
        SchedulerConfig {
            nats: NatsConnection::new(nats_url),
            reply_credentials: ReplyCredentials::default(),
            nats_connect_wait: Duration::from_secs(60),
            database_url: database_url.into(),
            metrics_addr: None,
            subjects: Subjects::default(),
            replica_id: default_replica_id(),
            topology: TopologyConfig::default(),
            store: StoreOptions::default(),
            slicer: SlicerConfig::default(),
            publisher: PublisherConfig::default(),
            api: ApiConfig::default(),
            submit: SubmitConfig::default(),
            starts: StartsConfig::default(),
            finishes: FinishesConfig::default(),
            expiry: ExpiryMonitorConfig::default(),
            republish: RepublisherConfig::default(),
            housekeeping: HousekeepingConfig::default(),
            checkpoint: CheckpointerConfig::default(),
            maintenance: MaintenanceWindowsConfig::default(),
            limit_release: LimitReleaseConfig::default(),
            immediate: ImmediateConfig::default(),
            offers: OffersConfig::default(),
            supervisor: SupervisorConfig::default(),
            clock: ClockMonitorConfig::default(),
            consumers: ConsumersConfig::default(),
            job_metrics: JobMetricsConfig::default(),
            webhooks: AlertWebhooksConfig::default(),
            shutdown_drain: Duration::from_secs(10),
            web: None,
        }
    }

    /// Checks every service's settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        self.nats.validate()?;
        self.reply_credentials.validate()?;
        Subjects::validate_prefix(self.subjects.prefix())?;
        self.slicer.validate()?;
        self.publisher.validate()?;
        self.expiry.validate()?;
        self.republish.validate()?;
        self.housekeeping.validate()?;
        self.checkpoint.validate()?;
        if let Some(web) = &self.web {
            web.validate()?;
        }
        self.maintenance.validate()?;
        self.limit_release.validate()?;
        self.immediate.validate()?;
        self.offers.validate()?;
        self.supervisor.validate()?;
        self.clock.validate()?;
        self.consumers.validate()?;
        self.job_metrics.validate()?;
        self.webhooks.validate()?;
        if self.slicer.partitions != self.store.partitions {
            return Err("the slicer and the store must use the same --partitions".into());
        }
        if self.topology.duplicate_window < self.slicer.lookahead + self.slicer.slice * 2 {
            return Err("--duplicate-window must cover the lookahead plus two slices, or a takeover could publish twice".into());
        }
        Ok(())
    }
}

/// `<hostname>-<8 hex>`.
pub fn default_replica_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "scheduler".into());
    let suffix: u32 = rand::random();
    format!("{host}-{suffix:08x}")
}
