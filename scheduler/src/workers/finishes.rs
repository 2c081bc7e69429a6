//! Finished events: a firing's outcome recorded, and what follows it.
//!
//! Workers publish finished events on JetStream
//! (`chime.events.finished.<group>.<worker id>`), so a scheduler restart
//! loses none; applying one is idempotent, so a redelivered event changes
//! nothing. An applied event ends the firing in history, or schedules its
//! retry (`workers/retry.rs`), and starts what it unblocks: `on_success`
//! children, fan-in firings, firings held by a limit. The first event of a
//! batch waits `linger` (5 ms) for the ones behind it, so at a steady rate
//! they share a commit; nothing waits for a finish, so only history and
//! what a finish starts see those milliseconds.
//!
//! One bad event never holds back the rest: a batch the store refuses for
//! a reason other than its own availability is applied event by event. An
//! event that still fails is redelivered after a delay until its
//! `max_deliveries`-th delivery, then dead-lettered
//! (`ops/dead_letter.rs`); a malformed one at once. A store outage is
//! nobody's fault: events wait, without limit.

use crate::firing::immediate::Wake;
use crate::intake::api::parse_request;
use crate::ops::alerts::Alerts;
use crate::ops::dead_letter::{exhausted, DeadLetter, DeadLetterKind};
use crate::ops::job_metrics::JobChanges;
use crate::ops::metrics::Metrics;
use crate::ops::traces;
use crate::pull::{self, PullError};
use crate::recovery::requeue::RequeueCause;
use crate::store::{Store, StoreError};
use crate::workers::retry::retry_delay;
use async_nats::jetstream::consumer::pull::MessagesError;
use async_nats::jetstream::{self, consumer::PullConsumer, AckKind};
use chime_common::protocol::Finished;
use chime_common::{ApiError, FiringState, Subjects};
use chime_runtime::signal::TestSignal;
use chrono::Utc;
use futures::{FutureExt, StreamExt};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Settings of the finish service.
#[derive(Debug, Clone)]
pub struct FinishesConfig {
    /// Finished events applied per store call.
    pub batch: usize,
    /// How long the first finished event of a batch waits for others before
    /// they are applied together; zero applies what has arrived at once.
    pub linger: Duration,
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

impl Default for FinishesConfig {
    fn default() -> Self {
        FinishesConfig {
            batch: 500,
            linger: Duration::from_millis(5),
            wait: Duration::from_millis(500),
            retry_after: Duration::from_secs(1),
            max_deliveries: 5,
        }
    }
}

/// The finish service of one replica: workers' finished events applied to
/// the store.
#[derive(Clone)]
pub struct Finishes {
    pub config: FinishesConfig,
    pub store: Store,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub metrics: Metrics,
    pub alerts: Alerts,
    /// Reports how many finished events each applied batch changed (tests wait on it).
    pub finished: TestSignal<usize>,
    /// Woken when a finish staged firings outside a slice (a retry, a
    /// release, an `on_success` or fan-in firing), so they leave at once.
    pub immediate: Wake,
    /// Told of each job whose firing a finish ended, so this replica's
    /// per-job gauges show it at once.
    pub job_changes: JobChanges,
}

impl Finishes {
    /// The same for a finished event and its subject.
    fn reports_as_itself(&self, subject: &str, event: &Finished) -> bool {
        self.subjects
            .reporter(subject)
            .is_none_or(|(_, worker)| worker == event.worker_id)
    }

    /// Applies a batch of finished events; returns how many changed state.
    pub async fn apply(&self, events: &[Finished]) -> Result<usize, StoreError> {
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
        let applied_at = Utc::now();
        let mut applied = 0;
        let mut staged = false;
        let mut traced = std::collections::HashSet::new();
        for outcome in outcomes {
            if !outcome.applied {
                continue;
            }
            applied += 1;
            self.job_changes.changed(&outcome.firing_id.job_id);
            if chime_runtime::traces::enabled() {
                traced.insert(outcome.firing_id.clone());
            }
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
                self.alerts.publish(alert).await;
            }
        }
        if staged {
            self.immediate.wake();
        }
        if !traced.is_empty() {
            let events = events.iter().filter(|e| traced.contains(&e.firing_id));
            traces::finished(&self.store, events.cloned().collect(), applied_at);
        }
        self.finished.emit(|| applied);
        Ok(applied)
    }
    /// Consumes finished events until `shutdown` (see [`crate::pull`]),
    /// applying the first to arrive together with whatever follows it within
    /// `linger` (up to `batch`) as one batch. A failed pull is
    /// returned: the supervisor opens the consumer again.
    pub async fn consume(
        self,
        consumer: PullConsumer,
        shutdown: CancellationToken,
    ) -> Result<(), PullError> {
        let limit = self.config.batch.max(1);
        while !shutdown.is_cancelled() {
            let mut messages = pull::open(&consumer, self.config.batch, self.config.wait).await?;
            let mut open = true;
            while open {
                let first = tokio::select! {
                    m = messages.next() => m,
                    _ = shutdown.cancelled() => return Ok(()),
                };
                let Some(first) = first else { break };
                let mut batch = vec![first];
                open = take_ready(&mut messages, &mut batch, limit);
                if open && batch.len() < limit && !self.config.linger.is_zero() {
                    tokio::time::sleep(self.config.linger).await;
                    open = take_ready(&mut messages, &mut batch, limit);
                }
                self.apply_batch(batch).await?;
            }
        }
        Ok(())
    }

    /// Applies one batch of pulled events and acks, naks or dead-letters
    /// each (one pass of [`Finishes::consume`]); the last error
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
            match parse_request::<Finished>(&message.payload) {
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
                Err(mut error) => {
                    // No delivery will ever parse it: dead-letter it at once,
                    // naming the field serde stopped at.
                    error.message = format!("not a finished event: {}", error.message);
                    self.give_up(&message, error).await;
                }
            }
        }
        if events.is_empty() {
            return pulled;
        }
        let error = match self.apply(&events).await {
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
            match self.apply(std::slice::from_ref(event)).await {
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

    async fn dead_letter(&self, letter: DeadLetter) -> bool {
        letter
            .store(&self.jetstream, &self.subjects, &self.metrics)
            .await
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
    use super::take_ready;
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
