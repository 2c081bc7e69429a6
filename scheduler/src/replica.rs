//! One scheduler replica: connects, sets up NATS objects, starts every service
//! (`services.rs`) with its settings (`config.rs`).
//!
//! The binary and the tests both start replicas through [`Replica::start`], so
//! tests exercise the same wiring as production.

use crate::config::SchedulerConfig;
use crate::firing::offers::Offers;
use crate::ops::clock_monitor::{ClockMonitor, ClockStatus};
use crate::ops::consumers::Consumers;
use crate::ops::job_metrics::JobMetrics;
use crate::ops::metrics::Metrics;
use crate::services::{spawn_periodic_services, FirstPassed, Links, Parts, Streaming};
use crate::signals::Signals;
use crate::store::Store;
use crate::workers::registry::Registry;
use anyhow::Context as _;
use chime_runtime::supervisor::{Health, Supervisor};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A running replica.
pub struct Replica {
    pub id: String,
    pub metrics: Metrics,
    pub store: Store,
    pub nats: async_nats::Client,
    /// The bound metrics address, when serving one.
    pub metrics_addr: Option<SocketAddr>,
    /// The bound HTTP API and console address, when serving one.
    pub http_addr: Option<SocketAddr>,
    /// Which supervised services keep failing (`/healthz`).
    pub health: Health,
    /// The last clock offset measurement (`/readyz`).
    pub clock: ClockStatus,
    /// What the services report, for tests to wait on.
    pub signals: Signals,
    shutdown: CancellationToken,
    /// The metrics endpoint.
    tracker: TaskTracker,
    supervisor: Supervisor,
    drain: Duration,
    /// Held until the replica is dropped: one scheduler per SQLite file.
    _holder: Option<crate::ops::sqlite_holder::SqliteHolder>,
}

/// How long shutdown waits beyond the drain for services to finish their last pass.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(5);

impl Replica {
    /// Connects to NATS and the store, creates streams and buckets, and starts every service.
    pub async fn start(config: SchedulerConfig) -> anyhow::Result<Replica> {
        config.validate().map_err(anyhow::Error::msg)?;
        let links = Links::connect(&config).await?;
        let parts = Parts::new(&config, &links);
        let clock = Arc::new(ClockMonitor::new(
            config.clock.clone(),
            links.store.clone(),
            parts.alerts.clone(),
            parts.metrics.clone(),
            config.replica_id.clone(),
        ));
        // Measured before the slicer's first pass: a replica whose clock is
        // off never claims a slice.
        clock
            .run_once(chrono::Utc::now())
            .await
            .context("cannot measure this replica's clock offset from the database")?;
        let metrics_addr = parts.serve_probes(&config, &links, &clock).await?;
        let api = parts.api(&config, &links);
        let http_addr = parts.serve_http(&config, &api).await?;
        let consumers = Arc::new(
            Consumers::new(
                config.consumers.clone(),
                links.topology.clone(),
                links.workers.clone(),
                links.store.clone(),
            )
            .with_metrics(parts.metrics.clone()),
        );
        // Made before the replica reports ready: workers of every known
        // group find their consumers, as the settings say, at once.
        consumers
            .run_once(chrono::Utc::now())
            .await
            .context("cannot create the firing consumers of the known groups")?;
        let job_metrics = Arc::new(JobMetrics::new(
            config.job_metrics.clone(),
            links.store.clone(),
            parts.metrics.clone(),
            parts.job_changes.clone(),
        ));
        // Loaded before the replica reports ready: a replica that just
        // started exports the newest ends the others do.
        job_metrics
            .run_once(chrono::Utc::now())
            .await
            .context("cannot read the jobs' newest ends for the per-job metrics")?;
        let offers = Arc::new(Offers::new(
            config.offers.clone(),
            links.store.clone(),
            Registry::new(links.workers.clone()),
            links.nats.clone(),
            parts.alerts.clone(),
        ));
        // Before the first slice: broadcast firings go to the workers
        // alive now, not to nobody. A bucket that cannot be read yet is
        // read again by the next pass.
        if let Err(error) = offers.run_once(chrono::Utc::now()).await {
            tracing::warn!(%error, "cannot read the workers broadcast firings go to yet");
        }
        let streaming = Streaming::new(&config, &links, &parts, api, &clock).await?;
        streaming.spawn(&config, &parts);
        parts.spawn_webhooks(&config, &links)?;
        let first = FirstPassed {
            clock: clock.clone(),
            offers,
            consumers,
            job_metrics,
        };
        spawn_periodic_services(&config, &links, &parts, first);
        parts.supervisor.close();
        parts.tracker.close();

        // `off` rather than `None`: the line is read by people.
        let shown =
            |addr: Option<std::net::SocketAddr>| addr.map_or("off".to_string(), |a| a.to_string());
        tracing::info!(
            replica = %config.replica_id,
            metrics = %shown(metrics_addr),
            http = %shown(http_addr),
            "chime-scheduler ready"
        );
        Ok(Replica {
            id: config.replica_id,
            health: parts.supervisor.health(),
            clock: clock.status(),
            metrics: parts.metrics,
            store: links.store,
            nats: links.nats.client,
            metrics_addr,
            http_addr,
            signals: parts.signals,
            shutdown: parts.shutdown,
            tracker: parts.tracker,
            supervisor: parts.supervisor,
            drain: config.shutdown_drain,
            _holder: links.holder,
        })
    }

    /// Stops claiming and serving, publishes what the wheel holds, releases the rest, and waits.
    ///
    /// Every step is bounded, so a replica whose NATS or database is gone
    /// still exits: after the drain plus `SHUTDOWN_SLACK` it stops waiting.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if tokio::time::timeout(self.drain + SHUTDOWN_SLACK, self.wait())
            .await
            .is_err()
        {
            tracing::warn!("services did not stop in time; exiting anyway");
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.nats.flush()).await;
    }

    /// Waits until every service has stopped.
    pub async fn wait(&self) {
        self.supervisor.wait().await;
        self.tracker.wait().await;
    }
}
