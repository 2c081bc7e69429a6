//! What happens between "started" and "done".
//!
//! Start requests (`chime.worker.v1.start`, request/reply) move a firing into
//! the executing table at most once per attempt and apply the job's overlap
//! policy; the decision goes back to the worker. Finished events arrive on
//! JetStream (`chime.events.finished`), so a scheduler restart loses none;
//! applying them is idempotent, so a redelivered event changes nothing.
//! Both sides batch: whatever requests are waiting are decided in one store
//! call, and a call of starts waits for the calls in flight, up to
//! `start_overlap_after` (2 ms), before running beside them. Finished events
//! wait `finish_linger` (5 ms) for the ones behind them, so at a steady
//! rate they share a commit instead of paying one each; nothing waits for
//! a finish, so only history and what a finish starts (a retry, a release,
//! a fan-in) see those milliseconds.
//!
//! One bad item never holds back the rest: a batch the store refuses for a
//! reason other than its own availability is applied item by item. A
//! finished event that still fails is redelivered after a delay until its
//! `max_deliveries`-th delivery, then dead-lettered (`dead_letter.rs`); a
//! start request that still fails gets its error and is dead-lettered; a
//! malformed event or request is dead-lettered at once. A store outage is
//! nobody's fault: events wait and workers are told to retry, without limit.

