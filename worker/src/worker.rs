//! A built worker and its start-up: find the heartbeat bucket, register
//! (first heartbeat), wait for the streams and the group's consumers, then
//! start the background tasks. A worker never creates NATS objects; see
//! `topology.rs`.

use crate::builder::WorkerBuilder;
use crate::cancel;
use crate::clock::ClockOffset;
use crate::config::WorkerConfig;
use crate::error::WorkerError;
use crate::fence::Fence;
use crate::finish::Reporter;
use crate::handler::Handlers;
use crate::heartbeat::Heartbeat;
use crate::metrics::Metrics;
use crate::pull::Puller;
use crate::running::Running;
use crate::shutdown::WorkerHandle;
use crate::slots::Slots;
use crate::status::WorkerStatus;
use crate::topology::{awaited, find_bucket, find_fire_consumer, find_stream, wait_for};
use async_nats::jetstream;
use async_nats::Client;
use chime_common::{Band, Subjects};
use std::sync::{Arc, Mutex};
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
    pub(crate) status: WorkerStatus,
    /// Estimates the clock offset from fetched firings' timestamps.
    pub(crate) clock: Mutex<ClockOffset>,
}

/// A worker, configured and not yet started. Build one with [`Worker::builder`].
pub struct Worker {
    pub(crate) config: WorkerConfig,
    pub(crate) client: Client,
    pub(crate) subjects: Subjects,
    pub(crate) handlers: Handlers,
    pub(crate) metrics: Metrics,
    pub(crate) status: WorkerStatus,
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

    /// Its state, for `/readyz` (see [`crate::admin`]); not ready while
    /// [`Worker::start`] waits.
    pub fn status(&self) -> WorkerStatus {
        self.status.clone()
    }

    /// Registers the worker and starts pulling; returns once it is ready.
    ///
    /// Finds the heartbeat bucket, writes the first heartbeat (a scheduler
    /// creates the consumers of the groups it sees there), then finds the
    /// firing and event streams and the group's three consumers, and starts
    /// pulling. It waits as long as something is missing, logging what (a
    /// worker never creates NATS objects), and heartbeats meanwhile. Drop the
    /// future to give up (on shutdown): the tasks it started stop with it.
    pub async fn start(self) -> Result<WorkerHandle, WorkerError> {
        let Worker {
            config,
            client,
            subjects,
            handlers,
            metrics,
            status,
        } = self;
        let jetstream = jetstream::new(client.clone());
        let bucket = subjects.workers_bucket();
        let workers = wait_for(&status, &awaited("bucket", &bucket), || {
            find_bucket(&jetstream, &bucket)
        })
        .await;
        let worker_ttl = workers
            .status()
            .await
            .map_err(|e| {
                WorkerError::nats(format!("read the settings of bucket {bucket}"))(e.into())
            })?
            .max_age();
        let lease = config.lease(worker_ttl)?;
        config.validate(worker_ttl)?;

        let slots = Slots::new(config.threads, metrics.clone());
        let heartbeat = Heartbeat::new(
            workers,
            config.worker_id.clone(),
            config.group.clone(),
            slots.clone(),
            config.heartbeat_interval,
        );
        let first_beat = wait_for(&status, "the first heartbeat to be written", || {
            heartbeat.beat_once()
        })
        .await;
        let running = Running::default();
        let fence = Fence::new(
            lease,
            first_beat,
            running.clone(),
            status.clone(),
            metrics.clone(),
        );
        let stop_fetching = CancellationToken::new();
        let stop_background = CancellationToken::new();
        // Stops the heartbeat and the fence if this future is dropped before it returns.
        let abandoned = stop_background.clone().drop_guard();
        let mut background = vec![
            tokio::spawn(
                heartbeat
                    .clone()
                    .run(fence.clone(), stop_background.clone()),
            ),
            tokio::spawn(fence.clone().run(stop_background.clone())),
        ];

        for stream in [subjects.fire_stream(), subjects.events_stream()] {
            wait_for(&status, &awaited("stream", &stream), || {
                find_stream(&jetstream, &stream)
            })
            .await;
        }
        let group = config.group.as_str();
        let consumer = async |band| {
            let name = subjects.fire_consumer(group, band);
            wait_for(&status, &awaited("consumer", &name), || {
                find_fire_consumer(&jetstream, &subjects, group, band)
            })
            .await
        };
        let consumers = [
            consumer(Band::High).await,
            consumer(Band::Normal).await,
            consumer(Band::Low).await,
        ];

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

        let reporter = Reporter::new(jetstream.clone(), subjects.finished(), metrics.clone());
        let shared = Arc::new(Shared {
            config,
            client: client.clone(),
            subjects,
            handlers,
            metrics,
            running: running.clone(),
            reporter,
            status: status.clone(),
            clock: Mutex::new(ClockOffset::default()),
        });

        let firings = TaskTracker::new();
        let puller = Puller::new(
            shared.clone(),
            jetstream,
            consumers,
            doorbell,
            slots.clone(),
            fence,
            firings.clone(),
        );
        let pull_task = tokio::spawn(puller.run(stop_fetching.clone()));
        background.push(tokio::spawn(cancel::listen(
            client,
            cancels,
            running,
            stop_background.clone(),
        )));
        abandoned.disarm();
        status.set_started();
        tracing::debug!(worker_id = %shared.config.worker_id, handlers = ?shared.handlers.names(), ?lease, "worker started");
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
