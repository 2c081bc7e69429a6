//! The start and finish services with no replica around them, for tests that
//! drive one pass at a time or watch how it batches: NATS with Chime's
//! streams, a store, and the replicas' consumer of finished events, so what
//! a test publishes waits until the service pulls it.

use crate::NatsServer;
use async_nats::jetstream::{self, consumer::PullConsumer};
use chime_common::protocol::{Finished, Outcome};
use chime_common::{FiringId, Subjects};
use chime_runtime::topology::{Topology, TopologyConfig};
use chime_scheduler::intake::replies::Replies;
use chime_scheduler::nats::Nats;
use chime_scheduler::ops::alerts::Alerts;
use chime_scheduler::ops::metrics::Metrics;
use chime_scheduler::services::finished_consumer_of;
use chime_scheduler::store::{Store, StoreOptions};
use chime_scheduler::workers::finishes::{Finishes, FinishesConfig};
use chime_scheduler::workers::starts::{Starts, StartsConfig};
use chrono::Utc;

/// What [`Starts`] and [`Finishes`] run on, made ready.
pub struct StandaloneReports {
    pub client: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub topology: Topology,
    pub store: Store,
}

impl StandaloneReports {
    /// Connects a store to `database_url` and a client to `nats`, and makes
    /// Chime's streams and buckets there.
    pub async fn connect(nats: &NatsServer, database_url: &str) -> StandaloneReports {
        let store = Store::connect(database_url, StoreOptions::default())
            .await
            .expect("store");
        let client = nats.connect().await;
        let jetstream = jetstream::new(client.clone());
        let subjects = Subjects::default();
        let topology = Topology::new(
            jetstream.clone(),
            subjects.clone(),
            TopologyConfig::default(),
        );
        topology.ensure().await.expect("streams and buckets");
        StandaloneReports {
            client,
            jetstream,
            subjects,
            topology,
            store,
        }
    }

    /// The NATS handles of a service.
    pub fn nats(&self) -> Nats {
        Nats {
            client: self.client.clone(),
            jetstream: self.jetstream.clone(),
            subjects: self.subjects.clone(),
        }
    }

    /// Alerts counted in `metrics`.
    pub fn alerts(&self, metrics: &Metrics) -> Alerts {
        Alerts::new(
            self.jetstream.clone(),
            self.subjects.clone(),
            metrics.clone(),
        )
    }

    /// A start service with `config` and metrics of its own.
    pub fn starts(&self, config: StartsConfig) -> Starts {
        let metrics = Metrics::new();
        Starts {
            config,
            store: self.store.clone(),
            nats: self.client.clone(),
            jetstream: self.jetstream.clone(),
            subjects: self.subjects.clone(),
            replies: Replies::new(self.client.clone(), metrics.replies_refused.clone()),
            alerts: self.alerts(&metrics),
            metrics,
            unstarted: Default::default(),
        }
    }

    /// A finish service with `config` and metrics of its own.
    pub fn finishes(&self, config: FinishesConfig) -> Finishes {
        let metrics = Metrics::new();
        Finishes {
            config,
            store: self.store.clone(),
            jetstream: self.jetstream.clone(),
            subjects: self.subjects.clone(),
            alerts: self.alerts(&metrics),
            metrics,
            finished: Default::default(),
            immediate: Default::default(),
            job_changes: Default::default(),
        }
    }

    /// The consumer the replicas pull finished events from.
    pub async fn finished_consumer(&self) -> PullConsumer {
        finished_consumer_of(&self.topology)
            .await
            .expect("the finished events consumer")
    }

    /// Publishes the finished event a worker sends when `firing` succeeded
    /// on it, and waits until JetStream has stored it.
    pub async fn publish_succeeded(&self, firing: &FiringId, worker: &str) {
        let event = Finished {
            firing_id: firing.clone(),
            worker_id: worker.into(),
            outcome: Outcome::Succeeded,
            error: None,
            interrupted: None,
            output: None,
            started_at: Utc::now(),
            finished_at: Utc::now(),
        };
        let body = serde_json::to_vec(&event).expect("a finished event is JSON");
        self.jetstream
            .publish(self.subjects.finished(), body.into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
}
