//! Streams, KV buckets and consumers, with explicit settings.
//!
//! Schedulers own the topology: [`Topology::ensure`] (at a scheduler's
//! start-up) creates every stream and bucket that is missing and brings the
//! settings of existing ones in line with the configuration (replicas,
//! duplicate window, age and size limits, discard policy), or fails naming
//! the stream and the setting JetStream cannot change (retention, storage).
//! Consumers are reconciled the same way. Workers only wait for what the
//! schedulers create. Settings are explicit (never the server's defaults).
//!
//! Every stream is bounded (`max_age`, `max_bytes`, `max_msgs`). The firing
//! and event streams discard *new* messages when full: a publish is refused
//! (the scheduler keeps the firing staged, retries it and raises a
//! `stream_full` alert) rather than an unconsumed firing being dropped.

use async_nats::jetstream::{self, consumer, kv, stream};
use chime_common::band::Band;
use chime_common::subjects::Subjects;
use std::time::Duration;

/// Settings of the NATS objects.
#[derive(Debug, Clone)]
pub struct TopologyConfig {
    /// Replicas of every stream and bucket (3 on a JetStream cluster).
    pub replicas: usize,
    /// JetStream's duplicate window on the firing stream: a second publish of
    /// a firing id inside it is dropped. Covers slice takeover; larger costs server memory.
    pub duplicate_window: Duration,
    /// Oldest unconsumed firing kept (a group without workers must not grow forever).
    pub fire_max_age: Duration,
    /// How long worker events and submissions are kept if unconsumed.
    pub events_max_age: Duration,
    /// Worker heartbeat keys expire after this long without a beat (15 s).
    /// It bounds how long the heartbeat bucket may be without a leader
    /// before workers fence: kill -9 of its leader on a three-node cluster
    /// left it up to 7.1 s without an acknowledged write (measured,
    /// tests/tests/heartbeat_election.rs; JetStream elects within 4 to 9 s
    /// of silence), and a worker's lease is this minus its fence margin
    /// (2 s), which must cover that, one heartbeat interval (2 s) and one
    /// retry (1.5 s). See docs/OPERATIONS.md, "Heartbeats and elections".
    pub worker_ttl: Duration,
    /// Slice claims are kept this long (they only matter around their slice).
    pub slice_ttl: Duration,
    /// How long JetStream waits for an ack before redelivering a firing.
    pub fire_ack_wait: Duration,
    /// Unacknowledged firings one (group, band) consumer may have out at once.
    pub fire_max_ack_pending: i64,
    /// Size limits of the firing stream; when reached, new firings are
    /// refused (discard new) until workers consume some.
    pub fire_max_bytes: i64,
    pub fire_max_msgs: i64,
    /// Size limits of the worker event stream (discard new: a worker's
    /// publish fails and it retries).
    pub events_max_bytes: i64,
    pub events_max_msgs: i64,
    /// Size limits of the submission, alert and dead-letter streams, which
    /// keep history: the oldest messages go first.
    pub history_max_bytes: i64,
    pub history_max_msgs: i64,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            fire_max_age: Duration::from_secs(7 * 24 * 3600),
            events_max_age: Duration::from_secs(7 * 24 * 3600),
            worker_ttl: Duration::from_secs(15),
            slice_ttl: Duration::from_secs(600),
            fire_ack_wait: Duration::from_secs(30),
            fire_max_ack_pending: 20_000,
            // JetStream reserves each stream's max_bytes on its disk at
            // creation: the defaults (704 MiB in all) fit a small server.
            fire_max_bytes: 256 * 1024 * 1024,
            fire_max_msgs: 1_000_000,
            events_max_bytes: 256 * 1024 * 1024,
            events_max_msgs: 1_000_000,
            history_max_bytes: 64 * 1024 * 1024,
            history_max_msgs: 100_000,
        }
    }
}

