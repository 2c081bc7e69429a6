//! One scheduler replica: connects, sets up NATS objects, starts every service.
//!
//! The binary and the tests both start replicas through [`Replica::start`], so
//! tests exercise the same wiring as production.

use crate::api::{Api, ApiConfig};
use crate::claim::SliceProgress;
use crate::expiry::{ExpiryConfig, ExpiryMonitor};
use crate::housekeeping::{Housekeeping, HousekeepingConfig};
use crate::lease::Lease;
use crate::lifecycle::{Lifecycle, LifecycleConfig};
use crate::metrics::Metrics;
use crate::publisher::{Publisher, PublisherConfig};
use crate::slicer::{Slicer, SlicerConfig};
use crate::store::{Store, StoreOptions};
use crate::submit::{Submit, SubmitConfig};
use crate::wheel::Wheel;
use anyhow::Context as _;
use chime_common::connection::NatsConnection;
use chime_common::topology::{Topology, TopologyConfig};
use chime_common::Subjects;
use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Everything a replica needs.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    pub nats: NatsConnection,
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
    pub lifecycle: LifecycleConfig,
    pub expiry: ExpiryConfig,
    pub housekeeping: HousekeepingConfig,
    /// On shutdown, the wheel keeps publishing for at most this long.
    pub shutdown_drain: Duration,
}

impl SchedulerConfig {
    /// Defaults for a replica on `nats_url` and `database_url`.
    pub fn new(nats_url: impl Into<String>, database_url: impl Into<String>) -> Self {
        SchedulerConfig {
            nats: NatsConnection::new(nats_url),
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
            lifecycle: LifecycleConfig::default(),
            expiry: ExpiryConfig::default(),
            housekeeping: HousekeepingConfig::default(),
            shutdown_drain: Duration::from_secs(10),
        }
    }

