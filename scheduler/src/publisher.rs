//! Publishes each firing at its instant: the wheel's run loop.
//!
//! Publishing is pipelined: the loop sends every due firing without waiting
//! for its ack, and a collector awaits the acks concurrently, marks acked
//! firings published in the store in batches, reports finished slices and
//! rings the group's doorbell so idle workers fetch at once. A publish that
//! fails goes back into the wheel; `Nats-Msg-Id` = firing id makes the retry
//! (or another replica's takeover) harmless inside the duplicate window.

use crate::claim::SliceProgress;
use crate::metrics::Metrics;
use crate::store::{StagedFiring, Store};
use crate::wheel::{Wheel, WheelEntry};
use async_nats::jetstream::{self, context::PublishAckFuture, message::PublishMessage};
use async_nats::HeaderMap;
use chime_common::duration::format_time;
use chime_common::{headers, Band, FiringId, Subjects};
use chrono::Utc;
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Publisher settings.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// Acked firings are marked published in batches of at most this many...
    pub mark_batch: usize,
    /// ...or at least this often.
    pub flush_interval: Duration,
    /// A failed publish is tried again after this long.
    pub retry_after: Duration,
    /// A group's doorbell rings at most this often (more acks in between ring at the next flush).
    pub doorbell_interval: Duration,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            mark_batch: 2_000,
            flush_interval: Duration::from_millis(20),
            retry_after: Duration::from_millis(250),
            doorbell_interval: Duration::from_millis(1),
        }
    }
}

impl PublisherConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        if self.mark_batch == 0 {
            return Err("publisher mark batch must be at least 1".into());
        }
        if self.flush_interval.is_zero() || self.retry_after.is_zero() {
            return Err("publisher intervals must be longer than zero".into());
        }
        Ok(())
    }
}

/// The wheel's publishing loop.
pub struct Publisher {
    pub config: PublisherConfig,
    pub jetstream: jetstream::Context,
    pub nats: async_nats::Client,
    pub subjects: Subjects,
    pub store: Store,
    pub wheel: Wheel,
    pub progress: SliceProgress,
    pub metrics: Metrics,
}

/// The `Nats-Msg-Id` of a firing: its id, suffixed by `~n` when a queued
/// firing is deliberately published again (n = publish_seq).
pub fn message_id(firing: &StagedFiring) -> String {
    if firing.publish_seq == 0 {
        firing.id.to_string()
    } else {
        format!("{}~{}", firing.id, firing.publish_seq)
    }
}

/// The headers of a firing message (CONTRACT.md, "Firing messages").
pub fn firing_headers(firing: &StagedFiring, now: chrono::DateTime<Utc>) -> HeaderMap {
    let mut h = HeaderMap::new();
    let deadline = now + chrono::Duration::milliseconds(firing.timeout.as_millis() as i64);
    h.insert(headers::NATS_MSG_ID, message_id(firing).as_str());
    h.insert(headers::FIRING_ID, firing.id.to_string().as_str());
    h.insert(headers::JOB_ID, firing.job_id.as_str());
    h.insert(headers::HANDLER, firing.handler.as_str());
    h.insert(
        headers::SCHEDULED_AT,
        format_time(firing.scheduled_at).as_str(),
    );
    h.insert(headers::DUE_AT, format_time(firing.due_at).as_str());
    h.insert(headers::ATTEMPT, firing.attempt.to_string().as_str());
    h.insert(headers::PRIORITY, firing.priority.to_string().as_str());
    h.insert(headers::DEADLINE, format_time(deadline).as_str());
    h.insert(
        headers::TIMEOUT_MS,
        firing.timeout.as_millis().to_string().as_str(),
    );
    h
}

struct Sent {
    entry: WheelEntry,
    ack: PublishAckFuture,
}

impl Publisher {
    /// Publishes every entry due at or before `now_ms`; returns how many were sent.
    /// The acks arrive on `acks`.
    async fn send_due(&self, now_ms: i64, acks: &mpsc::Sender<Sent>) -> usize {
        let due = self.wheel.pop_due(now_ms);
        let count = due.len();
        let mut failed = Vec::new();
        for entry in due {
            let now = Utc::now();
            let firing = &entry.firing;
            let lateness = (now - firing.due_at).num_microseconds().unwrap_or(0).max(0);
            let subject = self
                .subjects
                .fire(&firing.group, Band::of_priority(firing.priority));
            let body = serde_json::to_vec(&firing.payload).unwrap_or_else(|_| b"null".to_vec());
            let message = PublishMessage::build()
                .payload(body.into())
                .headers(firing_headers(firing, now));
            match self.jetstream.send_publish(subject, message).await {
                Ok(ack) => {
                    self.metrics.publish_lateness.observe(lateness as f64 / 1e6);
                    if acks.send(Sent { entry, ack }).await.is_err() {
                        return count;
                    }
                }
                Err(e) => {
                    tracing::warn!(firing_id = %firing.id, error = %e, "publish failed; will retry");
                    self.metrics.publish_errors.inc();
                    failed.push(entry);
                }
            }
        }
        if !failed.is_empty() {
            let retry_ms =
                Utc::now().timestamp_millis() + self.config.retry_after.as_millis() as i64;
            self.wheel.reinsert(failed, retry_ms);
        }
        count
    }

