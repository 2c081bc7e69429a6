//! Shared by the `worker_*` suites: a NATS server with Chime's topology, a
//! stand-in for the scheduler's start service, a reader of finished events,
//! and a publisher of firing messages with the contract's headers.
//!
//! The stand-in accepts the first start of each firing id, accepts a repeated
//! start from the same worker (idempotent, like the real scheduler) and
//! refuses a start by any other worker (`already_started`).

#![allow(dead_code)]

use async_nats::jetstream::{self, consumer::PullConsumer};
use async_nats::{Client, HeaderMap};
use chime_common::duration::format_time;
use chime_common::headers;
use chime_common::protocol::{Finished, Outcome, StartRefusal, StartReply, StartRequest};
use chime_common::topology::{Topology, TopologyConfig};
use chime_common::{Band, FiringId, Subjects};
use chime_tests::{init_tracing, NatsServer};
use chime_worker::{Worker, WorkerBuilder};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

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
        chime_tests::create_group_consumers(
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

/// What the stand-in does with a start request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponderMode {
    /// Like the scheduler: the first worker to ask gets the firing.
    Accept,
    /// Refuses everything with this reason.
    Refuse(StartRefusal),
    /// Answers every request with an API error of this code.
    Error(&'static str),
}

/// The stand-in for the scheduler's start service.
pub struct Responder {
    /// Firing id → the worker whose start was accepted.
    pub owners: Arc<Mutex<HashMap<FiringId, String>>>,
    /// Every start request, in order.
    pub requests: Arc<Mutex<Vec<StartRequest>>>,
    /// Deadline given per firing: `now + this` (default 30 s).
    pub run_for: Arc<Mutex<Duration>>,
    task: JoinHandle<()>,
}

impl Responder {
    pub async fn start(client: Client, subjects: &Subjects, mode: ResponderMode) -> Responder {
        let mut requests_sub = client
            .subscribe(subjects.worker_start_wildcard())
            .await
            .expect("subscribe");
        client.flush().await.expect("flush");
        let owners: Arc<Mutex<HashMap<FiringId, String>>> = Arc::default();
        let requests: Arc<Mutex<Vec<StartRequest>>> = Arc::default();
        let run_for = Arc::new(Mutex::new(Duration::from_secs(30)));
        let (o, r, d) = (owners.clone(), requests.clone(), run_for.clone());
        let task = tokio::spawn(async move {
            while let Some(message) = requests_sub.next().await {
                let Some(reply_to) = message.reply.clone() else {
                    continue;
                };
                let request: StartRequest =
                    serde_json::from_slice(&message.payload).expect("a StartRequest");
                r.lock().unwrap().push(request.clone());
                let reply = match mode {
                    ResponderMode::Error(code) => {
                        let error = serde_json::json!({"error": {"code": code, "message": "cannot decide"}});
                        let _ = client
                            .publish(reply_to, serde_json::to_vec(&error).unwrap().into())
                            .await;
                        continue;
                    }
                    ResponderMode::Refuse(why) => StartReply::refused(why),
                    ResponderMode::Accept => {
                        let mut owners = o.lock().unwrap();
                        let owner = owners
                            .entry(request.firing_id.clone())
                            .or_insert_with(|| request.worker_id.clone());
                        if *owner == request.worker_id {
                            let run_for = *d.lock().unwrap();
                            StartReply::accepted(
                                Utc::now() + chrono::Duration::from_std(run_for).unwrap(),
                            )
                        } else {
                            StartReply::refused(StartRefusal::AlreadyStarted)
                        }
                    }
                };
                let _ = client
                    .publish(reply_to, serde_json::to_vec(&reply).unwrap().into())
                    .await;
            }
        });
        Responder {
            owners,
            requests,
            run_for,
            task,
        }
    }

    /// Gives every run accepted from now on `run_for` until its deadline.
    pub fn set_run_for(&self, run_for: Duration) {
        *self.run_for.lock().unwrap() = run_for;
    }

    pub fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads `chime.events.finished` through a durable consumer (acking each).
pub struct Events {
    consumer: PullConsumer,
    pub seen: Vec<Finished>,
}

impl Events {
    pub async fn open(topology: &Topology) -> Events {
        let subjects = &topology.subjects;
        let consumer = topology
            .durable(
                &subjects.events_stream(),
                "worker_tests_finished",
                vec![subjects.finished(), subjects.finished_wildcard()],
                Duration::from_secs(30),
            )
            .await
            .expect("events consumer");
        Events {
            consumer,
            seen: Vec::new(),
        }
    }

    /// Reads what arrived within `wait`, keeps it in `seen`, returns how many.
    pub async fn poll(&mut self, wait: Duration) -> usize {
        let batch = self
            .consumer
            .fetch()
            .max_messages(1000)
            .expires(wait)
            .messages()
            .await;
        let Ok(mut batch) = batch else {
            tokio::time::sleep(wait).await;
            return 0;
        };
        let mut n = 0;
        while let Some(Ok(message)) = batch.next().await {
            let finished: Finished =
                serde_json::from_slice(&message.payload).expect("a Finished event");
            let expected_id = format!("finished:{}", finished.firing_id);
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get(headers::NATS_MSG_ID))
                .map(|v| v.as_str().to_string());
            assert_eq!(
                id.as_deref(),
                Some(expected_id.as_str()),
                "Nats-Msg-Id of a finished event"
            );
            let _ = message.ack().await;
            self.seen.push(finished);
            n += 1;
        }
        n
    }

    /// Reads until at least `n` events were seen in total; panics after `timeout`.
    pub async fn wait_for(&mut self, n: usize, timeout: Duration) -> &[Finished] {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.seen.len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {n} finished events after {timeout:?}: {:#?}",
                self.seen.len(),
                self.seen
            );
            self.poll(Duration::from_millis(500)).await;
        }
        &self.seen
    }

    /// The event of `id`, waiting for it up to `timeout`.
    pub async fn of(&mut self, id: &FiringId, timeout: Duration) -> Finished {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(event) = self.seen.iter().find(|e| &e.firing_id == id) {
                return event.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no finished event for {id} after {timeout:?}; seen: {:#?}",
                self.seen
            );
            self.poll(Duration::from_millis(500)).await;
        }
    }

    /// Events per firing id.
    pub fn counts(&self) -> HashMap<FiringId, usize> {
        let mut counts = HashMap::new();
        for event in &self.seen {
            *counts.entry(event.firing_id.clone()).or_insert(0) += 1;
        }
        counts
    }

    pub fn outcome_of(&self, id: &FiringId) -> Option<Outcome> {
        self.seen
            .iter()
            .find(|e| &e.firing_id == id)
            .map(|e| e.outcome)
    }
}