    /// Checks every service's settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        self.nats.validate()?;
        Subjects::validate_prefix(self.subjects.prefix())?;
        self.slicer.validate()?;
        self.publisher.validate()?;
        self.expiry.validate()?;
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

/// A running replica.
pub struct Replica {
    pub id: String,
    pub metrics: Metrics,
    pub store: Store,
    pub nats: async_nats::Client,
    /// The bound metrics address, when serving one.
    pub metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    drain: Duration,
}

/// How long shutdown waits beyond the drain for services to finish their last pass.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(5);

impl Replica {
    /// Connects to NATS and the store, creates streams and buckets, and starts every service.
    pub async fn start(config: SchedulerConfig) -> anyhow::Result<Replica> {
        config.validate().map_err(anyhow::Error::msg)?;
        let nats = config
            .nats
            .connect(
                &format!("chime-scheduler {}", config.replica_id),
                config.nats_connect_wait,
            )
            .await?;
        let store = Store::connect(&config.database_url, config.store.clone())
            .await
            .with_context(|| {
                format!(
                    "cannot open the store at {}",
                    chime_common::secret::redact_url(&config.database_url)
                )
            })?;
        // async-nats holds at most 5,000 publishes awaiting their ack by
        // default; a burst of 100,000 firings due at one instant then
        // publishes 5,000 per ack round trip, which a busy server stretches
        // to a few hundred ms (BENCHMARKS.md).
        let jetstream = async_nats::jetstream::ContextBuilder::new()
            .max_ack_inflight(50_000)
            .build(nats.clone());
        let topology = Topology::new(
            jetstream.clone(),
            config.subjects.clone(),
            config.topology.clone(),
        );
        topology
            .ensure()
            .await
            .context("cannot set up JetStream streams and buckets")?;
        let slices = topology.slices().await?;
        let workers = topology.workers().await?;
        let leases = topology.leases().await?;
        let subjects = config.subjects.clone();
        let submit_consumer = topology
            .durable(
                &subjects.submit_stream(),
                "chime-submit",
                subjects.submit(),
                Duration::from_secs(30),
            )
            .await?;
        let finished_consumer = topology
            .durable(
                &subjects.events_stream(),
                "chime-lifecycle",
                subjects.finished(),
                Duration::from_secs(30),
            )
            .await?;

        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let drained = CancellationToken::new();
        let tracker = TaskTracker::new();
        let wheel = Wheel::new(metrics.clone());
        let (progress, done) = SliceProgress::new();

        let metrics_addr = match config.metrics_addr {
            Some(addr) => {
                let (bound, task) = crate::http::serve(
                    addr,
                    metrics.clone(),
                    store.clone(),
                    nats.clone(),
                    drained.clone(),
                )
                .await
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
                tracker.spawn(async move {
                    let _ = task.await;
                });
                Some(bound)
            }
            None => None,
        };

        let lifecycle = Lifecycle {
            config: config.lifecycle.clone(),
            store: store.clone(),
            nats: nats.clone(),
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
            metrics: metrics.clone(),
        };
        let api = Api {
            config: config.api.clone(),
            store: store.clone(),
            nats: nats.clone(),
            subjects: subjects.clone(),
            workers: workers.clone(),
            metrics: metrics.clone(),
        };
        let submit = Submit {
            config: config.submit.clone(),
            store: store.clone(),
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
            metrics: metrics.clone(),
        };
        let slicer = Slicer::new(
            config.slicer.clone(),
            config.replica_id.clone(),
            store.clone(),
            slices,
            wheel.clone(),
            progress.clone(),
            metrics.clone(),
        );
        let publisher = Publisher {
            config: config.publisher.clone(),
            jetstream: jetstream.clone(),
            nats: nats.clone(),
            subjects: subjects.clone(),
            store: store.clone(),
            wheel: wheel.clone(),
            progress,
            metrics: metrics.clone(),
        };
        let expiry = ExpiryMonitor::new(
            config.expiry.clone(),
            store.clone(),
            workers,
            lifecycle.clone(),
            metrics.clone(),
        );
        let housekeeping = Housekeeping::new(
            config.housekeeping.clone(),
            store.clone(),
            wheel,
            metrics.clone(),
        );
        let expiry_lease = Lease::new(
            leases.clone(),
            "expiry",
            config.replica_id.clone(),
            config.expiry.lease_ttl,
        );
        let housekeeping_lease = Lease::new(
            leases,
            "housekeeping",
            config.replica_id.clone(),
            config.housekeeping.lease_ttl,
        );

        // Subscribed and flushed before "ready": a request sent the moment
        // start returns finds a responder.
        let start_requests = lifecycle.subscribe_starts().await?;
        let api_requests = api.subscribe().await?;
        nats.flush()
            .await
            .context("cannot reach NATS to confirm subscriptions")?;

        // Lifecycle keeps serving until the wheel has drained: workers still start what we publish.
        tracker.spawn(
            lifecycle
                .clone()
                .serve_starts(start_requests, drained.clone()),
        );
        tracker.spawn(lifecycle.consume_finished(finished_consumer, drained.clone()));
        tracker.spawn(api.run(api_requests, shutdown.clone()));
        tracker.spawn(submit.run(submit_consumer, shutdown.clone()));
        tracker.spawn(slicer.run(done, shutdown.clone(), drained.clone()));
        tracker.spawn(publisher.run(shutdown.clone(), config.shutdown_drain, drained));
        tracker.spawn(expiry.run(expiry_lease, shutdown.clone()));
        tracker.spawn(housekeeping.run(housekeeping_lease, shutdown.clone()));
        tracker.close();

        tracing::info!(replica = %config.replica_id, ?metrics_addr, "chime-scheduler ready");
        Ok(Replica {
            id: config.replica_id,
            metrics,
            store,
            nats,
            metrics_addr,
            shutdown,
            tracker,
            drain: config.shutdown_drain,
        })
    }

    /// Stops claiming and serving, publishes what the wheel holds, releases the rest, and waits.
    ///
    /// Every step is bounded, so a replica whose NATS or database is gone
    /// still exits: after the drain plus `SHUTDOWN_SLACK` it stops waiting.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if tokio::time::timeout(self.drain + SHUTDOWN_SLACK, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("services did not stop in time; exiting anyway");
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.nats.flush()).await;
    }

    /// Waits until every service has stopped.
    pub async fn wait(&self) {
        self.tracker.wait().await
    }
}