use crate::dead_letter::{exhausted, DeadLetter, DeadLetterKind};
use crate::immediate::Wake;
use crate::metrics::Metrics;
use crate::pull::{self, PullError};
use crate::replies::{Replies, ReplyKind};
use crate::requeue::RequeueCause;
use crate::retry::retry_delay;
use crate::store::{StartOutcome, Store, StoreError};
use crate::unstarted::Unstarted;
use async_nats::jetstream::consumer::pull::MessagesError;
use async_nats::jetstream::{self, consumer::PullConsumer, AckKind};
use chime_common::error::ErrorReply;
use chime_common::protocol::{
    Alert, CancelRequest, Finished, StartRefusal, StartReply, StartRequest,
};
use chime_common::signal::TestSignal;
use chime_common::{ApiError, FiringState, Subjects};
use chrono::Utc;
use futures::{FutureExt, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The store calls deciding start requests that are in flight, and when
/// the next may start.
///
/// With no call in flight the next starts at once. Otherwise it waits for
/// the calls in flight to end, up to `overlap_after`, then starts beside them:
/// at a steady rate a request that arrives during a call then joins the
/// next batch instead of paying a call, a commit and a database backend's
/// wake-up of its own, and a slow call
/// holds the requests behind it back by no more than that bound.
struct StartCalls {
    permits: Arc<Semaphore>,
    limit: u32,
    overlap_after: Duration,
}

impl StartCalls {
    /// At most `limit` calls at once (at least one).
    fn new(limit: usize, overlap_after: Duration) -> Self {
        let limit = u32::try_from(limit.max(1)).unwrap_or(u32::MAX);
        StartCalls {
            permits: Arc::new(Semaphore::new(limit as usize)),
            limit,
            overlap_after,
        }
    }

    /// The permit for the next call, held until the call ends; `None` once closed.
    async fn next(&self) -> Option<OwnedSemaphorePermit> {
        if self.limit > 1 {
            let idle = tokio::time::timeout(
                self.overlap_after,
                self.permits.clone().acquire_many_owned(self.limit),
            )
            .await;
            match idle {
                Ok(Ok(mut idle)) => return idle.split(1),
                Ok(Err(_closed)) => return None,
                Err(_waited) => {}
            }
        }
        self.permits.clone().acquire_owned().await.ok()
    }
}

/// Start requests on the v1 subject and on every worker's own subject.
pub type StartRequests = futures::stream::Select<async_nats::Subscriber, async_nats::Subscriber>;

/// Worker reports settings.
#[derive(Debug, Clone)]
pub struct WorkerReportsConfig {
    /// Most start requests decided in one store call.
    pub start_batch: usize,
    /// Store calls for starts in flight at once.
    pub start_concurrency: usize,
    /// How long start requests wait for the store calls in flight before
    /// another call starts beside them; zero starts one at once.
    pub start_overlap_after: Duration,
    /// Finished events applied per store call.
    pub finish_batch: usize,
    /// How long the first finished event of a batch waits for others before
    /// they are applied together; zero applies what has arrived at once.
    pub finish_linger: Duration,
    /// How long one pull request for finished events stays open on the server.
    pub wait: Duration,
    /// Redelivery delay of a finished event the store could not apply.
    pub retry_after: Duration,
    /// The delivery of a finished event that fails for a reason of its own
    /// (not a store outage) on which it is dead-lettered instead of
    /// redelivered. Deliveries that met a store outage count too; 0 or 1
    /// dead-letters at the first such failure.
    pub max_deliveries: u32,
}

impl Default for WorkerReportsConfig {
    fn default() -> Self {
        WorkerReportsConfig {
            start_batch: 500,
            start_concurrency: 4,
            start_overlap_after: Duration::from_millis(2),
            finish_batch: 500,
            finish_linger: Duration::from_millis(5),
            wait: Duration::from_millis(500),
            retry_after: Duration::from_secs(1),
            max_deliveries: 5,
        }
    }
}

/// The worker reports service of one replica: what workers say about the
/// firings they run (a start request, a finished event) applied to the store.
#[derive(Clone)]
pub struct WorkerReports {
    pub config: WorkerReportsConfig,
    pub store: Store,
    pub nats: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub metrics: Metrics,
    /// Reports how many finished events each applied batch changed (tests wait on it).
    pub finished: TestSignal<usize>,
    /// Woken when a finish staged firings outside a slice (a retry, a
    /// release, an `on_success` or fan-in firing), so they leave at once.
    pub immediate: Wake,
    /// Told of each accepted start, so the publisher does not mark it.
    pub unstarted: Unstarted,
    /// Sends start answers to the workers' inboxes only.
    pub replies: Replies,
}

impl WorkerReports {
    /// Decides a batch of start requests and sends the cancels `replace` asks for.
    pub async fn decide(&self, requests: &[StartRequest]) -> Result<Vec<StartOutcome>, StoreError> {
        let timer = self.metrics.start_batch_duration.start_timer();
        let decided = self.store.start(requests, Utc::now()).await;
        timer.observe_duration();
        let decisions = decided.inspect_err(|_| {
            self.metrics
                .store_errors
                .with_label_values(&["start"])
                .inc();
        })?;
        for (request, decision) in requests.iter().zip(&decisions) {
            if decision.reply.accepted {
                self.unstarted.started(&request.firing_id);
            }
            match decision.reply.refusal {
                Some(why @ (StartRefusal::WrongGroup | StartRefusal::NotAsStaged)) => {
                    self.refuse_forged(request, why)
                }
                refusal => {
                    let label = refusal.map_or("accepted", StartRefusal::as_str);
                    self.metrics.starts.with_label_values(&[label]).inc();
                }
            }
            if decision.reply.refusal == Some(chime_common::protocol::StartRefusal::Skipped) {
                self.metrics.overlap_skipped.inc();
            }
            if let Some(cause) = decision.held {
                self.metrics
                    .firings_held
                    .with_label_values(&[request.group.as_str(), cause.as_str()])
                    .inc();
            }
            if let Some((cause, waited)) = decision.limit_wait {
                self.metrics
                    .limit_wait
                    .with_label_values(&[request.group.as_str(), cause.as_str()])
                    .observe(waited.as_secs_f64());
            }
            for alert in &decision.alerts {
                self.alert(alert).await;
            }
            for running in &decision.cancel {
                let request = CancelRequest {
                    firing_id: running.firing_id.clone(),
                    reason: "replaced by a newer firing".into(),
                };
                if let Ok(body) = serde_json::to_vec(&request) {
                    let _ = self
                        .nats
                        .publish(self.subjects.cancel(&running.worker_id), body.into())
                        .await;
                }
            }
        }
        Ok(decisions)
    }

    /// Decides a batch of start requests, one result per request. A batch
    /// the store refuses for a reason other than its availability is decided
    /// request by request, so one bad request never holds back the rest.
    pub async fn decide_each(
        &self,
        requests: &[StartRequest],
    ) -> Vec<Result<StartOutcome, StoreError>> {
        let error = match self.decide(requests).await {
            Ok(decisions) if decisions.len() == requests.len() => {
                return decisions.into_iter().map(Ok).collect()
            }
            Ok(decisions) => StoreError::Internal(format!(
                "{} decisions for {} start requests",
                decisions.len(),
                requests.len()
            )),
            Err(error) => error,
        };
        if error.is_retryable() || requests.len() == 1 {
            return requests.iter().map(|_| Err(error.clone())).collect();
        }
        tracing::warn!(%error, count = requests.len(), "a batch of start requests failed; deciding them one by one");
        let mut decided = Vec::with_capacity(requests.len());
        for request in requests {
            let one = self.decide(std::slice::from_ref(request)).await;
            decided.push(one.and_then(|mut d| {
                d.pop()
                    .ok_or_else(|| StoreError::Internal("no decision for a start request".into()))
            }));
        }
        decided
    }

    /// Joins the replicas' queue group for workers' start requests.
    ///
    /// Separate from [`WorkerReports::serve_starts`] for the same reason as
    /// [`crate::api::Api::subscribe`]: subscribed before the replica is ready.
    pub async fn subscribe_starts(&self) -> Result<StartRequests, async_nats::SubscribeError> {
        let queue = "chime-lifecycle".to_string();
        let v1 = self
            .nats
            .queue_subscribe(self.subjects.worker_start(), queue.clone())
            .await?;
        let own = self
            .nats
            .queue_subscribe(self.subjects.worker_start_wildcard(), queue)
            .await?;
        Ok(futures::stream::select(v1, own))
    }

    /// Answers the start requests of `requests` (from
    /// [`WorkerReports::subscribe_starts`]) until `shutdown`.
    pub async fn serve_starts(self, mut requests: StartRequests, shutdown: CancellationToken) {
        let calls = StartCalls::new(
            self.config.start_concurrency,
            self.config.start_overlap_after,
        );
        loop {
            let first = tokio::select! {
                m = requests.next() => match m { Some(m) => m, None => break },
                _ = shutdown.cancelled() => break,
            };
            // Wait for a store call first, then take whatever else arrived
            // meanwhile: batches grow exactly when the store is the
            // bottleneck.
            let Some(permit) = calls.next().await else {
                break;
            };
            let mut batch = vec![first];
            while batch.len() < self.config.start_batch {
                match requests.next().now_or_never() {
                    Some(Some(m)) => batch.push(m),
                    _ => break,
                }
            }
            let this = self.clone();
            tokio::spawn(async move {
                this.answer(batch).await;
                drop(permit);
            });
        }
    }

    /// Whether a start request's subject, if it is a worker's own
    /// (`chime.worker.v1.start.<group>.<worker id>`), names the worker and
    /// group of its body: with per-worker NATS permissions, the subject is
    /// the proof of who asks.
    fn asks_as_itself(&self, subject: &str, request: &StartRequest) -> bool {
        self.subjects
            .reporter(subject)
            .is_none_or(|(group, worker)| group == request.group && worker == request.worker_id)
    }

    /// The same for a finished event and its subject.
    fn reports_as_itself(&self, subject: &str, event: &Finished) -> bool {
        self.subjects
            .reporter(subject)
            .is_none_or(|(_, worker)| worker == event.worker_id)
    }

    /// Counts and logs a start refused because the request was not what the
    /// scheduler staged or not from whom it claims.
    fn refuse_forged(&self, request: &StartRequest, why: StartRefusal) {
        self.metrics.starts.with_label_values(&[why.as_str()]).inc();
        tracing::warn!(
            firing_id = %request.firing_id,
            worker_id = %request.worker_id,
            group = %request.group,
            reason = why.as_str(),
            "refused a start that does not match the staged firing or its sender"
        );
    }

    /// Answers one batch of start requests (one pass of
    /// [`WorkerReports::serve_starts`]). A request that cannot be decided for a
    /// reason of its own is answered with the error and dead-lettered; one
    /// that meets a store outage is answered `unavailable`, and the worker
    /// asks again later.
    pub async fn answer(&self, batch: Vec<async_nats::Message>) {
        let mut valid = Vec::new();
        let mut asked = Vec::new();
        for message in batch {
            let Some(reply) = message.reply.clone() else {
                let error = ApiError::invalid("", "a start request needs a reply subject");
                self.dead_letter(DeadLetter::of_core(DeadLetterKind::Start, &message, error))
                    .await;
                continue;
            };
            // Decided before anything else: a start nobody can hear the
            // answer to must not put the firing on a worker.
            if !self.replies.accepts(ReplyKind::Start, &reply) {
                continue;
            }
            match serde_json::from_slice::<StartRequest>(&message.payload) {
                Ok(request) if !self.asks_as_itself(&message.subject, &request) => {
                    self.refuse_forged(&request, StartRefusal::WrongWorker);
                    self.reply(reply, &StartReply::refused(StartRefusal::WrongWorker))
                        .await;
                }
                Ok(request) => {
                    valid.push(request);
                    asked.push((message, reply));
                }
                Err(e) => {
                    let error = ApiError::invalid("", format!("not a start request: {e}"));
                    self.reply(
                        reply,
                        &ErrorReply {
                            error: error.clone(),
                        },
                    )
                    .await;
                    self.dead_letter(DeadLetter::of_core(DeadLetterKind::Start, &message, error))
                        .await;
                }
            }
        }
        if valid.is_empty() {
            return;
        }
        let mut unavailable = None;
        let mut started = Vec::new();
        let decisions = self.decide_each(&valid).await;
        for (((message, reply), request), decided) in asked.into_iter().zip(valid).zip(decisions) {
            match decided {
                Ok(decision) => {
                    self.reply(reply, &decision.reply).await;
                    if decision.lateness.is_some() {
                        started.push((request, decision));
                    }
                }
                Err(e) => {
                    let retryable = e.is_retryable();
                    let error = ApiError::from(e);
                    self.reply(
                        reply,
                        &ErrorReply {
                            error: error.clone(),
                        },
                    )
                    .await;
                    if retryable {
                        unavailable = Some(error);
                    } else {
                        self.dead_letter(DeadLetter::of_core(
                            DeadLetterKind::Start,
                            &message,
                            error,
                        ))
                        .await;
                    }
                }
            }
        }
        if let Some(error) = unavailable {
            tracing::warn!(%error, "cannot decide starts; workers will retry");
        }
        self.record_lateness(started).await;
    }

    /// Records the lateness of the firings a batch started, once their
    /// workers have their answers: observes `chime_firing_lateness_seconds`
    /// and publishes the `late` alerts.
    async fn record_lateness(&self, started: Vec<(StartRequest, StartOutcome)>) {
        for (request, outcome) in started {
            if let Some(lateness) = outcome.lateness {
                self.metrics
                    .firing_lateness
                    .with_label_values(&[request.group.as_str()])
                    .observe(lateness.as_secs_f64());
            }
            if let Some(alert) = &outcome.late {
                self.metrics
                    .firings_late
                    .with_label_values(&[alert.group.as_str()])
                    .inc();
                self.alert(alert).await;
            }
        }
    }

    /// Publishes a dead letter; false if it could not be stored.
    async fn dead_letter(&self, letter: DeadLetter) -> bool {
        match letter
            .publish(&self.jetstream, &self.subjects, &self.metrics)
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, kind = letter.kind.as_str(), "cannot store a dead letter");
                false
            }
        }
    }

    async fn reply(&self, subject: async_nats::Subject, body: &impl serde::Serialize) {
        if let Ok(bytes) = serde_json::to_vec(body) {
            self.replies
                .send(ReplyKind::Start, subject, bytes.into())
                .await;
        }
    }

    /// Applies a batch of finished events; returns how many changed state.
    pub async fn apply_finished(&self, events: &[Finished]) -> Result<usize, StoreError> {
        let outcomes = self
            .store
            .finish(events, Utc::now(), &retry_delay)
            .await
            .inspect_err(|_| {
                self.metrics
                    .store_errors
                    .with_label_values(&["finish"])
                    .inc();
            })?;
        let mut applied = 0;
        let mut staged = false;
        for outcome in outcomes {
            if !outcome.applied {
                continue;
            }
            applied += 1;
            staged |= outcome.retry.is_some()
                || !outcome.released.is_empty()
                || !outcome.triggered.is_empty();
            if let Some(state) = outcome.state {
                self.metrics
                    .firings_finished
                    .with_label_values(&[state.as_str()])
                    .inc();
            }
            if outcome.retry.is_some() {
                self.metrics.retries.inc();
            }
            if let Some(interrupted) = outcome.interrupted {
                if outcome.retry.is_some() {
                    let cause = RequeueCause::Interrupted(interrupted);
                    self.metrics
                        .requeued
                        .with_label_values(&[&outcome.group, cause.as_str()])
                        .inc();
                } else if outcome.exhausted {
                    self.metrics
                        .infra_retries_exhausted
                        .with_label_values(&[&outcome.group])
                        .inc();
                }
            }
            if outcome.state == Some(FiringState::Lost) {
                self.metrics.lost.inc();
            }
            for alert in &outcome.alerts {
                self.alert(alert).await;
            }
        }
        if staged {
            self.immediate.wake();
        }
        self.finished.emit(|| applied);
        Ok(applied)
    }

    /// Publishes an alert on `chime.alerts` (best effort: it is also in the firing's history).
    pub async fn alert(&self, alert: &Alert) {
        publish_alert(&self.jetstream, &self.subjects, &self.metrics, alert).await;
    }

    /// Consumes finished events until `shutdown` (see [`crate::pull`]),
    /// applying the first to arrive together with whatever follows it within
    /// `finish_linger` (up to `finish_batch`) as one batch. A failed pull is
    /// returned: the supervisor opens the consumer again.
    pub async fn consume_finished(
        self,
        consumer: PullConsumer,
        shutdown: CancellationToken,
    ) -> Result<(), PullError> {
        let limit = self.config.finish_batch.max(1);
        while !shutdown.is_cancelled() {
            let mut messages =
                pull::open(&consumer, self.config.finish_batch, self.config.wait).await?;
            let mut open = true;
            while open {
                let first = tokio::select! {
                    m = messages.next() => m,
                    _ = shutdown.cancelled() => return Ok(()),
                };
                let Some(first) = first else { break };
                let mut batch = vec![first];
                open = take_ready(&mut messages, &mut batch, limit);
                if open && batch.len() < limit && !self.config.finish_linger.is_zero() {
                    tokio::time::sleep(self.config.finish_linger).await;
                    open = take_ready(&mut messages, &mut batch, limit);
                }
                self.apply_batch(batch).await?;
            }
        }
        Ok(())
    }

    /// Applies one batch of pulled events and acks, naks or dead-letters
    /// each (one pass of [`WorkerReports::consume_finished`]); the last error
    /// the pull reported among them, if any, after the rest were applied.
    pub async fn apply_batch(
        &self,
        batch: Vec<Result<jetstream::Message, MessagesError>>,
    ) -> Result<(), PullError> {
        let mut pulled = Ok(());
        let mut messages = Vec::new();
        let mut events = Vec::new();
        for message in batch {
            let message = match message {
                Ok(message) => message,
                Err(e) => {
                    tracing::warn!(error = %e, "pulling finished events failed");
                    pulled = Err(PullError::from(e));
                    continue;
                }
            };
            match serde_json::from_slice::<Finished>(&message.payload) {
                Ok(event) if !self.reports_as_itself(&message.subject, &event) => {
                    let error = ApiError::invalid(
                        "worker_id",
                        format!(
                            "the event's worker {:?} is not the worker its subject {} names",
                            event.worker_id, message.subject
                        ),
                    );
                    self.give_up(&message, error).await;
                }
                Ok(event) => {
                    events.push(event);
                    messages.push(message);
                }
                Err(e) => {
                    // No delivery will ever parse it: dead-letter it at once.
                    let error = ApiError::invalid("", format!("not a finished event: {e}"));
                    self.give_up(&message, error).await;
                }
            }
        }
        if events.is_empty() {
            return pulled;
        }
        let error = match self.apply_finished(&events).await {
            Ok(_) => {
                for message in messages {
                    let _ = message.ack().await;
                }
                return pulled;
            }
            Err(error) => error,
        };
        if error.is_retryable() || events.len() == 1 {
            if error.is_retryable() {
                tracing::warn!(%error, count = events.len(), "the store cannot apply finished events now; they will be redelivered");
            }
            for message in &messages {
                self.failed(message, error.clone()).await;
            }
            return pulled;
        }
        tracing::warn!(%error, count = events.len(), "a batch of finished events failed; applying them one by one");
        for (message, event) in messages.iter().zip(&events) {
            match self.apply_finished(std::slice::from_ref(event)).await {
                Ok(_) => {
                    let _ = message.ack().await;
                }
                Err(error) => self.failed(message, error).await,
            }
        }
        pulled
    }

    /// An event the store could not apply: after a store outage it comes
    /// back later, whatever its delivery count; after a failure of its own,
    /// until its last delivery, then it is dead-lettered.
    async fn failed(&self, message: &jetstream::Message, error: StoreError) {
        if error.is_retryable() || !exhausted(message, self.config.max_deliveries) {
            if !error.is_retryable() {
                tracing::warn!(%error, "cannot apply a finished event; it will be redelivered");
            }
            let _ = message
                .ack_with(AckKind::Nak(Some(self.config.retry_after)))
                .await;
            return;
        }
        self.give_up(message, ApiError::from(error)).await;
    }

    /// Dead-letters an event, then acks it; if the dead letter cannot be
    /// stored, the event comes back instead.
    async fn give_up(&self, message: &jetstream::Message, error: ApiError) {
        let letter = DeadLetter::of_jetstream(DeadLetterKind::Finished, message, error);
        if self.dead_letter(letter).await {
            let _ = message.ack().await;
        } else {
            let _ = message
                .ack_with(AckKind::Nak(Some(self.config.retry_after)))
                .await;
        }
    }
}