    /// Runs until `shutdown`, then publishes what the wheel still holds
    /// (at most `drain` long) so no claimed firing is left behind, and
    /// cancels `drained` when done.
    pub async fn run(
        self,
        shutdown: CancellationToken,
        drain: Duration,
        drained: CancellationToken,
    ) {
        let (tx, rx) = mpsc::channel::<Sent>(8_192);
        let collector = Collector {
            config: self.config.clone(),
            nats: self.nats.clone(),
            subjects: self.subjects.clone(),
            store: self.store.clone(),
            wheel: self.wheel.clone(),
            progress: self.progress.clone(),
            metrics: self.metrics.clone(),
        };
        let collecting = tokio::spawn(collector.run(rx));
        let mut draining_until: Option<tokio::time::Instant> = None;
        loop {
            let now_ms = Utc::now().timestamp_millis();
            if self.send_due(now_ms, &tx).await > 0 {
                continue;
            }
            if let Some(until) = draining_until {
                if self.wheel.is_empty() || tokio::time::Instant::now() >= until {
                    break;
                }
            }
            let wait = match self.wheel.next_due_ms() {
                Some(due) => Duration::from_millis((due - now_ms).clamp(0, 60_000) as u64),
                None => Duration::from_secs(60),
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wheel.changed() => {}
                _ = shutdown.cancelled(), if draining_until.is_none() => {
                    draining_until = Some(tokio::time::Instant::now() + drain);
                }
            }
        }
        drop(tx);
        let _ = collecting.await;
        if !self.wheel.is_empty() {
            tracing::warn!(
                left = self.wheel.len(),
                "publisher stopped with firings in the wheel; their slices will be taken over"
            );
        }
        drained.cancel();
    }
}

/// Awaits publish acks, marks firings published, reports slices, rings doorbells.
struct Collector {
    config: PublisherConfig,
    nats: async_nats::Client,
    subjects: Subjects,
    store: Store,
    wheel: Wheel,
    progress: SliceProgress,
    metrics: Metrics,
}

#[derive(Default)]
struct Acked {
    ids: Vec<FiringId>,
    slices: Vec<std::sync::Arc<str>>,
    unrung: HashSet<String>,
}

impl Collector {
    async fn run(self, mut sent: mpsc::Receiver<Sent>) {
        let mut inflight = FuturesUnordered::new();
        let mut acked = Acked::default();
        let mut rung: HashMap<String, tokio::time::Instant> = HashMap::new();
        let mut flush = tokio::time::interval(self.config.flush_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut open = true;
        loop {
            tokio::select! {
                next = sent.recv(), if open => match next {
                    Some(Sent { entry, ack }) => inflight.push(async move { let r = ack.await; (entry, r) }),
                    None => open = false,
                },
                Some((entry, result)) = inflight.next(), if !inflight.is_empty() => {
                    self.on_ack(entry, result, &mut acked, &mut rung).await;
                    if acked.ids.len() >= self.config.mark_batch {
                        self.flush(&mut acked).await;
                    }
                }
                _ = flush.tick() => self.flush(&mut acked).await,
            }
            if !open && inflight.is_empty() {
                break;
            }
        }
        // The store may be down: try for a while, then leave the rest
        // `staged`; housekeeping republishes them inside the dedup window,
        // where JetStream drops the copy.
        for _ in 0..50 {
            self.flush(&mut acked).await;
            if acked.ids.is_empty() {
                break;
            }
            tokio::time::sleep(self.config.flush_interval).await;
        }
    }

    async fn on_ack(
        &self,
        entry: WheelEntry,
        result: Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
        acked: &mut Acked,
        rung: &mut HashMap<String, tokio::time::Instant>,
    ) {
        let firing = &entry.firing;
        match result {
            Ok(ack) => {
                if ack.duplicate {
                    self.metrics.publish_duplicates.inc();
                }
                self.metrics
                    .firings_published
                    .with_label_values(&[firing.group.as_str()])
                    .inc();
                acked.ids.push(firing.id.clone());
                if let Some(slice) = &entry.slice {
                    acked.slices.push(slice.clone());
                }
                let now = tokio::time::Instant::now();
                let recently = rung
                    .get(&firing.group)
                    .is_some_and(|at| now.duration_since(*at) < self.config.doorbell_interval);
                if recently {
                    acked.unrung.insert(firing.group.clone());
                } else {
                    rung.insert(firing.group.clone(), now);
                    self.ring(&firing.group).await;
                }
            }
            Err(e) => {
                tracing::warn!(firing_id = %firing.id, error = %e, "publish not acknowledged; will retry");
                self.metrics.publish_errors.inc();
                let retry_ms =
                    Utc::now().timestamp_millis() + self.config.retry_after.as_millis() as i64;
                self.wheel.reinsert(vec![entry], retry_ms);
            }
        }
    }

    async fn ring(&self, group: &str) {
        if let Err(e) = self
            .nats
            .publish(self.subjects.ready(group), bytes::Bytes::new())
            .await
        {
            tracing::debug!(group, error = %e, "doorbell not sent");
        }
    }

    async fn flush(&self, acked: &mut Acked) {
        for group in std::mem::take(&mut acked.unrung) {
            self.ring(&group).await;
        }
        if acked.ids.is_empty() {
            return;
        }
        match self.store.mark_published(&acked.ids, Utc::now()).await {
            Ok(_) => {
                acked.ids.clear();
                // A slice is reported only once its firings are marked in the store.
                for slice in acked.slices.drain(..) {
                    self.progress.acked(&slice);
                }
            }
            Err(e) => {
                self.metrics
                    .store_errors
                    .with_label_values(&["mark_published"])
                    .inc();
                tracing::warn!(error = %e, pending = acked.ids.len(), "cannot mark firings published; will retry");
            }
        }
    }
}
