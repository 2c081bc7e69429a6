//! The replica's services: what each is built from and how it runs.
//!
//! [`Replica::start`](crate::Replica::start) reads as the order of start-up;
//! this file holds the parts it wires. The connections (`Links`) and the
//! handles every service shares (`Parts`) are made once. The streaming
//! services (`Streaming`) each serve a subscription or a durable consumer
//! whose first run is subscribed before the replica reports ready. The
//! periodic services are one table, `PERIODIC`: name, interval, whether
//! one replica at a time runs it, and whether a failed pass is a store
//! error.

use crate::config::SchedulerConfig;
use crate::firing::claim::SliceProgress;
use crate::firing::immediate::{Immediate, Wake};
use crate::firing::offers::Offers;
use crate::firing::publisher::Publisher;
use crate::firing::slicer::Slicer;
use crate::firing::unstarted::Unstarted;
use crate::firing::wheel::Wheel;
use crate::intake::api::Api;
use crate::intake::replies::Replies;
use crate::intake::submit::Submit;
use crate::lease::Lease;
use crate::nats::Nats;
use crate::ops::alerts::Alerts;
use crate::ops::checkpointer::Checkpointer;
use crate::ops::clock_monitor::ClockMonitor;
use crate::ops::consumers::Consumers;
use crate::ops::job_metrics::{JobChanges, JobMetrics};
use crate::ops::maintenance_windows::MaintenanceWindows;
use crate::ops::metrics::Metrics;
use crate::ops::sqlite_holder::SqliteHolder;
use crate::ops::webhooks::AlertWebhooks;
use crate::recovery::expiry_monitor::ExpiryMonitor;
use crate::recovery::housekeeping::Housekeeping;
use crate::recovery::limit_release::LimitRelease;
use crate::recovery::republisher::Republisher;
use crate::signals::Signals;
use crate::store::{Backend, Store};
use crate::workers::finishes::Finishes;
use crate::workers::registry::Registry;
use crate::workers::starts::{StartRequests, Starts};
use anyhow::Context as _;
use async_nats::jetstream::{consumer::PullConsumer, kv};
use chime_runtime::connection::confirm_subscriptions;
use chime_runtime::service::{Pass, Periodic, PeriodicConfig, Service};
use chime_runtime::signal::TestSignal;
use chime_runtime::supervisor::Supervisor;
use chime_runtime::topology::{Topology, TopologyError};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Every supervised service, by the name its metrics and `/healthz` use.
pub const SERVICES: [&str; 18] = [
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
    "limit_release",
    "immediate",
    "offers",
    "clock",
    "consumers",
    "job_metrics",
    "alert_webhooks",
];

/// What a replica connects to: NATS (and the reply user's connection), the
/// store, and the streams and buckets it ensured.
pub(crate) struct Links {
    pub nats: Nats,
    /// The connection answers leave over (the main one without a reply user).
    pub reply_nats: async_nats::Client,
    pub store: Store,
    pub topology: Topology,
    pub slices: kv::Store,
    pub workers: kv::Store,
    pub leases: kv::Store,
    /// This scheduler's hold on its SQLite file (none on PostgreSQL).
    pub holder: Option<SqliteHolder>,
}

impl Links {
    pub async fn connect(config: &SchedulerConfig) -> anyhow::Result<Links> {
        let client = config
            .nats
            .connect(
                &format!("chime-scheduler {}", config.replica_id),
                config.nats_connect_wait,
            )
            .await?;
        let reply_nats = reply_connection(config, &client).await?;
        // Before the store opens: a second scheduler on the file changes
        // nothing in it.
        let holder = SqliteHolder::take(&config.database_url, &config.replica_id)
            .map_err(anyhow::Error::msg)?;
        let store = Store::connect(&config.database_url, config.store.clone())
            .await
            .with_context(|| {
                format!(
                    "cannot open the store at {}",
                    chime_runtime::secret::redact_url(&config.database_url)
                )
            })?;
        // async-nats holds at most 5,000 publishes awaiting their ack by
        // default; a burst of 100,000 firings due at one instant then
        // publishes 5,000 per ack round trip, which a busy server stretches
        // to a few hundred ms.
        let jetstream = async_nats::jetstream::ContextBuilder::new()
            .max_ack_inflight(50_000)
            .build(client.clone());
        let topology = Topology::new(
            jetstream.clone(),
            config.subjects.clone(),
            config.topology.clone(),
        );
        topology
            .ensure()
            .await
            .context("cannot set up JetStream streams and buckets")?;
        Ok(Links {
            slices: topology.slices().await?,
            workers: topology.workers().await?,
            leases: topology.leases().await?,
            nats: Nats {
                client,
                jetstream,
                subjects: config.subjects.clone(),
            },
            reply_nats,
            store,
            topology,
            holder,
        })
    }
}

