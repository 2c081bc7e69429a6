//! A built worker and its start-up: find the heartbeat bucket, register
//! (first heartbeat), wait for the streams and the group's consumers, then
//! start the background services, each under a supervisor that restarts it
//! if it panics or stops early. A worker never creates NATS objects; see
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
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::Client;
use chime_common::supervisor::Supervisor;
use chime_common::{Band, Subjects};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a service's first run uses; later runs make their own.
fn take<T>(first: &Mutex<Option<T>>) -> Option<T> {
    first.lock().unwrap_or_else(|p| p.into_inner()).take()
}

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
        let restarts = metrics.service_restarts.clone();
        let on_restart = move |service: &str| restarts.with_label_values(&[service]).inc();
        // Two supervisors, because shutdown stops fetching first and the
        // rest only after the runs have drained.
        let fetching = Supervisor::new(
            config.supervisor.clone(),
            stop_fetching.clone(),
            on_restart.clone(),
        );
        let background = Supervisor::new(
            config.supervisor.clone(),
            stop_background.clone(),
            on_restart,
        );
        status.watch(fetching.health());
        status.watch(background.health());
        {
            let (heartbeat, fence, stop) =
                (heartbeat.clone(), fence.clone(), stop_background.clone());
            background.spawn("heartbeat", move || {
                let run = heartbeat.clone().run(fence.clone(), stop.clone());
                async move {
                    run.await;
                    Ok::<(), Infallible>(())
                }
            });
        }
        {
            let (fence, stop) = (fence.clone(), stop_background.clone());
            background.spawn("fence", move || {
                let run = fence.clone().run(stop.clone());
                async move {
                    run.await;
                    Ok::<(), Infallible>(())
                }
            });
        }

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
        // The first runs use what start-up made; a restarted one makes its own.
        let first_puller = Arc::new(Mutex::new(Some(Puller::new(
            shared.clone(),
            jetstream.clone(),
            consumers,
            doorbell,
            slots.clone(),
            fence.clone(),
            firings.clone(),
        ))));
        {
            let (shared, slots, firings, stop) = (
                shared.clone(),
                slots.clone(),
                firings.clone(),
                stop_fetching.clone(),
            );
            fetching.spawn("fetch", move || {
                let first = take(&first_puller);
                let (shared, jetstream, slots, fence, firings, stop) = (
                    shared.clone(),
                    jetstream.clone(),
                    slots.clone(),
                    fence.clone(),
                    firings.clone(),
                    stop.clone(),
                );
                async move {
                    let puller = match first {
                        Some(puller) => puller,
                        None => {
                            let group = shared.config.group.as_str();
                            let subjects = &shared.subjects;
                            let mut consumers = Vec::new();
                            for band in Band::ALL {
                                consumers.push(
                                    find_fire_consumer(&jetstream, subjects, group, band).await?,
                                );
                            }
                            let consumers: [PullConsumer; 3] = consumers
                                .try_into()
                                .map_err(|_| "three bands, three consumers".to_string())?;
                            let doorbell = shared
                                .client
                                .subscribe(subjects.ready(group))
                                .await
                                .map_err(|e| format!("subscribing to the doorbell: {e}"))?;
                            Puller::new(
                                shared.clone(),
                                jetstream,
                                consumers,
                                doorbell,
                                slots,
                                fence,
                                firings,
                            )
                        }
                    };
                    puller.run(stop).await;
                    Ok::<(), String>(())
                }
            });
        }
        {
            let first_cancels = Arc::new(Mutex::new(Some(cancels)));
            let subject = shared.subjects.cancel(&shared.config.worker_id);
            let stop = stop_background.clone();
            background.spawn("cancel_listener", move || {
                let first = take(&first_cancels);
                let (client, subject, running, stop) = (
                    client.clone(),
                    subject.clone(),
                    running.clone(),
                    stop.clone(),
                );
                async move {
                    let requests = match first {
                        Some(requests) => requests,
                        None => client.subscribe(subject).await?,
                    };
                    cancel::listen(client, requests, running, stop).await;
                    Ok::<(), async_nats::SubscribeError>(())
                }
            });
        }
        fetching.close();
        background.close();
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
            fetching,
            background,
        ))
    }
}
