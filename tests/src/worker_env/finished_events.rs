//! The finished events workers report, read as the scheduler reads them
//! (a durable consumer, each acked), checking each carries the contract's
//! `Nats-Msg-Id`.

use async_nats::jetstream::consumer::PullConsumer;
use chime_common::headers;
use chime_common::protocol::{Finished, Outcome};
use chime_common::FiringId;
use chime_runtime::topology::Topology;
use futures::StreamExt;
use std::collections::HashMap;
use std::time::Duration;

/// Reads `chime.events.finished` and the workers' own report subjects
/// (`chime.events.finished.<group>.<worker id>`) through a durable consumer
/// (acking each).
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