/// Publishes an alert on `chime.alerts` and counts it (best effort: an alert
/// about a firing is also in its history, a dead letter in its stream).
pub(crate) async fn publish_alert(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    metrics: &Metrics,
    alert: &Alert,
) {
    metrics
        .alerts
        .with_label_values(&[alert.kind.as_str()])
        .inc();
    tracing::warn!(kind = alert.kind.as_str(), job_id = %alert.job_id, message = %alert.message, "alert");
    if let Ok(body) = serde_json::to_vec(alert) {
        match jetstream.publish(subjects.alerts(), body.into()).await {
            Ok(ack) => {
                let _ = ack.await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot publish alert"),
        }
    }
}

/// Moves the messages `messages` already holds into `batch`, until it has
/// `limit`; false if the pull ended.
fn take_ready<S: futures::Stream + Unpin>(
    messages: &mut S,
    batch: &mut Vec<S::Item>,
    limit: usize,
) -> bool {
    while batch.len() < limit {
        match messages.next().now_or_never() {
            Some(Some(message)) => batch.push(message),
            Some(None) => return false,
            None => break,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{take_ready, StartCalls};
    use std::time::Duration;
    use tokio::sync::OwnedSemaphorePermit;
    use tokio::time::{timeout, Instant};

    const BOUND: Duration = Duration::from_millis(2);

    /// Ends the call holding `call` after `after`, as its store call would.
    fn end_after(call: OwnedSemaphorePermit, after: Duration) {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            drop(call);
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_starts_at_once_when_none_is_in_flight() {
        let calls = StartCalls::new(4, BOUND);
        let began = Instant::now();
        let first = calls.next().await.expect("open");
        assert_eq!(began.elapsed(), Duration::ZERO);
        drop(first);
        let _second = calls.next().await.expect("open");
        assert_eq!(began.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_call_waits_for_the_one_in_flight_within_the_bound() {
        let calls = StartCalls::new(4, BOUND);
        let in_flight = calls.next().await.expect("open");
        let began = Instant::now();
        end_after(in_flight, Duration::from_millis(1));
        let _next = calls.next().await.expect("open");
        assert_eq!(began.elapsed(), Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_bound_a_call_starts_beside_the_one_in_flight() {
        let calls = StartCalls::new(4, BOUND);
        let _in_flight = calls.next().await.expect("open");
        let began = Instant::now();
        let _beside = timeout(Duration::from_secs(1), calls.next())
            .await
            .expect("a second call within the bound")
            .expect("open");
        assert_eq!(began.elapsed(), BOUND);
        assert_eq!(calls.permits.available_permits(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_limit_a_call_waits_for_one_to_end() {
        let calls = StartCalls::new(2, BOUND);
        let _first = calls.next().await.expect("open");
        let second = calls.next().await.expect("open");
        let began = Instant::now();
        end_after(second, Duration::from_millis(10));
        let _third = calls.next().await.expect("open");
        assert_eq!(began.elapsed(), Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn closed_calls_give_no_permit() {
        let calls = StartCalls::new(4, BOUND);
        calls.permits.close();
        assert!(calls.next().await.is_none());
        let one = StartCalls::new(1, BOUND);
        one.permits.close();
        assert!(one.next().await.is_none());
    }

    #[test]
    fn take_ready_stops_at_the_limit_and_tells_when_the_pull_ended() {
        let mut ready = futures::stream::iter(1..=5);
        let mut batch = vec![0];
        assert!(take_ready(&mut ready, &mut batch, 3));
        assert_eq!(batch, [0, 1, 2]);
        assert!(!take_ready(&mut ready, &mut batch, 10));
        assert_eq!(batch, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn take_ready_takes_nothing_that_has_not_arrived() {
        let mut waiting = futures::stream::pending::<u32>();
        let mut batch = vec![7];
        assert!(take_ready(&mut waiting, &mut batch, 10));
        assert_eq!(batch, [7]);
    }
}
