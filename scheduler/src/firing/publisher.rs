//! Publishes each firing at its instant: the wheel's run loop.
//!
//! Publishing is pipelined: the loop sends every due firing without waiting
//! for its ack; a collector awaits the acks concurrently, counts them
//! towards their slice and rings the group's doorbell so idle workers fetch
//! at once; a marker later writes the firings no worker has started yet
//! `published` in the store, in batches. A publish that fails goes back into
//! the wheel; `Nats-Msg-Id` = firing id makes the retry (or another
//! replica's takeover) harmless inside the duplicate window.
//!
//! A slice is done when JetStream holds all its firings, not when the store
//! says so: the store's `published` state is bookkeeping (history, the
//! not-started alert), and the marker waits `mark_delay` before writing it,
//! by which time nearly every firing has been started and needs no write at
//! all. Marking each firing at once would cost PostgreSQL a non-HOT update
//! per firing, the most expensive write of its life, and in a large burst
//! it would compete with publishing for the CPU.

use crate::firing::alarm::Alarm;
use crate::firing::claim::SliceProgress;
use crate::firing::duplicates::{Duplicate, DuplicateCheck};
use crate::firing::message::{firing_headers, Acked};
use crate::firing::unstarted::Unstarted;
use crate::firing::wheel::{Wheel, WheelEntry};
use crate::ops::metrics::Metrics;
use crate::ops::traces;
use crate::store::{AckedFiring, StagedFiring, Store};
use async_nats::jetstream::{self, context::PublishAckFuture, message::PublishMessage};
use chime_common::protocol::{doorbell_body, Alert, AlertKind};
use chime_common::{Band, FiringId, Subjects};
use chrono::Utc;
use futures::stream::{FuturesUnordered, StreamExt};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Publisher settings.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// Acked firings are marked published in batches of at most this many
    /// (a batch is whatever arrived since the previous one was written).
    pub mark_batch: usize,
    /// Marks are written at most this often unless a batch is full, and
    /// this is the pause after a failed write. Nothing waits on a mark, so
    /// fewer, larger writes are pure gain.
    pub flush_interval: Duration,
    /// An acked firing is marked `published` this long after its ack, if no
    /// worker has started it by then (a started firing needs no mark). Keep
    /// it well below the housekeeping's `rescue_after`, which republishes
    /// firings still `staged` (harmless inside the duplicate window).
    pub mark_delay: Duration,
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
            mark_delay: Duration::from_secs(1),
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
#[derive(Clone)]
pub struct Publisher {
    pub config: PublisherConfig,
    pub jetstream: jetstream::Context,
    pub nats: async_nats::Client,
    pub subjects: Subjects,
    pub store: Store,
    pub wheel: Wheel,
    pub progress: SliceProgress,
    pub metrics: Metrics,
    /// Acked firings no start has been seen for: the marker's candidates.
    pub unstarted: Unstarted,
}

