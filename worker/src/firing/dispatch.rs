//! One fetched message, from receipt to report: check it, ask to start it,
//! ack or NAK it, run it, report how it ended.

use crate::config::WorkerConfig;
use crate::firing::context::FiringContext;
use crate::firing::delivery::Delivery;
use crate::firing::finish::Reporter;
use crate::firing::message::BadMessage;
use crate::firing::message::FiringMessage;
use crate::firing::run::run;
use crate::firing::start::{rejected_delay, StartDecision, Starter, MAX_REJECTED_DELIVERIES};
use crate::firing::trace::{self, HandlerSpan};
use crate::handler::Handlers;
use crate::metrics::Metrics;
use crate::running::Running;
use crate::slots::Slot;
use async_nats::jetstream::AckKind;
use chime_common::headers;
use chime_common::protocol::{Finished, StartRefusal};
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Takes deliveries from receipt to report; one per worker, shared by the
/// tasks of its firings.
pub(crate) struct Dispatcher {
    starter: Starter,
    handlers: Handlers,
    running: Running,
    reporter: Reporter,
    metrics: Metrics,
    worker_id: String,
    /// The worker's group, for its spans.
    group: String,
    /// How long a firing the scheduler did not decide on stays away.
    nak_delay: Duration,
    /// See [`WorkerConfig::stop_grace`].
    stop_grace: Duration,
    max_output_bytes: usize,
}

impl Dispatcher {
    pub(crate) fn new(
        config: &WorkerConfig,
        starter: Starter,
        handlers: Handlers,
        running: Running,
        reporter: Reporter,
        metrics: Metrics,
    ) -> Self {
        Dispatcher {
            starter,
            handlers,
            running,
            reporter,
            metrics,
            worker_id: config.worker_id.clone(),
            group: config.group.clone(),
            nak_delay: config.nak_delay,
            stop_grace: config.stop_grace,
            max_output_bytes: config.max_output_bytes,
        }
    }

