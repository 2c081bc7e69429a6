//! A built worker and its start-up: find the heartbeat bucket, register
//! (first heartbeat), wait for the streams and the group's consumers, then
//! start the background services, each under a supervisor that restarts it
//! if it panics or stops early. A worker never creates NATS objects; see
//! `topology.rs`.

use crate::clock::ServerClock;
use crate::config::WorkerConfig;
use crate::error::WorkerError;
use crate::firing::dispatch::Dispatcher;
use crate::firing::finish::Reporter;
use crate::firing::start::Starter;
use crate::handler::Handlers;
use crate::metrics::Metrics;
use crate::running::Running;
use crate::services::cancel::CancelListener;
use crate::services::fence::Fence;
use crate::services::heartbeat::Heartbeat;
use crate::services::offers::OfferListener;
use crate::services::pull::{Feeds, Puller, Source};
use crate::shutdown::{Stage, WorkerHandle};
use crate::slots::Slots;
use crate::status::WorkerStatus;
use crate::topology::{awaited, find_bucket, find_stream, wait_for};
use async_nats::jetstream;
use async_nats::Client;
use chime_common::{Band, Subjects};
use chime_runtime::connection::confirm_subscriptions;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio_util::task::TaskTracker;

/// What a service's first run uses; later runs make their own.
fn take<T>(first: &Mutex<Option<T>>) -> Option<T> {
    first.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// A worker, configured and not yet started. Build one with
/// [`Worker::builder`] (see `builder.rs`).
pub struct Worker {
    pub(crate) config: WorkerConfig,
    pub(crate) client: Client,
    pub(crate) subjects: Subjects,
    pub(crate) handlers: Handlers,
    pub(crate) metrics: Metrics,
    pub(crate) status: WorkerStatus,
}

impl Worker {
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
        let running = Running::default();
        let heartbeat = Heartbeat::new(
            workers,
            config.worker_id.clone(),
            config.group.clone(),
            slots.clone(),
            running.clone(),
            config.heartbeat_interval,
            handlers.offered(),
        );
        let first_beat = wait_for(&status, "the first heartbeat to be written", || {
            heartbeat.beat_once()
        })
        .await;
        let fence = Fence::new(
            lease,
            first_beat,
            running.clone(),
            status.clone(),
            metrics.clone(),
        );
        let restarts = metrics.service_restarts.clone();
        let on_restart = move |service: &str| restarts.with_label_values(&[service]).inc();
        // Two stages, because shutdown stops fetching first and the rest
        // only after the runs have drained.
        let fetching = Stage::new(config.supervisor.clone(), on_restart.clone());
        let background = Stage::new(config.supervisor.clone(), on_restart);
        // Stops the heartbeat and the fence if this future is dropped before it returns.
        let abandoned = background.stop.clone().drop_guard();
        status.watch(fetching.supervisor.health());
        status.watch(background.supervisor.health());
        spawn_heartbeat_and_fence(&background, &heartbeat, &fence);

        let source = Source::new(
            client.clone(),
            jetstream.clone(),
            subjects.clone(),
            config.group.clone(),
        );
        let (consumers, doorbell, cancels, offers) =
            open_feeds(&status, &source, &config, &subjects).await?;

        let handler_names: Vec<String> = handlers.names().into_iter().map(String::from).collect();
        let reporter = Reporter::new(
            jetstream.clone(),
            subjects.finished_as(&config.group, &config.worker_id),
            running.clone(),
            metrics.clone(),
        );
        let starter = Starter::new(
            client.clone(),
            subjects.worker_start_as(&config.group, &config.worker_id),
            config.worker_id.clone(),
            config.group.clone(),
            config.start_timeout,
        );
        let dispatcher = Dispatcher::new(
            &config,
            starter,
            handlers,
            running.clone(),
            reporter.clone(),
            metrics.clone(),
        );
        let firings = TaskTracker::new();
        let waiting = Arc::new(tokio::sync::watch::Sender::new(false));
        let dispatcher = Arc::new(dispatcher);
        let offer_listener = OfferListener {
            client: client.clone(),
            subject: subjects.offer(&config.group, &config.worker_id),
            dispatcher: dispatcher.clone(),
            slots: slots.clone(),
            firings: firings.clone(),
        };
        let puller = Puller {
            source,
            dispatcher,
            slots: slots.clone(),
            fence,
            firings: firings.clone(),
            clock: ServerClock::new(metrics.clock_offset.clone()),
            fetch_errors: metrics.fetch_errors.clone(),
            poll_interval: config.poll_interval,
            fetch_expiry: config.fetch_expiry,
            waiting: waiting.clone(),
        };
        // The first runs use what start-up made; a restarted one makes its own.
        let first_feeds = Mutex::new(Some(Feeds {
            consumers,
            doorbell,
        }));
        let stop = fetching.stop.clone();
        fetching.supervisor.spawn("fetch", move || {
            puller.clone().run(take(&first_feeds), stop.clone())
        });
        // Offers are taken like fetches, so shutdown stops both first.
        let first_offers = Mutex::new(Some(offers));
        let stop = fetching.stop.clone();
        fetching.supervisor.spawn("offer_listener", move || {
            offer_listener
                .clone()
                .run(take(&first_offers), stop.clone())
        });
        let listener = CancelListener {
            client,
            subject: subjects.cancel(&config.worker_id),
            running: running.clone(),
        };
        let first_cancels = Mutex::new(Some(cancels));
        let stop = background.stop.clone();
        background.supervisor.spawn("cancel_listener", move || {
            listener.clone().run(take(&first_cancels), stop.clone())
        });
        fetching.supervisor.close();
        background.supervisor.close();
        abandoned.disarm();
        status.set_started();
        tracing::debug!(worker_id = %config.worker_id, handlers = ?handler_names, ?lease, "worker started");
        Ok(WorkerHandle {
            config,
            metrics,
            status,
            slots,
            running,
            firings,
            reporter,
            heartbeat,
            fetching,
            background,
            waiting,
        })
    }
}

