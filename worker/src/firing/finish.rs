//! Reporting finished runs: JSON on JetStream `chime.events.finished`, with
//! `Nats-Msg-Id: finished:<firing id>` so a re-sent report is dropped.
//!
//! Each report is kept in memory and retried with backoff until JetStream
//! acknowledges it, through NATS restarts; only the end of a shutdown's flush
//! grace stops the retries.

use crate::metrics::Metrics;
use crate::running::Running;
use async_nats::jetstream::{self, message::PublishMessage};
use chime_common::protocol::Finished;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Publishes finished events in the background.
#[derive(Clone)]
pub(crate) struct Reporter {
    jetstream: jetstream::Context,
    subject: String,
    tasks: TaskTracker,
    give_up: CancellationToken,
    unsent: Arc<AtomicUsize>,
    /// Lists each run in the heartbeats until its event is acknowledged.
    running: Running,
    metrics: Metrics,
}

impl Reporter {
    pub(crate) fn new(
        jetstream: jetstream::Context,
        subject: String,
        running: Running,
        metrics: Metrics,
    ) -> Self {
        Reporter {
            jetstream,
            subject,
            tasks: TaskTracker::new(),
            give_up: CancellationToken::new(),
            unsent: Arc::new(AtomicUsize::new(0)),
            running,
            metrics,
        }
    }

    /// Queues `finished` for publishing; returns at once.
    pub(crate) fn report(&self, finished: Finished) {
        let reporter = self.clone();
        self.tasks.spawn(async move {
            reporter.publish_until_acked(&finished).await;
            reporter.running.reported(&finished.firing_id);
        });
    }

    /// The message id of a finished event.
    pub(crate) fn message_id(finished: &Finished) -> String {
        format!("finished:{}", finished.firing_id)
    }

    async fn publish_until_acked(&self, finished: &Finished) {
        let body = match serde_json::to_vec(finished) {
            Ok(body) => bytes::Bytes::from(body),
            Err(e) => {
                tracing::error!(firing_id = %finished.firing_id, error = %e, "cannot encode a finished event");
                return;
            }
        };
        let id = Self::message_id(finished);
        let mut delay = FIRST_RETRY;
        let mut failures = 0u32;
        loop {
            let message = PublishMessage::build()
                .payload(body.clone())
                .message_id(&id);
            let attempt = async {
                let ack = self
                    .jetstream
                    .send_publish(self.subject.clone(), message)
                    .await
                    .map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())
            };
            let result = tokio::select! {
                result = attempt => result,
                _ = self.give_up.cancelled() => return self.gave_up(finished),
            };
            match result {
                Ok(_) => {
                    if failures > 0 {
                        tracing::info!(firing_id = %finished.firing_id, failures, "finished event published after retries");
                    }
                    return;
                }
                Err(error) => {
                    failures += 1;
                    self.metrics.report_retries.inc();
                    if failures == 1 {
                        tracing::warn!(firing_id = %finished.firing_id, %error, "cannot publish a finished event; retrying");
                    } else {
                        tracing::debug!(firing_id = %finished.firing_id, %error, failures, "finished event still not published");
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.give_up.cancelled() => return self.gave_up(finished),
            }
            delay = (delay * 2).min(MAX_RETRY);
        }
    }

    fn gave_up(&self, finished: &Finished) {
        self.unsent.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            firing_id = %finished.firing_id,
            outcome = finished.outcome.as_str(),
            "gave up publishing a finished event at shutdown; the scheduler will treat the firing as lost"
        );
    }

    /// Waits until every queued event is published, at most `grace`; then
    /// stops retrying. Returns how many events were given up.
    pub(crate) async fn flush(&self, grace: Duration) -> usize {
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            self.give_up.cancel();
            self.tasks.wait().await;
        }
        self.unsent.load(Ordering::Relaxed)
    }
}