    /// Handles one delivery; `slot` is the thread it holds until the run ends.
    pub(crate) async fn dispatch(self: Arc<Self>, message: Delivery, slot: Slot) {
        let parsed = FiringMessage::parse(message.headers(), message.payload())
            .and_then(|parsed| self.addressed_here(&message, parsed));
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(error) => {
                self.metrics.bad_messages.inc();
                tracing::warn!(subject = %message.subject(), %error, "dropping a message that is not a valid firing (terminated if pulled)");
                message.ack(AckKind::Term).await;
                return;
            }
        };
        let span = tracing::info_span!(
            "firing",
            firing_id = %parsed.firing.firing_id,
            job_id = %parsed.firing.job_id,
            attempt = parsed.firing.attempt,
        );
        self.handle(message, parsed, slot).instrument(span).await
    }

    /// An offer must name this worker in `Chime-Worker-Id`; a pulled
    /// message is checked by the scheduler at its start.
    fn addressed_here(
        &self,
        message: &Delivery,
        parsed: FiringMessage,
    ) -> Result<FiringMessage, BadMessage> {
        if !matches!(message, Delivery::Offered(_)) {
            return Ok(parsed);
        }
        let named = message
            .headers()
            .and_then(|h| h.get(headers::WORKER_ID))
            .map(|v| v.as_str());
        match named {
            Some(id) if id == self.worker_id => Ok(parsed),
            Some(id) => Err(BadMessage::Invalid {
                header: headers::WORKER_ID,
                reason: format!("an offer for worker {id:?}, not this one"),
            }),
            None => Err(BadMessage::Missing(headers::WORKER_ID)),
        }
    }

    async fn handle(&self, message: Delivery, parsed: FiringMessage, slot: Slot) {
        let firing = &parsed.firing;
        let id = firing.firing_id.clone();
        let Some(control) = self.running.claim(&id) else {
            // This worker runs or just ran this attempt: a redelivery. It is ours; drop the copy.
            self.metrics
                .start_refusals
                .with_label_values(&["duplicate_delivery"])
                .inc();
            tracing::info!("dropping a second delivery of an attempt this worker holds");
            message.ack(AckKind::Ack).await;
            return;
        };
        if control.token().is_cancelled() {
            // Shutting down past the drain grace, or fenced: leave it to
            // another worker. With a delay, as every NAK of a firing this
            // worker will not start (docs/PROTOCOL.md §4): a bare NAK is
            // redelivered at once, to whichever worker asks first.
            self.running.release(&id);
            message.ack(AckKind::Nak(Some(self.nak_delay))).await;
            return;
        }

        let asked = Instant::now();
        let decision = self
            .starter
            .ask(&id, &firing.handler, message.payload())
            .await;
        self.metrics
            .start_decision
            .observe(asked.elapsed().as_secs_f64());
        let reply_deadline = match decision {
            StartDecision::Accepted { deadline } => deadline,
            StartDecision::Refused(refusal) => {
                self.running.release(&id);
                let reason = refusal.map_or("unspecified", StartRefusal::as_str);
                self.metrics
                    .start_refusals
                    .with_label_values(&[reason])
                    .inc();
                tracing::info!(reason, "start refused; dropping the delivery");
                message.ack(AckKind::Ack).await;
                return;
            }
            StartDecision::Rejected(error) => {
                self.running.release(&id);
                self.metrics
                    .start_refusals
                    .with_label_values(&["rejected"])
                    .inc();
                let delivered = message.delivered();
                if delivered >= MAX_REJECTED_DELIVERIES {
                    tracing::error!(%error, delivered, "the scheduler keeps rejecting this firing; dropping it");
                    message.ack(AckKind::Term).await;
                } else {
                    let delay = rejected_delay(self.nak_delay, delivered);
                    tracing::warn!(%error, delivered, ?delay, "start rejected; asking again later");
                    message.ack(AckKind::Nak(Some(delay))).await;
                }
                return;
            }
            StartDecision::Unavailable(error) => {
                self.running.release(&id);
                self.metrics
                    .start_refusals
                    .with_label_values(&["scheduler_unavailable"])
                    .inc();
                tracing::warn!(%error, delay = ?self.nak_delay, "no start decision; handing the firing back");
                message.ack(AckKind::Nak(Some(self.nak_delay))).await;
                return;
            }
        };

        // From here the scheduler's executing table owns the firing, and
        // the heartbeats list it until its report is acknowledged.
        self.running.accepted(&id);
        message.ack(AckKind::Ack).await;
        let now = Utc::now();
        let lateness = (now - firing.due_at).to_std().unwrap_or_default();
        self.metrics.start_lateness.observe(lateness.as_secs_f64());
        let deadline = deadline_of(&parsed, reply_deadline, now);
        let handler = self.handlers.get(&firing.handler);
        let label = self.handlers.label(&firing.handler).to_string();
        tracing::info!(handler = %firing.handler, deadline = %deadline, "firing started");

        let traceparent = trace::run_context(&parsed.firing);
        let handler_span = HandlerSpan::of(&parsed.firing, traceparent);
        let ctx = FiringContext {
            firing: parsed.firing,
            deadline,
            cancel: control.token().clone(),
            max_output_bytes: self.max_output_bytes,
            worker_id: self.worker_id.clone(),
            traceparent,
        };
        let report = run(handler, ctx, &control, self.stop_grace).await;
        if let Some(span) = handler_span {
            span.record(&report, &self.group, &self.worker_id);
        }
        self.running.finish(&id, Instant::now());
        drop(slot);

        self.metrics
            .firings
            .with_label_values(&[&label, report.outcome.as_str()])
            .inc();
        self.metrics
            .run_duration
            .with_label_values(&[&label])
            .observe(report.duration.as_secs_f64());
        match &report.error {
            None => {
                tracing::info!(outcome = report.outcome.as_str(), duration = ?report.duration, "firing finished")
            }
            Some(error) => {
                tracing::info!(outcome = report.outcome.as_str(), duration = ?report.duration, %error, "firing finished")
            }
        }
        self.reporter.report(Finished {
            firing_id: id,
            worker_id: self.worker_id.clone(),
            outcome: report.outcome,
            error: report.error,
            interrupted: report.interrupted,
            output: report.output,
            started_at: report.started_at,
            finished_at: report.finished_at,
        });
    }
}

/// The run's cut-off: the scheduler's, else start + `Chime-Timeout-Ms`, else `Chime-Deadline`.
fn deadline_of(
    firing: &FiringMessage,
    from_reply: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    if let Some(deadline) = from_reply {
        return deadline;
    }
    firing
        .timeout
        .and_then(|t| chrono::Duration::from_std(t).ok())
        .and_then(|t| now.checked_add_signed(t))
        .unwrap_or(firing.deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firing::message::FiringDetails;
    use chime_common::FiringId;

    #[test]
    fn the_reply_deadline_wins_then_the_timeout_then_the_header() {
        let now: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut firing = FiringMessage {
            firing: FiringDetails {
                firing_id: FiringId::new("j", 1, 1),
                job_id: "j".into(),
                handler: "h".into(),
                scheduled_at: now,
                due_at: now,
                attempt: 1,
                priority: 5,
                payload: serde_json::Value::Null,
                shard: None,
                traceparent: None,
            },
            deadline: now + chrono::Duration::hours(1),
            timeout: Some(Duration::from_secs(60)),
        };
        let reply = now + chrono::Duration::seconds(5);
        assert_eq!(deadline_of(&firing, Some(reply), now), reply);
        assert_eq!(
            deadline_of(&firing, None, now),
            now + chrono::Duration::seconds(60)
        );
        firing.timeout = None;
        assert_eq!(
            deadline_of(&firing, None, now),
            now + chrono::Duration::hours(1)
        );
    }
}