/// How long an alert consumer lives without a pull (see [`Topology::alert_consumer`]).
pub const ALERT_CONSUMER_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Alerts one alert consumer may have out, unacknowledged, at once.
pub const ALERT_CONSUMER_MAX_ACK_PENDING: i64 = 1_000;

/// Handles to Chime's NATS objects.
#[derive(Clone)]
pub struct Topology {
    pub subjects: Subjects,
    pub config: TopologyConfig,
    pub jetstream: jetstream::Context,
}

/// A failure to create or open a stream, bucket or consumer.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up {what}: {source}")]
pub struct TopologyError {
    what: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// An existing object has a setting JetStream cannot change.
#[derive(Debug, thiserror::Error)]
#[error("setting `{setting}` is {found} on the server but {wanted} in the configuration, and JetStream cannot change it; delete the object (its messages are lost) or change the configuration")]
struct Immutable {
    setting: &'static str,
    found: String,
    wanted: String,
}

fn immutable(
    what: String,
    setting: &'static str,
    found: impl std::fmt::Debug,
    wanted: impl std::fmt::Debug,
) -> TopologyError {
    TopologyError {
        what,
        source: Box::new(Immutable {
            setting,
            found: format!("{found:?}"),
            wanted: format!("{wanted:?}"),
        }),
    }
}

fn fail<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> TopologyError {
    let what = what.into();
    move |e| TopologyError {
        what,
        source: Box::new(e),
    }
}

impl Topology {
    /// Wraps a JetStream context.
    pub fn new(jetstream: jetstream::Context, subjects: Subjects, config: TopologyConfig) -> Self {
        Topology {
            subjects,
            config,
            jetstream,
        }
    }

    /// Creates every stream and bucket that does not exist yet and updates
    /// the settings of those that differ from the configuration.
    pub async fn ensure(&self) -> Result<(), TopologyError> {
        let s = &self.subjects;
        let c = &self.config;
        // Streams that keep history: bounded by age, count and size, the
        // oldest dropped first.
        let history = |name: String, subjects: Vec<String>| stream::Config {
            name,
            subjects,
            retention: stream::RetentionPolicy::Limits,
            duplicate_window: c.duplicate_window,
            max_age: c.events_max_age,
            max_bytes: c.history_max_bytes,
            max_messages: c.history_max_msgs,
            discard: stream::DiscardPolicy::Old,
            num_replicas: c.replicas,
            ..Default::default()
        };
        let streams = [
            stream::Config {
                name: s.fire_stream(),
                subjects: vec![s.fire_wildcard()],
                // Acked firings are gone: the executing table, not the stream, owns them.
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: c.duplicate_window,
                max_age: c.fire_max_age,
                max_bytes: c.fire_max_bytes,
                max_messages: c.fire_max_msgs,
                discard: stream::DiscardPolicy::New,
                num_replicas: c.replicas,
                ..Default::default()
            },
            stream::Config {
                name: s.events_stream(),
                subjects: vec![s.events_wildcard()],
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: c.duplicate_window,
                max_age: c.events_max_age,
                max_bytes: c.events_max_bytes,
                max_messages: c.events_max_msgs,
                discard: stream::DiscardPolicy::New,
                num_replicas: c.replicas,
                ..Default::default()
            },
            history(s.submit_stream(), vec![s.submit(), s.submit_rejected()]),
            history(s.alerts_stream(), vec![s.alerts()]),
            // Dead letters wait for an operator (docs/OPERATIONS.md, "Dead letters").
            history(s.dead_stream(), vec![s.dead_wildcard()]),
        ];
        for config in streams {
            self.reconcile_stream(config).await?;
        }
        self.slices().await?;
        self.workers().await?;
        self.leases().await?;
        Ok(())
    }