/// Spawns the heartbeat and the fence on the background stage: they keep
/// the lease, and stop the runs when it is lost.
fn spawn_heartbeat_and_fence(background: &Stage, heartbeat: &Heartbeat, fence: &Fence) {
    {
        let (heartbeat, fence, stop) = (heartbeat.clone(), fence.clone(), background.stop.clone());
        background.supervisor.spawn("heartbeat", move || {
            let run = heartbeat.clone().run(fence.clone(), stop.clone());
            async move {
                run.await;
                Ok::<(), Infallible>(())
            }
        });
    }
    let (fence, stop) = (fence.clone(), background.stop.clone());
    background.supervisor.spawn("fence", move || {
        let run = fence.clone().run(stop.clone());
        async move {
            run.await;
            Ok::<(), Infallible>(())
        }
    });
}

/// Waits for the streams and the group's consumers a scheduler makes,
/// subscribes to the group's doorbell, to this worker's cancels and offers, and
/// confirms the subscriptions with the server, so nothing sent once the
/// worker reports started is missed.
async fn open_feeds(
    status: &WorkerStatus,
    source: &Source,
    config: &WorkerConfig,
    subjects: &Subjects,
) -> Result<
    (
        [async_nats::jetstream::consumer::PullConsumer; 3],
        async_nats::Subscriber,
        async_nats::Subscriber,
        async_nats::Subscriber,
    ),
    WorkerError,
> {
    let jetstream = &source.jetstream;
    for stream in [subjects.fire_stream(), subjects.events_stream()] {
        wait_for(status, &awaited("stream", &stream), || {
            find_stream(jetstream, &stream)
        })
        .await;
    }
    let consumer = async |band| {
        let name = subjects.fire_consumer(&config.group, band);
        wait_for(status, &awaited("consumer", &name), || {
            source.consumer(band)
        })
        .await
    };
    let consumers = [
        consumer(Band::High).await,
        consumer(Band::Normal).await,
        consumer(Band::Low).await,
    ];
    let doorbell = source
        .doorbell()
        .await
        .map_err(|e| WorkerError::nats("subscribe to the doorbell")(e.into()))?;
    let cancels = source
        .client
        .subscribe(subjects.cancel(&config.worker_id))
        .await
        .map_err(|e| WorkerError::nats("subscribe to cancel requests")(e.into()))?;
    let offers = source
        .client
        .subscribe(subjects.offer(&config.group, &config.worker_id))
        .await
        .map_err(|e| WorkerError::nats("subscribe to offers")(e.into()))?;
    confirm_subscriptions(jetstream)
        .await
        .map_err(|e| WorkerError::nats("confirm subscriptions")(e.into()))?;
    Ok((consumers, doorbell, cancels, offers))
}