/// A firing sent: published to its group's consumers, its ack to come, or
/// offered to the one worker it is addressed to (a broadcast's share), a
/// core NATS message with no ack (the offers pass offers it again until it
/// starts).
enum Sent {
    Published {
        entry: WheelEntry,
        ack: PublishAckFuture,
    },
    Offered {
        entry: WheelEntry,
    },
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
            let sent = match &firing.worker_id {
                Some(worker) => self
                    .nats
                    .publish_with_headers(
                        self.subjects.offer(&firing.group, worker),
                        firing_headers(firing, now),
                        firing.payload.clone(),
                    )
                    .await
                    .map(|()| None)
                    .map_err(|e| e.to_string()),
                None => {
                    let subject = self
                        .subjects
                        .fire(&firing.group, Band::of_priority(firing.priority));
                    let message = PublishMessage::build()
                        .payload(firing.payload.clone())
                        .headers(firing_headers(firing, now));
                    self.jetstream
                        .send_publish(subject, message)
                        .await
                        .map(Some)
                        .map_err(|e| e.to_string())
                }
            };
            match sent {
                Ok(ack) => {
                    self.metrics.publish_lateness.observe(lateness as f64 / 1e6);
                    traces::published(firing, now, Utc::now());
                    let sent = match ack {
                        Some(ack) => Sent::Published { entry, ack },
                        None => Sent::Offered { entry },
                    };
                    if acks.send(sent).await.is_err() {
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
        let (marks, marks_rx) = mpsc::unbounded_channel();
        let (duplicates, duplicates_rx) = mpsc::unbounded_channel();
        let checker = DuplicateCheck {
            jetstream: self.jetstream.clone(),
            nats: self.nats.clone(),
            subjects: self.subjects.clone(),
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            marks: marks.clone(),
        };
        let collector = Collector {
            config: self.config.clone(),
            nats: self.nats.clone(),
            subjects: self.subjects.clone(),
            wheel: self.wheel.clone(),
            progress: self.progress.clone(),
            metrics: self.metrics.clone(),
            marks,
            duplicates,
            unstarted: self.unstarted.clone(),
            stream_full_alerted: std::sync::Mutex::new(None),
        };
        let marker = Marker {
            config: self.config.clone(),
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            unstarted: self.unstarted.clone(),
        };
        let collecting = tokio::spawn(collector.run(rx));
        let checking = tokio::spawn(checker.run(duplicates_rx));
        let marking = tokio::spawn(marker.run(marks_rx));
        let mut draining_until: Option<tokio::time::Instant> = None;
        let mut alarm = Alarm::new();
        loop {
            let now = Utc::now();
            if self.send_due(now.timestamp_millis(), &tx).await > 0 {
                continue;
            }
            if let Some(until) = draining_until {
                if self.wheel.is_empty() || tokio::time::Instant::now() >= until {
                    break;
                }
            }
            // To the microsecond: waiting whole milliseconds from a
            // truncated `now` overslept by up to one.
            let wait = match self.wheel.next_due_ms() {
                Some(due) => {
                    let until_due = due.saturating_mul(1000) - now.timestamp_micros();
                    Duration::from_micros(until_due.clamp(0, 60_000_000) as u64)
                }
                None => Duration::from_secs(60),
            };
            tokio::select! {
                _ = alarm.sleep_until(Instant::now() + wait) => {}
                _ = self.wheel.changed() => {}
                _ = shutdown.cancelled(), if draining_until.is_none() => {
                    draining_until = Some(tokio::time::Instant::now() + drain);
                }
            }
        }
        drop(tx);
        let _ = collecting.await;
        let _ = checking.await;
        let _ = marking.await;
        if !self.wheel.is_empty() {
            tracing::warn!(
                left = self.wheel.len(),
                "publisher stopped with firings in the wheel; their slices will be taken over"
            );
        }
        drained.cancel();
    }
}

/// Awaits publish acks, counts them towards their slices, rings doorbells
/// and hands acked firings to the [`Marker`]. It never waits on the store,
/// so a slow database cannot delay a doorbell (an idle worker waits for one).
struct Collector {
    config: PublisherConfig,
    nats: async_nats::Client,
    subjects: Subjects,
    wheel: Wheel,
    progress: SliceProgress,
    metrics: Metrics,
    marks: mpsc::UnboundedSender<Acked>,
    /// Firings acknowledged as duplicates, to be checked against the stream.
    duplicates: mpsc::UnboundedSender<Duplicate>,
    unstarted: Unstarted,
    /// When the last `stream_full` alert was raised.
    stream_full_alerted: std::sync::Mutex<Option<Instant>>,
}

/// A full stream raises at most one alert per replica this often.
const STREAM_FULL_ALERT_EVERY: Duration = Duration::from_secs(60);

/// Whether JetStream refused a publish because the stream reached a limit
/// (discard new: "maximum messages/bytes exceeded").
fn stream_full(error: &jetstream::context::PublishError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<jetstream::Error>())
        .is_some_and(|e| e.error_code() == jetstream::ErrorCode::STREAM_STORE_FAILED)
}

impl Collector {
    async fn run(self, mut sent: mpsc::Receiver<Sent>) {
        let mut inflight = FuturesUnordered::new();
        let mut rung: HashMap<String, Instant> = HashMap::new();
        // Groups to ring once the interval has passed, with the bands that got firings.
        let mut unrung: HashMap<String, BTreeSet<Band>> = HashMap::new();
        let mut ring_at: Option<Instant> = None;
        // An idle worker waits for the doorbell: a deferred ring is on the
        // path of a firing's start, so it is timed to the microsecond too.
        let mut alarm = Alarm::new();
        let mut open = true;
        loop {
            tokio::select! {
                next = sent.recv(), if open => match next {
                    Some(Sent::Published { entry, ack }) => inflight.push(async move { let r = ack.await; (entry, r) }),
                    Some(Sent::Offered { entry }) => self.on_offered(entry),
                    None => open = false,
                },
                Some((entry, result)) = inflight.next(), if !inflight.is_empty() => {
                    if let Some((group, band)) = self.on_ack(entry, result) {
                        let now = Instant::now();
                        let allowed = rung.get(&group).map(|at| *at + self.config.doorbell_interval);
                        if let Some(allowed) = allowed.filter(|allowed| *allowed > now) {
                            // Rung a moment ago: ring again once the interval has passed.
                            unrung.entry(group).or_default().insert(band);
                            ring_at = Some(ring_at.map_or(allowed, |at| at.min(allowed)));
                        } else {
                            self.ring(&group, [band]).await;
                            rung.insert(group, now);
                        }
                    }
                }
                _ = sleep_until_some(&mut alarm, ring_at), if ring_at.is_some() => {
                    let now = Instant::now();
                    for (group, bands) in unrung.drain() {
                        self.ring(&group, bands).await;
                        rung.insert(group, now);
                    }
                    ring_at = None;
                }
            }
            if !open && inflight.is_empty() {
                break;
            }
        }
        for (group, bands) in unrung {
            self.ring(&group, bands).await;
        }
    }