    /// Creates `config`'s stream, or updates the settings Chime manages of
    /// the existing one; fails naming a setting JetStream cannot change.
    async fn reconcile_stream(&self, wanted: stream::Config) -> Result<(), TopologyError> {
        let what = format!("stream {}", wanted.name);
        let stream = self
            .jetstream
            .get_or_create_stream(wanted.clone())
            .await
            .map_err(fail(what.clone()))?;
        let found = &stream.cached_info().config;
        if found.retention != wanted.retention {
            return Err(immutable(
                what,
                "retention",
                found.retention,
                wanted.retention,
            ));
        }
        if found.storage != wanted.storage {
            return Err(immutable(what, "storage", found.storage, wanted.storage));
        }
        let mut updated = found.clone();
        updated.subjects = wanted.subjects;
        updated.num_replicas = wanted.num_replicas;
        updated.duplicate_window = wanted.duplicate_window;
        updated.max_age = wanted.max_age;
        updated.max_bytes = wanted.max_bytes;
        updated.max_messages = wanted.max_messages;
        updated.discard = wanted.discard;
        self.update_stream(what, found, updated).await
    }

    /// Sends `updated` if it differs from `found`, logging what changes.
    async fn update_stream(
        &self,
        what: String,
        found: &stream::Config,
        updated: stream::Config,
    ) -> Result<(), TopologyError> {
        if *found == updated {
            return Ok(());
        }
        tracing::info!(
            object = %what,
            replicas = ?(found.num_replicas, updated.num_replicas),
            duplicate_window = ?(found.duplicate_window, updated.duplicate_window),
            max_age = ?(found.max_age, updated.max_age),
            max_bytes = ?(found.max_bytes, updated.max_bytes),
            max_msgs = ?(found.max_messages, updated.max_messages),
            discard = ?(found.discard, updated.discard),
            "updating settings that differ from the configuration (found, wanted)"
        );
        self.jetstream
            .update_stream(updated)
            .await
            .map_err(fail(what))?;
        Ok(())
    }

    /// Creates the bucket `name`, or updates the existing one's replicas,
    /// TTL and history.
    async fn bucket(
        &self,
        name: String,
        max_age: Duration,
        history: i64,
    ) -> Result<kv::Store, TopologyError> {
        let what = format!("bucket {name}");
        let store = match self.jetstream.get_key_value(&name).await {
            Ok(store) => store,
            Err(_) => self
                .jetstream
                .create_key_value(kv::Config {
                    bucket: name.clone(),
                    history,
                    max_age,
                    num_replicas: self.config.replicas,
                    ..Default::default()
                })
                .await
                .map_err(fail(what.clone()))?,
        };
        let found = &store.stream.cached_info().config;
        let mut updated = found.clone();
        updated.num_replicas = self.config.replicas;
        updated.max_age = max_age;
        updated.max_messages_per_subject = history;
        // JetStream refuses a duplicate window longer than the age limit
        // (a bucket's window defaults to its age limit, at most 2 min).
        if !max_age.is_zero() && updated.duplicate_window > max_age {
            updated.duplicate_window = max_age;
        }
        self.update_stream(what, found, updated).await?;
        Ok(store)
    }

    /// The time-slice claims bucket.
    pub async fn slices(&self) -> Result<kv::Store, TopologyError> {
        self.bucket(self.subjects.slices_bucket(), self.config.slice_ttl, 1)
            .await
    }

    /// The worker heartbeat bucket; a key vanishes `worker_ttl` after its last beat.
    pub async fn workers(&self) -> Result<kv::Store, TopologyError> {
        self.bucket(self.subjects.workers_bucket(), self.config.worker_ttl, 1)
            .await
    }

    /// The leases bucket (single-active services such as the expiry monitor).
    pub async fn leases(&self) -> Result<kv::Store, TopologyError> {
        self.bucket(self.subjects.leases_bucket(), Duration::ZERO, 1)
            .await
    }

