//! Streams, KV buckets and consumers, created idempotently with explicit settings.
//!
//! Schedulers and workers both call [`Topology::ensure`] at start-up, so
//! whichever starts first creates everything and the others find it. Settings
//! are explicit (never the server's defaults) and shared here so both sides
//! agree on them.

use crate::subjects::{Band, Subjects};
use async_nats::jetstream::{self, consumer, kv, stream};
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
    /// Worker heartbeat keys expire after this long without a beat.
    pub worker_ttl: Duration,
    /// Slice claims are kept this long (they only matter around their slice).
    pub slice_ttl: Duration,
    /// How long JetStream waits for an ack before redelivering a firing.
    pub fire_ack_wait: Duration,
    /// Unacknowledged firings one (group, band) consumer may have out at once.
    pub fire_max_ack_pending: i64,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            fire_max_age: Duration::from_secs(7 * 24 * 3600),
            events_max_age: Duration::from_secs(7 * 24 * 3600),
            worker_ttl: Duration::from_secs(6),
            slice_ttl: Duration::from_secs(600),
            fire_ack_wait: Duration::from_secs(30),
            fire_max_ack_pending: 20_000,
        }
    }
}

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

    /// Creates every stream and bucket that does not exist yet.
    pub async fn ensure(&self) -> Result<(), TopologyError> {
        let s = &self.subjects;
        let c = &self.config;
        let streams = [
            stream::Config {
                name: s.fire_stream(),
                subjects: vec![s.fire_wildcard()],
                // Acked firings are gone: the executing table, not the stream, owns them.
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: c.duplicate_window,
                max_age: c.fire_max_age,
                num_replicas: c.replicas,
                ..Default::default()
            },
            stream::Config {
                name: s.events_stream(),
                subjects: vec![s.events_wildcard()],
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: c.duplicate_window,
                max_age: c.events_max_age,
                num_replicas: c.replicas,
                ..Default::default()
            },
            stream::Config {
                name: s.submit_stream(),
                subjects: vec![s.submit(), s.submit_rejected()],
                retention: stream::RetentionPolicy::Limits,
                max_age: c.events_max_age,
                num_replicas: c.replicas,
                ..Default::default()
            },
            stream::Config {
                name: s.alerts_stream(),
                subjects: vec![s.alerts()],
                retention: stream::RetentionPolicy::Limits,
                max_age: c.events_max_age,
                num_replicas: c.replicas,
                ..Default::default()
            },
            // Dead letters wait for an operator; bounded by age, count and
            // size, the oldest dropped first (docs/OPERATIONS.md, "Dead letters").
            stream::Config {
                name: s.dead_stream(),
                subjects: vec![s.dead_wildcard()],
                retention: stream::RetentionPolicy::Limits,
                max_age: c.events_max_age,
                max_messages: 100_000,
                max_bytes: 1 << 30,
                discard: stream::DiscardPolicy::Old,
                duplicate_window: c.duplicate_window,
                num_replicas: c.replicas,
                ..Default::default()
            },
        ];
        for config in streams {
            let name = config.name.clone();
            self.jetstream
                .get_or_create_stream(config)
                .await
                .map_err(fail(format!("stream {name}")))?;
        }
        self.slices().await?;
        self.workers().await?;
        self.leases().await?;
        Ok(())
    }

    async fn bucket(
        &self,
        name: String,
        max_age: Duration,
        history: i64,
    ) -> Result<kv::Store, TopologyError> {
        if let Ok(store) = self.jetstream.get_key_value(&name).await {
            return Ok(store);
        }
        self.jetstream
            .create_key_value(kv::Config {
                bucket: name.clone(),
                history,
                max_age,
                num_replicas: self.config.replicas,
                ..Default::default()
            })
            .await
            .map_err(fail(format!("bucket {name}")))
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

    /// The durable pull consumer of one group and band, created if missing.
    pub async fn fire_consumer(
        &self,
        group: &str,
        band: Band,
    ) -> Result<consumer::PullConsumer, TopologyError> {
        let name = self.subjects.fire_consumer(group, band);
        let stream = self
            .jetstream
            .get_stream(self.subjects.fire_stream())
            .await
            .map_err(fail(format!("stream {}", self.subjects.fire_stream())))?;
        stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: self.subjects.fire(group, band),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: self.config.fire_ack_wait,
                    max_ack_pending: self.config.fire_max_ack_pending,
                    max_deliver: -1,
                    ..Default::default()
                },
            )
            .await
            .map_err(fail(format!("consumer {name}")))
    }

    /// A durable pull consumer on the events or submit stream (scheduler side).
    pub async fn durable(
        &self,
        stream: &str,
        name: &str,
        filter: String,
        ack_wait: Duration,
    ) -> Result<consumer::PullConsumer, TopologyError> {
        let stream_handle = self
            .jetstream
            .get_stream(stream)
            .await
            .map_err(fail(format!("stream {stream}")))?;
        stream_handle
            .get_or_create_consumer(
                name,
                consumer::pull::Config {
                    durable_name: Some(name.to_string()),
                    filter_subject: filter,
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait,
                    max_deliver: -1,
                    max_ack_pending: 10_000,
                    ..Default::default()
                },
            )
            .await
            .map_err(fail(format!("consumer {name}")))
    }
}