    /// Counts an offer towards its slice and hands it to the marker: no
    /// stream holds it (sequence 0), and no doorbell is rung for it.
    fn on_offered(&self, entry: WheelEntry) {
        self.metrics
            .firings_published
            .with_label_values(&[entry.firing.group.as_str()])
            .inc();
        if let Some(slice) = &entry.slice {
            self.progress.acked(slice);
        }
        self.unstarted.acked(entry.firing.id.clone());
        let _ = self.marks.send(Acked {
            id: entry.firing.id,
            stream_seq: 0,
            at: Utc::now(),
        });
    }

    /// Handles one ack; returns the group whose doorbell should ring, and the band.
    fn on_ack(
        &self,
        entry: WheelEntry,
        result: Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
    ) -> Option<(String, Band)> {
        let firing = &entry.firing;
        match result {
            Ok(ack) => {
                // A copy JetStream dropped was counted when it was first published.
                if ack.duplicate {
                    self.metrics.publish_duplicates.inc();
                } else {
                    self.metrics
                        .firings_published
                        .with_label_values(&[firing.group.as_str()])
                        .inc();
                }
                let rung = (firing.group.clone(), Band::of_priority(firing.priority));
                if let Some(slice) = &entry.slice {
                    self.progress.acked(slice);
                }
                self.unstarted.acked(entry.firing.id.clone());
                if ack.duplicate {
                    // Not proof that the stream holds it: checked first.
                    let _ = self.duplicates.send(Duplicate {
                        firing: entry.firing,
                        stream_seq: ack.sequence,
                    });
                } else {
                    let _ = self.marks.send(Acked {
                        id: entry.firing.id,
                        stream_seq: ack.sequence,
                        at: Utc::now(),
                    });
                }
                Some(rung)
            }
            Err(e) => {
                tracing::warn!(firing_id = %firing.id, error = %e, "publish not acknowledged; will retry");
                self.metrics.publish_errors.inc();
                if stream_full(&e) {
                    self.alert_stream_full(firing);
                }
                let retry_ms =
                    Utc::now().timestamp_millis() + self.config.retry_after.as_millis() as i64;
                self.wheel.reinsert(vec![entry], retry_ms);
                None
            }
        }
    }

