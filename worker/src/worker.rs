//! A built worker and its start-up: topology, consumers, subscriptions,
//! first heartbeat, then the background tasks.

use crate::builder::WorkerBuilder;
use crate::cancel;
use crate::config::WorkerConfig;
use crate::error::WorkerError;
use crate::finish::Reporter;
use crate::handler::Handlers;
use crate::heartbeat::Heartbeat;
use crate::metrics::Metrics;
use crate::pull::Puller;
use crate::running::Running;
use crate::shutdown::WorkerHandle;
use crate::slots::Slots;
use async_nats::jetstream;
use async_nats::Client;
use chime_common::topology::{Topology, TopologyConfig};
use chime_common::{Band, Subjects};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What every firing task shares.
pub(crate) struct Shared {
    pub(crate) config: WorkerConfig,
    pub(crate) client: Client,
    pub(crate) subjects: Subjects,
    pub(crate) handlers: Handlers,
    pub(crate) metrics: Metrics,
    pub(crate) running: Running,
    pub(crate) reporter: Reporter,
}

/// A worker, configured and not yet started. Build one with [`Worker::builder`].
pub struct Worker {
    pub(crate) config: WorkerConfig,
    pub(crate) client: Client,
    pub(crate) subjects: Subjects,
    pub(crate) topology_config: TopologyConfig,
    pub(crate) handlers: Handlers,
    pub(crate) metrics: Metrics,
}

impl Worker {
    /// A builder with the defaults of [`WorkerConfig`].
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::default()
    }

    /// The worker id (`<hostname>-<8 random hex>` unless set).
    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// The settings it runs with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Its metrics (to serve them, see [`crate::admin`]).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Creates what is missing on NATS, registers the worker (first
    /// heartbeat) and starts pulling. Returns once it is ready.
    pub async fn start(self) -> Result<WorkerHandle, WorkerError> {
        let Worker {
            config,
            client,
            subjects,
            topology_config,
            handlers,
            metrics,
        } = self;
        let jetstream = jetstream::new(client.clone());
        let topology = Topology::new(jetstream.clone(), subjects.clone(), topology_config);
        topology.ensure().await?;
        let group = config.group.as_str();
        let consumers = [
            topology.fire_consumer(group, Band::High).await?,
            topology.fire_consumer(group, Band::Normal).await?,
            topology.fire_consumer(group, Band::Low).await?,
        ];
        let workers = topology.workers().await?;

        let doorbell = client
            .subscribe(subjects.ready(&config.group))
            .await
            .map_err(|e| WorkerError::nats("subscribe to the doorbell")(e.into()))?;
        let cancels = client
            .subscribe(subjects.cancel(&config.worker_id))
            .await
            .map_err(|e| WorkerError::nats("subscribe to cancel requests")(e.into()))?;
        client
            .flush()
            .await
            .map_err(|e| WorkerError::nats("flush subscriptions")(e.into()))?;

        let slots = Slots::new(config.threads, metrics.clone());
        let heartbeat = Heartbeat::new(
            workers,
            config.worker_id.clone(),
            config.group.clone(),
            slots.clone(),
            config.heartbeat_interval,
        );
        heartbeat
            .beat_once()
            .await
            .map_err(WorkerError::nats("write the first heartbeat"))?;

        let reporter = Reporter::new(jetstream, subjects.finished(), metrics.clone());
        let running = Running::default();
        let shared = Arc::new(Shared {
            config,
            client: client.clone(),
            subjects,
            handlers,
            metrics,
            running: running.clone(),
            reporter,
        });

        let stop_fetching = CancellationToken::new();
        let stop_background = CancellationToken::new();
        let firings = TaskTracker::new();
        let puller = Puller::new(
            shared.clone(),
            topology,
            consumers,
            doorbell,
            slots.clone(),
            firings.clone(),
        );
        let pull_task = tokio::spawn(puller.run(stop_fetching.clone()));
        let background = vec![
            tokio::spawn(heartbeat.clone().run(stop_background.clone())),
            tokio::spawn(cancel::listen(
                client,
                cancels,
                running,
                stop_background.clone(),
            )),
        ];
        tracing::debug!(worker_id = %shared.config.worker_id, handlers = ?shared.handlers.names(), "worker started");
        Ok(WorkerHandle::new(
            shared,
            slots,
            heartbeat,
            firings,
            stop_fetching,
            stop_background,
            pull_task,
            background,
        ))
    }
}
