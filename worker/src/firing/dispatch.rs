//! One fetched message, from receipt to report: check it, ask to start it,
//! ack or NAK it, run it, report how it ended.

use crate::context::FiringContext;
use crate::message::FiringMessage;
use crate::run::run;
use crate::slots::Slot;
use crate::start::{
    refusal_label, rejected_delay, request_start, StartDecision, MAX_REJECTED_DELIVERIES,
};
use crate::worker::Shared;
use async_nats::jetstream::{self, AckKind};
use chime_common::protocol::{Finished, StartRequest};
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Handles one delivery; `slot` is the thread it holds until the run ends.
pub(crate) async fn dispatch(shared: Arc<Shared>, message: jetstream::Message, slot: Slot) {
    let firing = match FiringMessage::parse(message.headers.as_ref(), &message.payload) {
        Ok(firing) => firing,
        Err(error) => {
            shared.metrics.bad_messages.inc();
            tracing::warn!(subject = %message.subject, %error, "terminating a message that is not a valid firing");
            if let Err(e) = message.ack_with(AckKind::Term).await {
                tracing::warn!(error = %e, "cannot terminate a bad message; it will be redelivered");
            }
            return;
        }
    };
    let span = tracing::info_span!(
        "firing",
        firing_id = %firing.firing_id,
        job_id = %firing.job_id,
        attempt = firing.attempt,
    );
    handle(shared, message, firing, slot).instrument(span).await
}

async fn handle(
    shared: Arc<Shared>,
    message: jetstream::Message,
    firing: FiringMessage,
    slot: Slot,
) {
    let id = firing.firing_id.clone();
    let Some(control) = shared.running.claim(&id) else {
        // This worker runs or just ran this attempt: a redelivery. It is ours; drop the copy.
        shared
            .metrics
            .start_refusals
            .with_label_values(&["duplicate_delivery"])
            .inc();
        tracing::info!("dropping a second delivery of an attempt this worker holds");
        ack(&message, AckKind::Ack).await;
        return;
    };
    if control.token().is_cancelled() {
        // Shutting down past the drain grace, or fenced: leave it to another worker.
        shared.running.release(&id);
        ack(&message, AckKind::Nak(None)).await;
        return;
    }

    let request = StartRequest {
        firing_id: id.clone(),
        worker_id: shared.config.worker_id.clone(),
        group: shared.config.group.clone(),
    };
    let subject = shared.subjects.worker_start();
    let asked = Instant::now();
    let decision = request_start(
        &shared.client,
        &subject,
        &request,
        shared.config.start_timeout,
    )
    .await;
    shared
        .metrics
        .start_decision
        .observe(asked.elapsed().as_secs_f64());
    let reply_deadline = match decision {
        StartDecision::Accepted { deadline } => deadline,
        StartDecision::Refused(refusal) => {
            shared.running.release(&id);
            let reason = refusal_label(refusal);
            shared
                .metrics
                .start_refusals
                .with_label_values(&[reason])
                .inc();
            tracing::info!(reason, "start refused; dropping the delivery");
            ack(&message, AckKind::Ack).await;
            return;
        }
        StartDecision::Rejected(error) => {
            shared.running.release(&id);
            shared
                .metrics
                .start_refusals
                .with_label_values(&["rejected"])
                .inc();
            let delivered = message.info().map(|info| info.delivered).unwrap_or(1);
            let delivered = u64::try_from(delivered).unwrap_or(1);
            if delivered >= MAX_REJECTED_DELIVERIES {
                tracing::error!(%error, delivered, "the scheduler keeps rejecting this firing; dropping it");
                ack(&message, AckKind::Term).await;
            } else {
                let delay = rejected_delay(shared.config.nak_delay, delivered);
                tracing::warn!(%error, delivered, ?delay, "start rejected; asking again later");
                ack(&message, AckKind::Nak(Some(delay))).await;
            }
            return;
        }
        StartDecision::Unavailable(error) => {
            shared.running.release(&id);
            shared
                .metrics
                .start_refusals
                .with_label_values(&["scheduler_unavailable"])
                .inc();
            tracing::warn!(%error, delay = ?shared.config.nak_delay, "no start decision; handing the firing back");
            ack(&message, AckKind::Nak(Some(shared.config.nak_delay))).await;
            return;
        }
    };

    // From here the scheduler's executing table owns the firing.
    ack(&message, AckKind::Ack).await;
    let now = Utc::now();
    let lateness = (now - firing.due_at).to_std().unwrap_or_default();
    shared
        .metrics
        .start_lateness
        .observe(lateness.as_secs_f64());
    let deadline = deadline_of(&firing, reply_deadline, now);
    let handler = shared.handlers.get(&firing.handler);
    let label = shared.handlers.label(&firing.handler).to_string();
    tracing::info!(handler = %firing.handler, deadline = %deadline, "firing started");

    let ctx = FiringContext {
        firing_id: id.clone(),
        job_id: firing.job_id,
        handler: firing.handler,
        scheduled_at: firing.scheduled_at,
        due_at: firing.due_at,
        attempt: firing.attempt,
        priority: firing.priority,
        deadline,
        payload: firing.payload,
        cancel: control.token().clone(),
        max_output_bytes: shared.config.max_output_bytes,
        worker_id: shared.config.worker_id.clone(),
    };
    let report = run(handler, ctx, &control, shared.config.stop_grace).await;
    shared.running.finish(&id, Instant::now());
    drop(slot);

    shared
        .metrics
        .firings
        .with_label_values(&[&label, report.outcome.as_str()])
        .inc();
    shared
        .metrics
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
    shared.reporter.report(Finished {
        firing_id: id,
        worker_id: shared.config.worker_id.clone(),
        outcome: report.outcome,
        error: report.error,
        output: report.output,
        started_at: report.started_at,
        finished_at: report.finished_at,
    });
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

async fn ack(message: &jetstream::Message, kind: AckKind) {
    let what = match kind {
        AckKind::Ack => "ack",
        AckKind::Nak(_) => "nak",
        AckKind::Term => "terminate",
        _ => "acknowledge",
    };
    if let Err(error) = message.ack_with(kind).await {
        tracing::warn!(%error, "cannot {what} the firing message; JetStream will redeliver it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::FiringId;
    use std::time::Duration;

    #[test]
    fn the_reply_deadline_wins_then_the_timeout_then_the_header() {
        let now: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut firing = FiringMessage {
            firing_id: FiringId::new("j", 1, 1),
            job_id: "j".into(),
            handler: "h".into(),
            scheduled_at: now,
            due_at: now,
            attempt: 1,
            priority: 5,
            deadline: now + chrono::Duration::hours(1),
            timeout: Some(Duration::from_secs(60)),
            payload: serde_json::Value::Null,
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