    /// Raises a `stream_full` alert, at most once per `STREAM_FULL_ALERT_EVERY`
    /// per replica (a full stream refuses every firing until workers catch up).
    fn alert_stream_full(&self, firing: &StagedFiring) {
        let now = Instant::now();
        {
            let mut last = self
                .stream_full_alerted
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < STREAM_FULL_ALERT_EVERY) {
                return;
            }
            *last = Some(now);
        }
        self.metrics
            .alerts
            .with_label_values(&[AlertKind::StreamFull.as_str()])
            .inc();
        let alert = Alert {
            kind: AlertKind::StreamFull,
            job_id: firing.job_id.clone(),
            group: firing.group.clone(),
            firing_id: Some(firing.id.clone()),
            message: format!(
                "stream {} is full (a size limit was reached): firings stay staged and are retried until workers consume some",
                self.subjects.fire_stream()
            ),
            at: Utc::now(),
            consecutive_failures: None,
            paused: false,
            lateness_ms: None,
        };
        tracing::error!(kind = "stream_full", message = %alert.message, "alert");
        let (nats, subject) = (self.nats.clone(), self.subjects.alerts());
        if let Ok(body) = serde_json::to_vec(&alert) {
            // The alerts stream captures core publishes; never wait here.
            tokio::spawn(async move {
                if let Err(e) = nats.publish(subject, body.into()).await {
                    tracing::warn!(error = %e, "cannot publish alert");
                }
            });
        }
    }

    async fn ring(&self, group: &str, bands: impl IntoIterator<Item = Band>) {
        let body = doorbell_body(bands);
        if let Err(e) = self
            .nats
            .publish(self.subjects.ready(group), body.into())
            .await
        {
            tracing::debug!(group, error = %e, "doorbell not sent");
        }
    }
}