/// Answers leave over a connection of their own when the reply user is
/// configured: that user may publish to inboxes only.
async fn reply_connection(
    config: &SchedulerConfig,
    main: &async_nats::Client,
) -> anyhow::Result<async_nats::Client> {
    let Some(connection) = config
        .nats
        .with_reply_credentials(&config.reply_credentials)
        .map_err(anyhow::Error::msg)?
    else {
        if config.nats.authenticates() {
            tracing::warn!(
                "answers to requests leave as the scheduler's own NATS user, which may \
                 publish anywhere; give --nats-reply-user a user that may publish to \
                 _INBOX.> only (docs/SECURITY.md)"
            );
        }
        return Ok(main.clone());
    };
    connection
        .connect(
            &format!("chime-scheduler {} replies", config.replica_id),
            config.nats_connect_wait,
        )
        .await
        .context("cannot connect as the reply user (--nats-reply-user)")
}

/// The handles a replica's services share.
pub(crate) struct Parts {
    pub metrics: Metrics,
    pub signals: Signals,
    pub alerts: Alerts,
    pub replies: Replies,
    pub wheel: Wheel,
    /// Wakes the immediate service when firings were staged outside a slice.
    pub immediate: Wake,
    pub unstarted: Unstarted,
    /// Jobs whose per-job gauges this replica changed, read again at once.
    pub job_changes: JobChanges,
    /// Stops claiming, serving the API and submissions.
    pub shutdown: CancellationToken,
    /// Cancelled once the wheel has drained: starts and finishes are served until then.
    pub drained: CancellationToken,
    /// The HTTP servers' tasks.
    pub tracker: TaskTracker,
    pub supervisor: Supervisor,
}

