//! Start requests: the store decides whether a firing runs.
//!
//! A worker asks on `chime.worker.v1.start` (or its own
//! `chime.worker.v1.start.<group>.<worker id>`) before it runs a firing;
//! the store moves the firing into the executing table at most once per
//! attempt and applies the job's overlap policy and concurrency limits, and
//! the decision goes back to the worker's inbox. Whatever requests are
//! waiting are decided in one store call, and a call waits for the calls
//! in flight, up to `overlap_after` (2 ms), before running beside them.
//!
//! One bad request never holds back the rest: a batch the store refuses
//! for a reason other than its own availability is decided request by
//! request; a request that still fails gets its error and is dead-lettered
//! (`ops/dead_letter.rs`), a malformed one at once. A store outage is
//! nobody's fault: workers are told `unavailable` and ask again.

use crate::firing::unstarted::Unstarted;
use crate::intake::api::parse_request;
use crate::intake::replies::{Replies, ReplyKind};
use crate::ops::alerts::Alerts;
use crate::ops::dead_letter::{DeadLetter, DeadLetterKind};
use crate::ops::metrics::Metrics;
use crate::ops::traces;
use crate::store::{StartOutcome, Store, StoreError};
use async_nats::jetstream;
use chime_common::error::ErrorReply;
use chime_common::protocol::{CancelRequest, StartRefusal, StartReply, StartRequest};
use chime_common::{ApiError, Subjects};
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

/// Settings of the start service.
#[derive(Debug, Clone)]
pub struct StartsConfig {
    /// Most start requests decided in one store call.
    pub batch: usize,
    /// Store calls for starts in flight at once.
    pub concurrency: usize,
    /// How long start requests wait for the store calls in flight before
    /// another call starts beside them; zero starts one at once.
    pub overlap_after: Duration,
}

impl Default for StartsConfig {
    fn default() -> Self {
        StartsConfig {
            batch: 500,
            concurrency: 4,
            overlap_after: Duration::from_millis(2),
        }
    }
}

/// The start service of one replica: workers' start requests decided by
/// the store and answered.
#[derive(Clone)]
pub struct Starts {
    pub config: StartsConfig,
    pub store: Store,
    pub nats: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub metrics: Metrics,
    pub alerts: Alerts,
    /// Told of each accepted start, so the publisher does not mark it.
    pub unstarted: Unstarted,
    /// Sends start answers to the workers' inboxes only.
    pub replies: Replies,
}

impl Starts {
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
                self.alerts.publish(alert).await;
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
    /// Separate from [`Starts::serve`] for the same reason as
    /// [`crate::intake::api::Api::subscribe`]: subscribed before the replica is ready.
    pub async fn subscribe(&self) -> Result<StartRequests, async_nats::SubscribeError> {
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
    /// [`Starts::subscribe`]) until `shutdown`.
    pub async fn serve(self, mut requests: StartRequests, shutdown: CancellationToken) {
        let calls = StartCalls::new(self.config.concurrency, self.config.overlap_after);
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
            while batch.len() < self.config.batch {
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
    /// [`Starts::serve`]). A request that cannot be decided for a
    /// reason of its own is answered with the error and dead-lettered; one
    /// that meets a store outage is answered `unavailable`, and the worker
    /// asks again later.
    pub async fn answer(&self, batch: Vec<async_nats::Message>) {
        let mut valid = Vec::new();
        let mut asked = Vec::new();
        for message in batch {
            let Some(reply) = message.reply.clone() else {
                let error = ApiError::invalid_request("a start request needs a reply subject");
                self.dead_letter(DeadLetter::of_core(DeadLetterKind::Start, &message, error))
                    .await;
                continue;
            };
            // Decided before anything else: a start nobody can hear the
            // answer to must not put the firing on a worker.
            if !self.replies.accepts(ReplyKind::Start, &reply) {
                continue;
            }
            match parse_request::<StartRequest>(&message.payload) {
                Ok(request) if !self.asks_as_itself(&message.subject, &request) => {
                    self.refuse_forged(&request, StartRefusal::WrongWorker);
                    self.reply(reply, &StartReply::refused(StartRefusal::WrongWorker))
                        .await;
                }
                Ok(request) => {
                    valid.push(request);
                    asked.push((message, reply));
                }
                Err(mut error) => {
                    // The field serde stopped at stays named in `field`.
                    error.message = format!("not a start request: {}", error.message);
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
        let asked_at = Utc::now();
        let decisions = self.decide_each(&valid).await;
        let decided_at = Utc::now();
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
        traces::started(&self.store, &started, asked_at, decided_at);
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
                self.alerts.publish(alert).await;
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

    async fn dead_letter(&self, letter: DeadLetter) -> bool {
        letter
            .store(&self.jetstream, &self.subjects, &self.metrics)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::StartCalls;
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
}