async fn sleep_until_some(alarm: &mut Alarm, at: Option<Instant>) {
    match at {
        Some(at) => alarm.sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Marks acknowledged firings `published` in the store once they are
/// `mark_delay` old, in batches; rows a worker started meanwhile are left as
/// they are (the start recorded them, `published_at` included), and those
/// this replica saw start are not sent at all.
struct Marker {
    config: PublisherConfig,
    store: Store,
    metrics: Metrics,
    unstarted: Unstarted,
}

impl Marker {
    async fn run(self, mut marks: mpsc::UnboundedReceiver<Acked>) {
        let mut waiting: VecDeque<Acked> = VecDeque::new();
        let mut failures = 0u32;
        let delay = chrono::Duration::from_std(self.config.mark_delay)
            .unwrap_or_else(|_| chrono::Duration::seconds(1));
        loop {
            if waiting.is_empty() {
                match marks.recv().await {
                    Some(first) => waiting.push_back(first),
                    None => return,
                }
            }
            while let Ok(next) = marks.try_recv() {
                waiting.push_back(next);
            }
            // Draining (the publisher stopped): mark everything now.
            let closing = marks.is_closed();
            let cutoff = Utc::now() - delay;
            let Some(oldest) = waiting.front().map(|a| a.at) else {
                continue;
            };
            if !closing && oldest > cutoff {
                let wait = (oldest - cutoff).to_std().unwrap_or_default();
                tokio::time::sleep(wait.max(self.config.flush_interval)).await;
                continue;
            }
            let mut batch = Vec::new();
            while batch.len() < self.config.mark_batch {
                match waiting.front() {
                    Some(acked) if closing || acked.at <= cutoff => {
                        batch.extend(
                            waiting
                                .pop_front()
                                .filter(|acked| self.unstarted.contains(&acked.id)),
                        );
                    }
                    _ => break,
                }
            }
            if batch.is_empty() {
                continue;
            }
            let ids: Vec<FiringId> = batch.iter().map(|a| a.id.clone()).collect();
            let acked: Vec<AckedFiring> = batch.iter().map(Acked::firing).collect();
            // Acks arrive in order, so the batch's last is its latest: the
            // time JetStream held all of them.
            let at = batch.last().map_or_else(Utc::now, |a| a.at);
            match self.store.record_acked(&acked, at).await {
                Ok(_) => {
                    self.unstarted.forget(&ids);
                    failures = 0;
                    if ids.len() < self.config.mark_batch && !closing {
                        tokio::time::sleep(self.config.flush_interval).await;
                    }
                }
                Err(e) if !e.is_retryable() => {
                    // A reason of one firing's own: mark them one by one,
                    // so only that one stays `staged` (a start marks it,
                    // and nothing else waits behind it).
                    self.metrics
                        .store_errors
                        .with_label_values(&["mark_published"])
                        .inc();
                    tracing::warn!(error = %e, pending = batch.len(), "cannot mark a batch published; marking one by one");
                    for acked in batch {
                        let one = std::slice::from_ref(&acked.id);
                        match self.store.record_acked(&[acked.firing()], acked.at).await {
                            Err(e) if e.is_retryable() => waiting.push_front(acked),
                            Err(e) => {
                                tracing::warn!(firing_id = %acked.id, error = %e, "cannot mark this firing published; it stays staged");
                                self.unstarted.forget(one);
                            }
                            Ok(_) => self.unstarted.forget(one),
                        }
                    }
                }
                Err(e) => {
                    self.metrics
                        .store_errors
                        .with_label_values(&["mark_published"])
                        .inc();
                    tracing::warn!(error = %e, pending = batch.len(), "cannot mark firings published; will retry");
                    failures += 1;
                    // Closed and still failing: leave them `staged`; housekeeping
                    // republishes them inside the dedup window, where JetStream drops the copy.
                    if closing && failures >= 50 {
                        return;
                    }
                    for acked in batch.into_iter().rev() {
                        waiting.push_front(acked);
                    }
                    tokio::time::sleep(self.config.flush_interval).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The marker marks an acked firing it saw no start of, and sends the
    /// store nothing of one whose start this replica accepted. The started
    /// firing's row is left `staged` here, as if its start were still in
    /// flight, so a marker that sent it would turn it `published`.
    #[tokio::test]
    async fn the_marker_marks_only_firings_it_saw_no_start_of() {
        use crate::store::test_stores::TestStore;
        use crate::store::FiringFilter;
        use chime_common::FiringState;

        let test = TestStore::sqlite().await;
        let store = &test.store;
        let now = Utc::now();
        let mut firings = Vec::new();
        for job in ["unstarted", "started"] {
            firings.push(test.triggered_job(job, now).await);
        }
        let unstarted = Unstarted::default();
        let (marks, acked) = mpsc::unbounded_channel();
        for id in &firings {
            unstarted.acked(id.clone());
            marks
                .send(Acked {
                    id: id.clone(),
                    stream_seq: 0,
                    at: now,
                })
                .expect("the marker's channel");
        }
        unstarted.started(&firings[1]);
        // Closed: the marker marks what it holds at once, then returns.
        drop(marks);
        Marker {
            config: PublisherConfig::default(),
            store: store.clone(),
            metrics: Metrics::new(),
            unstarted: unstarted.clone(),
        }
        .run(acked)
        .await;

        for (id, expected) in firings
            .iter()
            .zip([FiringState::Published, FiringState::Staged])
        {
            let page = store
                .list_firings(&FiringFilter {
                    job_id: Some(id.job_id.clone()),
                    ..FiringFilter::default()
                })
                .await
                .expect("list");
            let states: Vec<FiringState> = page.items.iter().map(|f| f.state).collect();
            assert_eq!(states, [expected], "{id}");
        }
        assert!(
            firings.iter().all(|id| !unstarted.contains(id)),
            "the marker forgets what it marked"
        );
    }
}
