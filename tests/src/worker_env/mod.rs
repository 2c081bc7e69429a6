//! The world a worker runs in, without a scheduler: a NATS server with
//! Chime's topology ([`Env`]), the group's consumers, a stand-in start
//! service ([`Responder`]), a reader of finished events ([`Events`]) and a
//! publisher of firing messages ([`TestFiring`]). The `worker_*` suites use
//! it to drive a worker through exactly the messages of docs/PROTOCOL.md.

mod finished_events;
mod start_stand_in;
mod test_firing;

pub use finished_events::Events;
pub use start_stand_in::{Responder, ResponderMode};
pub use test_firing::{publish, TestFiring};

use crate::{init_tracing, NatsServer};
use async_nats::jetstream;
use async_nats::Client;
use chime_common::{FiringId, Subjects};
use chime_runtime::topology::{Topology, TopologyConfig};
use chime_worker::{Worker, WorkerBuilder};
use std::time::Duration;

/// A NATS server with Chime's streams and buckets, and a client on it.
pub struct Env {
    pub nats: NatsServer,
    pub client: Client,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub topology: Topology,
}

/// Topology settings for tests: redeliveries after 5 s instead of 30 s.
pub fn test_topology() -> TopologyConfig {
    TopologyConfig {
        fire_ack_wait: Duration::from_secs(5),
        ..TopologyConfig::default()
    }
}

impl Env {
    pub async fn start() -> Env {
        init_tracing();
        let nats = NatsServer::start().await;
        let client = nats.connect().await;
        let jetstream = jetstream::new(client.clone());
        let subjects = Subjects::default();
        let topology = Topology::new(jetstream.clone(), subjects.clone(), test_topology());
        topology.ensure().await.expect("topology");
        Env {
            nats,
            client,
            jetstream,
            subjects,
            topology,
        }
    }

    /// Creates `group`'s consumers, as a scheduler would (workers only wait for them).
    pub async fn create_group_consumers(&self, group: &str) {
        crate::create_group_consumers(
            &self.jetstream,
            &self.subjects,
            &self.topology.config,
            group,
        )
        .await;
    }

    /// A worker builder on a fresh connection, with test timings, and the
    /// group's consumers created.
    pub async fn worker(&self, group: &str, threads: usize) -> WorkerBuilder {
        self.create_group_consumers(group).await;
        Worker::builder()
            .nats(self.nats.connect().await)
            .group(group)
            .threads(threads)
            .topology_config(test_topology())
            .poll_interval(Duration::from_millis(250))
            .heartbeat_interval(Duration::from_secs(1))
    }

    /// Starts the stand-in start service.
    pub async fn responder(&self) -> Responder {
        Responder::start(
            self.nats.connect().await,
            &self.subjects,
            ResponderMode::Accept,
        )
        .await
    }

    /// Reads finished events.
    pub async fn events(&self) -> Events {
        Events::open(&self.topology).await
    }

    /// Publishes a firing and waits for JetStream's ack.
    pub async fn publish(&self, firing: &TestFiring) -> FiringId {
        publish(&self.jetstream, &self.subjects, firing).await
    }

    /// Rings the group's doorbell.
    pub async fn ring(&self, group: &str) {
        self.client
            .publish(self.subjects.ready(group), "".into())
            .await
            .expect("doorbell");
        self.client.flush().await.expect("flush");
    }
}