impl Parts {
    pub fn new(config: &SchedulerConfig, links: &Links) -> Parts {
        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let restarts = metrics.service_restarts.clone();
        let supervisor = Supervisor::new(
            config.supervisor.clone(),
            shutdown.clone(),
            move |service| restarts.with_label_values(&[service]).inc(),
        );
        for service in SERVICES {
            metrics.service_restarts.with_label_values(&[service]);
        }
        let nats = &links.nats;
        Parts {
            alerts: Alerts::new(
                nats.jetstream.clone(),
                nats.subjects.clone(),
                metrics.clone(),
            ),
            replies: Replies::new(links.reply_nats.clone(), metrics.replies_refused.clone()),
            wheel: Wheel::new(metrics.clone()),
            signals: Signals::default(),
            immediate: Wake::default(),
            unstarted: Unstarted::default(),
            job_changes: JobChanges::default(),
            drained: CancellationToken::new(),
            tracker: TaskTracker::new(),
            metrics,
            shutdown,
            supervisor,
        }
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` when `--metrics-addr` is set.
    pub async fn serve_probes(
        &self,
        config: &SchedulerConfig,
        links: &Links,
        clock: &ClockMonitor,
    ) -> anyhow::Result<Option<SocketAddr>> {
        let Some(addr) = config.metrics_addr else {
            return Ok(None);
        };
        let probe = crate::ops::probes::Probe {
            metrics: self.metrics.clone(),
            store: links.store.clone(),
            nats: links.nats.client.clone(),
            health: self.supervisor.health(),
            clock: clock.status(),
        };
        let (bound, task) = crate::ops::probes::serve(addr, probe, self.drained.clone())
            .await
            .map_err(|e| {
                let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (another program, perhaps another scheduler, listens there: give this one \
                     a free --metrics-addr / CHIME_METRICS_ADDR)"
                } else {
                    ""
                };
                anyhow::anyhow!("cannot serve metrics on {addr}: {e}{hint}")
            })?;
        self.tracker.spawn(async move {
            let _ = task.await;
        });
        Ok(Some(bound))
    }

    /// The request/reply API, also behind the HTTP API.
    pub fn api(&self, config: &SchedulerConfig, links: &Links) -> Api {
        Api {
            config: config.api.clone(),
            store: links.store.clone(),
            nats: links.nats.client.clone(),
            subjects: links.nats.subjects.clone(),
            workers: Registry::new(links.workers.clone()),
            jetstream: links.nats.jetstream.clone(),
            metrics: self.metrics.clone(),
            immediate: self.immediate.clone(),
            replies: self.replies.clone(),
            job_changes: self.job_changes.clone(),
        }
    }

    /// Runs the alert webhooks (`--alert-webhook`) under the supervisor,
    /// when any is set.
    pub fn spawn_webhooks(&self, config: &SchedulerConfig, links: &Links) -> anyhow::Result<()> {
        if config.webhooks.targets.is_empty() {
            return Ok(());
        }
        let webhooks = AlertWebhooks::new(
            config.webhooks.clone(),
            links.topology.clone(),
            self.metrics.clone(),
            self.signals.webhooks.clone(),
        )
        .map_err(anyhow::Error::msg)?;
        let shutdown = self.shutdown.clone();
        self.supervisor.spawn("alert_webhooks", move || {
            let (webhooks, shutdown) = (webhooks.clone(), shutdown.clone());
            async move {
                webhooks.run(shutdown).await?;
                anyhow::Ok(())
            }
        });
        Ok(())
    }

    /// Serves the HTTP API and the console when `--http-addr` is set.
    pub async fn serve_http(
        &self,
        config: &SchedulerConfig,
        api: &Api,
    ) -> anyhow::Result<Option<SocketAddr>> {
        let Some(web) = config.web.clone() else {
            return Ok(None);
        };
        let addr = web.addr;
        let (bound, task) =
            crate::intake::web::serve(web.clone(), api.clone(), self.drained.clone())
                .await
                .with_context(|| format!("cannot serve the HTTP API on {addr}"))?;
        self.tracker.spawn(async move {
            let _ = task.await;
        });
        if web.open {
            // Printed for the one person who started it: the token is the
            // only key to an open console.
            tracing::info!(
                console = %web.open_link(bound),
                "the console, opened by the token in its address (--http-open)"
            );
        }
        Ok(Some(bound))
    }
}

/// The services that serve a subscription or a consumer, with what their
/// first runs use: subscribed, and confirmed by the server, before the
/// replica reports ready, so a request sent the moment start returns finds
/// a responder. Later runs (after a failure) subscribe again.
pub(crate) struct Streaming {
    starts: Starts,
    finishes: Finishes,
    api: Api,
    submit: Submit,
    slicer: Arc<Slicer>,
    publisher: Publisher,
    done: tokio::sync::mpsc::UnboundedReceiver<Arc<str>>,
    topology: Topology,
    start_requests: FirstRun<StartRequests>,
    api_requests: FirstRun<async_nats::Subscriber>,
    finished_consumer: FirstRun<PullConsumer>,
    submit_consumer: FirstRun<PullConsumer>,
}

impl Streaming {
    pub async fn new(
        config: &SchedulerConfig,
        links: &Links,
        parts: &Parts,
        api: Api,
        clock: &ClockMonitor,
    ) -> anyhow::Result<Streaming> {
        let (nats, store, metrics) = (&links.nats, &links.store, &parts.metrics);
        let starts = Starts {
            config: config.starts.clone(),
            unstarted: parts.unstarted.clone(),
            replies: parts.replies.clone(),
            alerts: parts.alerts.clone(),
            store: store.clone(),
            nats: nats.client.clone(),
            jetstream: nats.jetstream.clone(),
            subjects: nats.subjects.clone(),
            metrics: metrics.clone(),
        };
        let finishes = Finishes {
            config: config.finishes.clone(),
            finished: parts.signals.finished.clone(),
            immediate: parts.immediate.clone(),
            job_changes: parts.job_changes.clone(),
            alerts: parts.alerts.clone(),
            store: store.clone(),
            jetstream: nats.jetstream.clone(),
            subjects: nats.subjects.clone(),
            metrics: metrics.clone(),
        };
        let submit = Submit {
            config: config.submit.clone(),
            store: store.clone(),
            jetstream: nats.jetstream.clone(),
            subjects: nats.subjects.clone(),
            metrics: metrics.clone(),
        };
        let (progress, done) = SliceProgress::new();
        let slicer = Slicer::new(
            config.slicer.clone(),
            config.replica_id.clone(),
            store.clone(),
            links.slices.clone(),
            parts.wheel.clone(),
            progress.clone(),
            metrics.clone(),
        )
        .with_clock(clock.status())
        .with_alerts(parts.alerts.clone());
        let publisher = Publisher {
            config: config.publisher.clone(),
            jetstream: nats.jetstream.clone(),
            nats: nats.client.clone(),
            subjects: nats.subjects.clone(),
            store: store.clone(),
            wheel: parts.wheel.clone(),
            progress,
            metrics: metrics.clone(),
            unstarted: parts.unstarted.clone(),
        };
        let start_requests = first_run(starts.subscribe().await?);
        let api_requests = first_run(api.subscribe().await?);
        let finished_consumer = first_run(finished_consumer_of(&links.topology).await?);
        let submit_consumer = first_run(submit_consumer_of(&links.topology).await?);
        confirm_subscriptions(&nats.jetstream)
            .await
            .context("cannot reach NATS to confirm subscriptions")?;
        Ok(Streaming {
            starts,
            finishes,
            api,
            submit,
            slicer: Arc::new(slicer),
            publisher,
            done,
            topology: links.topology.clone(),
            start_requests,
            api_requests,
            finished_consumer,
            submit_consumer,
        })
    }

    /// Spawns each under the supervisor. Starts and finishes are served
    /// until the wheel has drained: workers still start what this replica
    /// publishes.
    pub fn spawn(self, config: &SchedulerConfig, parts: &Parts) {
        let supervisor = &parts.supervisor;
        let Streaming {
            starts,
            finishes,
            api,
            submit,
            slicer,
            publisher,
            done,
            topology,
            start_requests,
            api_requests,
            finished_consumer,
            submit_consumer,
        } = self;
        let (shutdown, drained) = (parts.shutdown.clone(), parts.drained.clone());
        supervisor.spawn("starts", {
            let drained = drained.clone();
            move || {
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
            }
        });
        supervisor.spawn("finishes", {
            let (drained, topology) = (drained.clone(), topology.clone());
            move || {
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
            }
        });
        supervisor.spawn("api", {
            let shutdown = shutdown.clone();
            move || {
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
            }
        });
        supervisor.spawn("submit", {
            let shutdown = shutdown.clone();
            move || {
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
            }
        });
        supervisor.spawn("slicer", {
            let (shutdown, drained) = (shutdown.clone(), drained.clone());
            let done = Arc::new(tokio::sync::Mutex::new(done));
            move || {
                let (slicer, done) = (slicer.clone(), done.clone());
                let (shutdown, drained) = (shutdown.clone(), drained.clone());
                async move {
                    let mut done = done.lock_owned().await;
                    slicer.run(&mut done, shutdown, drained).await;
                    anyhow::Ok(())
                }
            }
        });
        let drain = config.shutdown_drain;
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
}

/// How a periodic service runs in a replica.
struct PeriodicSpec {
    /// Its name in metrics and `/healthz`, and its lease's key.
    name: &'static str,
    /// One replica at a time runs it, under a lease of this time to live.
    leased: fn(&SchedulerConfig) -> Option<Duration>,
    /// How often it runs.
    every: fn(&SchedulerConfig) -> Duration,
    /// A failed pass counts in `chime_store_errors_total{op=<name>}`.
    store_errors: bool,
    /// The lease's holder is the replica the `chime_leader` gauge names.
    leader_gauge: bool,
    /// Runs at once when woken (by firings staged outside a slice), not
    /// only at its interval.
    woken: bool,
}

/// The periodic services, in the order they start.
const PERIODIC: [PeriodicSpec; 11] = [
    PeriodicSpec {
        name: "expiry",
        leased: |c| Some(c.expiry.lease_ttl),
        every: |c| c.expiry.interval,
        store_errors: false,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "republish",
        leased: |c| Some(c.republish.lease_ttl),
        every: |c| c.republish.interval,
        store_errors: false,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "housekeeping",
        leased: |c| Some(c.housekeeping.lease_ttl),
        every: |c| c.housekeeping.interval,
        store_errors: true,
        leader_gauge: true,
        woken: false,
    },
    PeriodicSpec {
        name: "checkpoint",
        leased: |_| None,
        every: |c| c.checkpoint.interval,
        store_errors: true,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "maintenance",
        leased: |c| Some(c.maintenance.lease_ttl),
        every: |c| c.maintenance.interval,
        store_errors: true,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "limit_release",
        leased: |c| Some(c.limit_release.lease_ttl),
        every: |c| c.limit_release.interval,
        store_errors: true,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "immediate",
        leased: |_| None,
        every: |c| c.immediate.interval,
        store_errors: true,
        leader_gauge: false,
        woken: true,
    },
    PeriodicSpec {
        name: "offers",
        leased: |_| None,
        every: |c| c.offers.interval,
        store_errors: true,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "clock",
        leased: |_| None,
        every: |c| c.clock.interval,
        store_errors: false,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "consumers",
        leased: |_| None,
        every: |c| c.consumers.interval,
        store_errors: false,
        leader_gauge: false,
        woken: false,
    },
    PeriodicSpec {
        name: "job_metrics",
        leased: |_| None,
        every: |c| c.job_metrics.tick.min(c.job_metrics.interval),
        store_errors: true,
        leader_gauge: false,
        woken: false,
    },
];

/// The services whose first pass runs during start-up, before the
/// replica reports ready.
pub(crate) struct FirstPassed {
    pub clock: Arc<ClockMonitor>,
    pub offers: Arc<Offers>,
    pub consumers: Arc<Consumers>,
    pub job_metrics: Arc<JobMetrics>,
}

/// Spawns every periodic service of [`PERIODIC`] (the checkpointer on
/// SQLite only); the clock monitor, the consumers service, the per-job
/// gauges and the offers ran their first pass during start-up.
pub(crate) fn spawn_periodic_services(
    config: &SchedulerConfig,
    links: &Links,
    parts: &Parts,
    first: FirstPassed,
) {
    let (store, metrics, signals) = (&links.store, &parts.metrics, &parts.signals);
    let spawner = Spawner {
        config,
        links,
        parts,
    };
    let spec = |name: &str| {
        PERIODIC
            .iter()
            .find(|spec| spec.name == name)
            .expect("every periodic service is in the table")
    };
    spawner.spawn(
        spec("expiry"),
        ExpiryMonitor::new(
            config.expiry.clone(),
            store.clone(),
            links.workers.clone(),
            links.nats.clone(),
            parts.alerts.clone(),
            parts.immediate.clone(),
            metrics.clone(),
        )
        .with_job_changes(parts.job_changes.clone()),
        signals.expiry.clone(),
    );
    spawner.spawn(
        spec("republish"),
        Republisher::new(
            config.republish.clone(),
            store.clone(),
            links.workers.clone(),
            links.nats.clone(),
            parts.alerts.clone(),
            metrics.clone(),
        ),
        signals.republish.clone(),
    );
    spawner.spawn(
        spec("housekeeping"),
        Housekeeping::new(
            config.housekeeping.clone(),
            store.clone(),
            parts.wheel.clone(),
            metrics.clone(),
        ),
        signals.housekeeping.clone(),
    );
    if store.backend() == Backend::Sqlite {
        spawner.spawn(
            spec("checkpoint"),
            Checkpointer {
                config: config.checkpoint.clone(),
                store: store.clone(),
            },
            signals.checkpoint.clone(),
        );
    }
    spawner.spawn(
        spec("maintenance"),
        MaintenanceWindows {
            config: config.maintenance.clone(),
            store: store.clone(),
        },
        signals.maintenance.clone(),
    );
    spawner.spawn(
        spec("limit_release"),
        LimitRelease {
            config: config.limit_release.clone(),
            store: store.clone(),
            immediate: parts.immediate.clone(),
        },
        signals.limit_release.clone(),
    );
    spawner.spawn(
        spec("immediate"),
        Immediate::new(
            config.immediate.clone(),
            config.slicer.slice,
            store.clone(),
            parts.wheel.clone(),
        ),
        signals.immediate.clone(),
    );
    spawner.spawn_arc(spec("offers"), first.offers, signals.offers.clone());
    spawner.spawn_arc(spec("clock"), first.clock, signals.clock.clone());
    spawner.spawn_arc(
        spec("consumers"),
        first.consumers,
        signals.consumers.clone(),
    );
    spawner.spawn_arc(
        spec("job_metrics"),
        first.job_metrics,
        signals.job_metrics.clone(),
    );
}

/// Spawns periodic services as their [`PeriodicSpec`] says.
struct Spawner<'a> {
    config: &'a SchedulerConfig,
    links: &'a Links,
    parts: &'a Parts,
}

impl Spawner<'_> {
    fn spawn<S: Service>(
        &self,
        spec: &PeriodicSpec,
        service: S,
        signal: TestSignal<Pass<S::Outcome>>,
    ) {
        self.spawn_arc(spec, Arc::new(service), signal);
    }

    fn spawn_arc<S: Service>(
        &self,
        spec: &PeriodicSpec,
        service: Arc<S>,
        signal: TestSignal<Pass<S::Outcome>>,
    ) {
        let parts = self.parts;
        let mut periodic = Periodic::new(
            spec.name,
            service,
            PeriodicConfig::every((spec.every)(self.config)),
        )
        .with_signal(signal);
        if let Some(ttl) = (spec.leased)(self.config) {
            let mut lease = Lease::new(
                self.links.leases.clone(),
                spec.name,
                self.config.replica_id.clone(),
                ttl,
            );
            if spec.leader_gauge {
                lease = lease.with_gauge(parts.metrics.leader.clone());
            }
            periodic = periodic.with_lease(Arc::new(lease));
        }
        if spec.woken {
            periodic = periodic.with_wake(parts.immediate.clone());
        }
        if spec.store_errors {
            let (errors, name) = (parts.metrics.store_errors.clone(), spec.name);
            periodic = periodic.on_failure(move |_| errors.with_label_values(&[name]).inc());
        }
        parts.supervisor.spawn_periodic(periodic);
    }
}

/// What a service's first run uses (made before the replica reports ready);
/// later runs make their own.
type FirstRun<T> = Arc<Mutex<Option<T>>>;

fn first_run<T>(initial: T) -> FirstRun<T> {
    Arc::new(Mutex::new(Some(initial)))
}

fn take<T>(first: &Mutex<Option<T>>) -> Option<T> {
    first.lock().unwrap_or_else(|p| p.into_inner()).take()
}

async fn submit_consumer_of(topology: &Topology) -> Result<PullConsumer, TopologyError> {
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

/// The replicas' shared durable consumer of finished events. Its name is
/// part of every deployment's JetStream state: another name would be a new
/// consumer, and the old one's unapplied events would stay behind.
pub async fn finished_consumer_of(topology: &Topology) -> Result<PullConsumer, TopologyError> {
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