    /// The durable pull consumer of one group and band, created if missing
    /// and updated if its settings differ (scheduler side).
    pub async fn fire_consumer(
        &self,
        group: &str,
        band: Band,
    ) -> Result<consumer::PullConsumer, TopologyError> {
        let name = self.subjects.fire_consumer(group, band);
        let config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: self.subjects.fire(group, band),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: self.config.fire_ack_wait,
            max_ack_pending: self.config.fire_max_ack_pending,
            max_deliver: -1,
            ..Default::default()
        };
        self.reconcile_consumer(&self.subjects.fire_stream(), config)
            .await
    }

    /// A durable pull consumer on the events or submit stream (scheduler
    /// side), created if missing and updated if its settings differ.
    pub async fn durable(
        &self,
        stream: &str,
        name: &str,
        mut filters: Vec<String>,
        ack_wait: Duration,
    ) -> Result<consumer::PullConsumer, TopologyError> {
        // One filter goes in `filter_subject`, as every consumer made before
        // several were needed has it; several in `filter_subjects`.
        let (filter_subject, filter_subjects) = match filters.len() {
            1 => (filters.remove(0), Vec::new()),
            _ => (String::new(), filters),
        };
        let config = consumer::pull::Config {
            durable_name: Some(name.to_string()),
            filter_subject,
            filter_subjects,
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait,
            max_deliver: -1,
            max_ack_pending: 10_000,
            ..Default::default()
        };
        self.reconcile_consumer(stream, config).await
    }

    /// A durable pull consumer of the alerts published from now on
    /// (scheduler side), shared by every replica that opens it under
    /// `name`: each alert is delivered to one of them at a time until it
    /// is acked. The server deletes it after `ALERT_CONSUMER_IDLE` without
    /// a pull (an alert webhook removed from every replica's settings).
    pub async fn alert_consumer(
        &self,
        name: &str,
        ack_wait: Duration,
    ) -> Result<consumer::PullConsumer, TopologyError> {
        let config = consumer::pull::Config {
            durable_name: Some(name.to_string()),
            filter_subject: self.subjects.alerts(),
            deliver_policy: consumer::DeliverPolicy::New,
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait,
            max_deliver: -1,
            max_ack_pending: ALERT_CONSUMER_MAX_ACK_PENDING,
            inactive_threshold: ALERT_CONSUMER_IDLE,
            ..Default::default()
        };
        self.reconcile_consumer(&self.subjects.alerts_stream(), config)
            .await
    }

    async fn reconcile_consumer(
        &self,
        stream: &str,
        wanted: consumer::pull::Config,
    ) -> Result<consumer::PullConsumer, TopologyError> {
        let name = wanted.durable_name.clone().unwrap_or_default();
        let what = format!("consumer {name}");
        let stream_handle = self
            .jetstream
            .get_stream(stream)
            .await
            .map_err(fail(format!("stream {stream}")))?;
        let mut consumer = stream_handle
            .get_or_create_consumer(&name, wanted.clone())
            .await
            .map_err(fail(what.clone()))?;
        let found = consumer.cached_info().config.clone();
        if found.ack_policy != wanted.ack_policy {
            return Err(immutable(
                what,
                "ack_policy",
                found.ack_policy,
                wanted.ack_policy,
            ));
        }
        let differs = found.filter_subject != wanted.filter_subject
            || found.filter_subjects != wanted.filter_subjects
            || found.ack_wait != wanted.ack_wait
            || found.max_ack_pending != wanted.max_ack_pending
            || found.max_deliver != wanted.max_deliver;
        if differs {
            tracing::info!(
                object = %what,
                filter = ?(&found.filter_subject, &wanted.filter_subject),
                filters = ?(&found.filter_subjects, &wanted.filter_subjects),
                ack_wait = ?(found.ack_wait, wanted.ack_wait),
                max_ack_pending = ?(found.max_ack_pending, wanted.max_ack_pending),
                max_deliver = ?(found.max_deliver, wanted.max_deliver),
                "updating settings that differ from the configuration (found, wanted)"
            );
            consumer = stream_handle
                .update_consumer(wanted)
                .await
                .map_err(fail(what))?;
        }
        Ok(consumer)
    }
}
