//! One scheduler replica: connects, sets up NATS objects, starts every service.
//!
//! The binary and the tests both start replicas through [`Replica::start`], so
//! tests exercise the same wiring as production.

use crate::firing::claim::SliceProgress;
use crate::firing::immediate::{Immediate, ImmediateConfig, Wake};
use crate::firing::publisher::{Publisher, PublisherConfig};
use crate::firing::slicer::{Slicer, SlicerConfig};
use crate::firing::unstarted::Unstarted;
use crate::firing::wheel::Wheel;
use crate::intake::api::{Api, ApiConfig};
use crate::intake::replies::Replies;
use crate::intake::submit::{Submit, SubmitConfig};
use crate::intake::web::WebConfig;
use crate::lease::Lease;
use crate::nats::Nats;
use crate::ops::alerts::Alerts;
use crate::ops::checkpoint::{CheckpointConfig, Checkpointer};
use crate::ops::clock::{ClockConfig, ClockMonitor, ClockStatus};
use crate::ops::consumers::{Consumers, ConsumersConfig};
use crate::ops::maintenance::{MaintenanceConfig, MaintenanceWindows};
use crate::ops::metrics::Metrics;
use crate::recovery::expiry::{ExpiryConfig, ExpiryMonitor};
use crate::recovery::housekeeping::{Housekeeping, HousekeepingConfig};
use crate::recovery::limit_release::{LimitRelease, LimitReleaseConfig};
use crate::recovery::republish::{RepublishConfig, Republisher};
use crate::signals::Signals;
use crate::store::{Backend, Store, StoreOptions};
use crate::workers::finishes::{Finishes, FinishesConfig};
use crate::workers::starts::{Starts, StartsConfig};
use anyhow::Context as _;
use chime_common::connection::{confirm_subscriptions, NatsConnection, ReplyCredentials};
use chime_common::service::{Periodic, PeriodicConfig};
use chime_common::supervisor::{Health, Supervisor, SupervisorConfig};
use chime_common::topology::{Topology, TopologyConfig};
use chime_common::Subjects;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
    pub expiry: ExpiryConfig,
    pub republish: RepublishConfig,
    pub housekeeping: HousekeepingConfig,
    /// Copying SQLite's write-ahead log into its file (SQLite only).
    pub checkpoint: CheckpointConfig,
    /// Ending maintenance windows (pauses with `until`).
    pub maintenance: MaintenanceConfig,
    /// Releasing firings held by concurrency limits.
    pub limit_release: LimitReleaseConfig,
    /// Publishing firings staged outside a slice at once.
    pub immediate: ImmediateConfig,
    /// How failed services are restarted and when they make `/healthz` fail.
    pub supervisor: SupervisorConfig,
    /// The clock offset check (`--max-clock-offset`).
    pub clock: ClockConfig,
    /// The firing consumers of every group.
    pub consumers: ConsumersConfig,
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
            expiry: ExpiryConfig::default(),
            republish: RepublishConfig::default(),
            housekeeping: HousekeepingConfig::default(),
            checkpoint: CheckpointConfig::default(),
            maintenance: MaintenanceConfig::default(),
            limit_release: LimitReleaseConfig::default(),
            immediate: ImmediateConfig::default(),
            supervisor: SupervisorConfig::default(),
            clock: ClockConfig::default(),
            consumers: ConsumersConfig::default(),
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
        self.supervisor.validate()?;
        self.clock.validate()?;
        self.consumers.validate()?;
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
        // Answers leave over a connection of their own when the reply user
        // is configured: that user may publish to inboxes only.
        let reply_nats = match config
            .nats
            .with_reply_credentials(&config.reply_credentials)
            .map_err(anyhow::Error::msg)?
        {
            Some(connection) => connection
                .connect(
                    &format!("chime-scheduler {} replies", config.replica_id),
                    config.nats_connect_wait,
                )
                .await
                .context("cannot connect as the reply user (--nats-reply-user)")?,
            None => {
                if config.nats.authenticates() {
                    tracing::warn!(
                        "answers to requests leave as the scheduler's own NATS user, which may \
                         publish anywhere; give --nats-reply-user a user that may publish to \
                         _INBOX.> only (docs/SECURITY.md)"
                    );
                }
                nats.clone()
            }
        };
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
        // to a few hundred ms.
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
        let submit_consumer = submit_consumer_of(&topology).await?;
        let finished_consumer = finished_consumer_of(&topology).await?;

        let metrics = Metrics::new();
        let replies = Replies::new(reply_nats, metrics.replies_refused.clone());
        let signals = Signals::default();
        let shutdown = CancellationToken::new();
        let drained = CancellationToken::new();
        let tracker = TaskTracker::new();
        let wheel = Wheel::new(metrics.clone());
        let (progress, done) = SliceProgress::new();
        let restarts = metrics.service_restarts.clone();
        let supervisor = Supervisor::new(
            config.supervisor.clone(),
            shutdown.clone(),
            move |service| restarts.with_label_values(&[service]).inc(),
        );
        let immediate = Wake::default();
        let unstarted = Unstarted::default();
        let links = Nats {
            client: nats.clone(),
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
        };
        let alerts = Alerts::new(jetstream.clone(), subjects.clone(), metrics.clone());
        let starts = Starts {
            config: config.starts.clone(),
            unstarted: unstarted.clone(),
            replies: replies.clone(),
            alerts: alerts.clone(),
            store: store.clone(),
            nats: nats.clone(),
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
            metrics: metrics.clone(),
        };
        let finishes = Finishes {
            config: config.finishes.clone(),
            finished: signals.finished.clone(),
            immediate: immediate.clone(),
            alerts: alerts.clone(),
            store: store.clone(),
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
            metrics: metrics.clone(),
        };
        let clock = Arc::new(ClockMonitor::new(
            config.clock.clone(),
            store.clone(),
            alerts.clone(),
            metrics.clone(),
            config.replica_id.clone(),
        ));
        // Measured before the slicer's first pass: a replica whose clock is
        // off never claims a slice.
        clock
            .run_once(chrono::Utc::now())
            .await
            .context("cannot measure this replica's clock offset from the database")?;

        let metrics_addr = match config.metrics_addr {
            Some(addr) => {
                let (bound, task) = crate::ops::probes::serve(
                    addr,
                    crate::ops::probes::Probe {
                        metrics: metrics.clone(),
                        store: store.clone(),
                        nats: nats.clone(),
                        health: supervisor.health(),
                        clock: clock.status(),
                    },
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

        let api = Api {
            config: config.api.clone(),
            store: store.clone(),
            nats: nats.clone(),
            subjects: subjects.clone(),
            workers: workers.clone(),
            jetstream: jetstream.clone(),
            metrics: metrics.clone(),
            immediate: immediate.clone(),
            replies,
        };
        let http_addr = match config.web.clone() {
            Some(web) => {
                let addr = web.addr;
                let open = web.open;
                let (bound, task) =
                    crate::intake::web::serve(web.clone(), api.clone(), drained.clone())
                        .await
                        .with_context(|| format!("cannot serve the HTTP API on {addr}"))?;
                tracker.spawn(async move {
                    let _ = task.await;
                });
                if open {
                    // Printed for the one person who started it: the token
                    // is the only key to an open console.
                    tracing::info!(
                        console = %web.open_link(bound),
                        "the console, opened by the token in its address (--http-open)"
                    );
                }
                Some(bound)
            }
            None => None,
        };
        let submit = Submit {
            config: config.submit.clone(),
            store: store.clone(),
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
            metrics: metrics.clone(),
        };
        let slicer = Arc::new(
            Slicer::new(
                config.slicer.clone(),
                config.replica_id.clone(),
                store.clone(),
                slices,
                wheel.clone(),
                progress.clone(),
                metrics.clone(),
            )
            .with_clock(clock.status())
            .with_alerts(alerts.clone()),
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
            unstarted,
        };
        let consumers = Arc::new(
            Consumers::new(
                config.consumers.clone(),
                topology.clone(),
                workers.clone(),
                store.clone(),
            )
            .with_metrics(metrics.clone()),
        );
        consumers
            .run_once(chrono::Utc::now())
            .await
            .context("cannot create the firing consumers of the known groups")?;

        // Subscribed, and the server has them, before "ready": a request
        // sent the moment start returns finds a responder. Later runs
        // subscribe again.
        let start_requests = first_run(starts.subscribe().await?);
        let api_requests = first_run(api.subscribe().await?);
        let submit_consumer = first_run(submit_consumer);
        let finished_consumer = first_run(finished_consumer);
        confirm_subscriptions(&jetstream)
            .await
            .context("cannot reach NATS to confirm subscriptions")?;

        for service in SERVICES {
            metrics.service_restarts.with_label_values(&[service]);
        }
        // Starts and finishes are served until the wheel has drained:
        // workers still start what this replica publishes.
        {
            let (starts, drained) = (starts.clone(), drained.clone());
            supervisor.spawn("starts", move || {
                let (starts, drained) = (starts.clone(), drained.clone());
                let initial = take(&start_requests);
                async move {
                    let requests = match initial {
                        Some(requests) => requests,
                        None => starts.subscribe().await?,
                    };
                    starts.serve(requests, drained).await;
                    anyhow::Ok(())
                }
            });
        }
        {
            let (finishes, drained, topology) =
                (finishes.clone(), drained.clone(), topology.clone());
            supervisor.spawn("finishes", move || {
                let (finishes, drained, topology) =
                    (finishes.clone(), drained.clone(), topology.clone());
                let initial = take(&finished_consumer);
                async move {
                    let consumer = match initial {
                        Some(consumer) => consumer,
                        None => finished_consumer_of(&topology).await?,
                    };
                    finishes.consume(consumer, drained).await?;
                    anyhow::Ok(())
                }
            });
        }
        {
            let shutdown = shutdown.clone();
            supervisor.spawn("api", move || {
                let (api, shutdown) = (api.clone(), shutdown.clone());
                let initial = take(&api_requests);
                async move {
                    let requests = match initial {
                        Some(requests) => requests,
                        None => api.subscribe().await?,
                    };
                    api.run(requests, shutdown).await;
                    anyhow::Ok(())
                }
            });
        }
        {
            let (shutdown, topology) = (shutdown.clone(), topology.clone());
            supervisor.spawn("submit", move || {
                let (submit, shutdown, topology) =
                    (submit.clone(), shutdown.clone(), topology.clone());
                let initial = take(&submit_consumer);
                async move {
                    let consumer = match initial {
                        Some(consumer) => consumer,
                        None => submit_consumer_of(&topology).await?,
                    };
                    submit.run(consumer, shutdown).await?;
                    anyhow::Ok(())
                }
            });
        }
        {
            let (shutdown, drained) = (shutdown.clone(), drained.clone());
            let done = Arc::new(tokio::sync::Mutex::new(done));
            supervisor.spawn("slicer", move || {
                let (slicer, done) = (slicer.clone(), done.clone());
                let (shutdown, drained) = (shutdown.clone(), drained.clone());
                async move {
                    let mut done = done.lock_owned().await;
                    slicer.run(&mut done, shutdown, drained).await;
                    anyhow::Ok(())
                }
            });
        }
        {
            let (shutdown, drain) = (shutdown.clone(), config.shutdown_drain);
            supervisor.spawn("publisher", move || {
                let run = publisher
                    .clone()
                    .run(shutdown.clone(), drain, drained.clone());
                async move {
                    run.await;
                    anyhow::Ok(())
                }
            });
        }
        let expiry = ExpiryMonitor::new(
            config.expiry.clone(),
            store.clone(),
            workers.clone(),
            links.clone(),
            alerts.clone(),
            immediate.clone(),
            metrics.clone(),
        );
        let expiry_lease = Lease::new(
            leases.clone(),
            "expiry",
            config.replica_id.clone(),
            config.expiry.lease_ttl,
        );
        supervisor.spawn_periodic(
            Periodic::new(
                "expiry",
                Arc::new(expiry),
                PeriodicConfig::every(config.expiry.interval),
            )
            .with_lease(Arc::new(expiry_lease))
            .with_signal(signals.expiry.clone()),
        );
        let republisher = Republisher::new(
            config.republish.clone(),
            store.clone(),
            workers.clone(),
            links.clone(),
            alerts.clone(),
            metrics.clone(),
        );
        let republish_lease = Lease::new(
            leases.clone(),
            "republish",
            config.replica_id.clone(),
            config.republish.lease_ttl,
        );
        supervisor.spawn_periodic(
            Periodic::new(
                "republish",
                Arc::new(republisher),
                PeriodicConfig::every(config.republish.interval),
            )
            .with_lease(Arc::new(republish_lease))
            .with_signal(signals.republish.clone()),
        );
        let housekeeping = Housekeeping::new(
            config.housekeeping.clone(),
            store.clone(),
            wheel.clone(),
            metrics.clone(),
        );
        let housekeeping_lease = Lease::new(
            leases.clone(),
            "housekeeping",
            config.replica_id.clone(),
            config.housekeeping.lease_ttl,
        )
        .with_gauge(metrics.leader.clone());
        let store_errors = metrics.store_errors.clone();
        supervisor.spawn_periodic(
            Periodic::new(
                "housekeeping",
                Arc::new(housekeeping),
                PeriodicConfig::every(config.housekeeping.interval),
            )
            .with_lease(Arc::new(housekeeping_lease))
            .with_signal(signals.housekeeping.clone())
            .on_failure(move |_| store_errors.with_label_values(&["housekeeping"]).inc()),
        );
        if store.backend() == Backend::Sqlite {
            let store_errors = metrics.store_errors.clone();
            supervisor.spawn_periodic(
                Periodic::new(
                    "checkpoint",
                    Arc::new(Checkpointer {
                        config: config.checkpoint.clone(),
                        store: store.clone(),
                    }),
                    PeriodicConfig::every(config.checkpoint.interval),
                )
                .with_signal(signals.checkpoint.clone())
                .on_failure(move |_| store_errors.with_label_values(&["checkpoint"]).inc()),
            );
        }
        let maintenance_lease = Lease::new(
            leases.clone(),
            "maintenance",
            config.replica_id.clone(),
            config.maintenance.lease_ttl,
        );
        let store_errors = metrics.store_errors.clone();
        supervisor.spawn_periodic(
            Periodic::new(
                "maintenance",
                Arc::new(MaintenanceWindows {
                    config: config.maintenance.clone(),
                    store: store.clone(),
                }),
                PeriodicConfig::every(config.maintenance.interval),
            )
            .with_lease(Arc::new(maintenance_lease))
            .with_signal(signals.maintenance.clone())
            .on_failure(move |_| store_errors.with_label_values(&["maintenance"]).inc()),
        );
        let limits_lease = Lease::new(
            leases,
            "limits",
            config.replica_id.clone(),
            config.limit_release.lease_ttl,
        );
        let store_errors = metrics.store_errors.clone();
        supervisor.spawn_periodic(
            Periodic::new(
                "limits",
                Arc::new(LimitRelease {
                    config: config.limit_release.clone(),
                    store: store.clone(),
                    immediate: immediate.clone(),
                }),
                PeriodicConfig::every(config.limit_release.interval),
            )
            .with_lease(Arc::new(limits_lease))
            .with_signal(signals.limit_release.clone())
            .on_failure(move |_| store_errors.with_label_values(&["limits"]).inc()),
        );
        let store_errors = metrics.store_errors.clone();
        supervisor.spawn_periodic(
            Periodic::new(
                "immediate",
                Arc::new(Immediate::new(
                    config.immediate.clone(),
                    config.slicer.slice,
                    store.clone(),
                    wheel.clone(),
                )),
                PeriodicConfig::every(config.immediate.interval),
            )
            .with_wake(immediate)
            .with_signal(signals.immediate.clone())
            .on_failure(move |_| store_errors.with_label_values(&["immediate"]).inc()),
        );
        supervisor.spawn_periodic(
            Periodic::new(
                "clock",
                clock.clone(),
                PeriodicConfig::every(config.clock.interval),
            )
            .with_signal(signals.clock.clone()),
        );
        supervisor.spawn_periodic(
            Periodic::new(
                "consumers",
                consumers,
                PeriodicConfig::every(config.consumers.interval),
            )
            .with_signal(signals.consumers.clone()),
        );
        supervisor.close();
        tracker.close();

        tracing::info!(replica = %config.replica_id, ?metrics_addr, ?http_addr, "chime-scheduler ready");
        Ok(Replica {
            id: config.replica_id,
            metrics,
            store,
            nats,
            metrics_addr,
            http_addr,
            health: supervisor.health(),
            clock: clock.status(),
            signals,
            shutdown,
            tracker,
            supervisor,
            drain: config.shutdown_drain,
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

/// Every supervised service, by the name its metrics and `/healthz` use.
pub const SERVICES: [&str; 15] = [
    "starts",
    "finishes",
    "api",
    "submit",
    "slicer",
    "publisher",
    "expiry",
    "republish",
    "housekeeping",
    "checkpoint",
    "maintenance",
    "limits",
    "immediate",
    "clock",
    "consumers",
];

/// What a service's first run uses (made before the replica reports ready);
/// later runs make their own.
fn first_run<T>(initial: T) -> Arc<Mutex<Option<T>>> {
    Arc::new(Mutex::new(Some(initial)))
}

fn take<T>(first: &Mutex<Option<T>>) -> Option<T> {
    first.lock().unwrap_or_else(|p| p.into_inner()).take()
}

async fn submit_consumer_of(
    topology: &Topology,
) -> Result<async_nats::jetstream::consumer::PullConsumer, chime_common::topology::TopologyError> {
    let subjects = &topology.subjects;
    topology
        .durable(
            &subjects.submit_stream(),
            "chime-submit",
            vec![subjects.submit()],
            Duration::from_secs(30),
        )
        .await
}

/// The replicas' shared durable consumer of finished events.
pub async fn finished_consumer_of(
    topology: &Topology,
) -> Result<async_nats::jetstream::consumer::PullConsumer, chime_common::topology::TopologyError> {
    let subjects = &topology.subjects;
    topology
        .durable(
            &subjects.events_stream(),
            "chime-lifecycle",
            vec![subjects.finished(), subjects.finished_wildcard()],
            Duration::from_secs(30),
        )
        .await
}