static NEXT_MS: AtomicU64 = AtomicU64::new(1_800_000_000_000);

/// A firing message to publish.
#[derive(Clone, Debug)]
pub struct TestFiring {
    pub group: String,
    pub job_id: String,
    pub scheduled_ms: i64,
    pub attempt: u32,
    pub handler: String,
    pub priority: u8,
    pub payload: serde_json::Value,
    pub timeout: Duration,
}

impl TestFiring {
    /// A firing of `job_id` for `handler` in `group`, priority 5, a fresh instant.
    pub fn new(group: &str, job_id: &str, handler: &str) -> TestFiring {
        TestFiring {
            group: group.into(),
            job_id: job_id.into(),
            scheduled_ms: NEXT_MS.fetch_add(1000, Ordering::Relaxed) as i64,
            attempt: 1,
            handler: handler.into(),
            priority: 5,
            payload: serde_json::json!({}),
            timeout: Duration::from_secs(60),
        }
    }

    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn id(&self) -> FiringId {
        FiringId::new(self.job_id.clone(), self.scheduled_ms, self.attempt)
    }

    pub fn scheduled_at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.scheduled_ms).unwrap()
    }

    /// The contract's headers.
    pub fn headers(&self) -> HeaderMap {
        let id = self.id().to_string();
        let now = Utc::now();
        let mut h = HeaderMap::new();
        h.insert(headers::NATS_MSG_ID, id.as_str());
        h.insert(headers::FIRING_ID, id.as_str());
        h.insert(headers::JOB_ID, self.job_id.as_str());
        h.insert(headers::HANDLER, self.handler.as_str());
        h.insert(
            headers::SCHEDULED_AT,
            format_time(self.scheduled_at()).as_str(),
        );
        h.insert(headers::DUE_AT, format_time(now).as_str());
        h.insert(headers::ATTEMPT, self.attempt.to_string().as_str());
        h.insert(headers::PRIORITY, self.priority.to_string().as_str());
        let deadline = now + chrono::Duration::from_std(self.timeout).unwrap();
        h.insert(headers::DEADLINE, format_time(deadline).as_str());
        h.insert(
            headers::TIMEOUT_MS,
            self.timeout.as_millis().to_string().as_str(),
        );
        h
    }
}

/// Publishes `firing` on `chime.fire.<group>.<band>` and waits for the ack.
pub async fn publish(
    js: &jetstream::Context,
    subjects: &Subjects,
    firing: &TestFiring,
) -> FiringId {
    let subject = subjects.fire(&firing.group, Band::of_priority(firing.priority));
    let body = serde_json::to_vec(&firing.payload).unwrap();
    js.publish_with_headers(subject, firing.headers(), body.into())
        .await
        .expect("publish")
        .await
        .expect("publish ack");
    firing.id()
}

#[allow(unused_imports)]
pub use chime_tests::eventually;
