//! Dead letters: messages Chime could not apply after their retries.
//!
//! A finished event, start request or submission that keeps failing for a
//! reason of its own (not a store outage, which is retried without limit) is
//! published, body unchanged, to `chime.dead.<kind>` (stream `CHIME_DEAD`),
//! counted in `chime_dead_letters_total{kind}` and announced by a
//! `dead_letter` alert. Only once the dead letter is stored is the original
//! acked: if publishing fails, the original comes back and is tried again.
//! An alert a webhook never took (`ops/webhooks/`) is dead-lettered the same
//! way but raises no alert, which would go to the same failing webhook.
//! docs/OPERATIONS.md ("Dead letters") says how to inspect and replay one.

use crate::ops::metrics::Metrics;
use async_nats::jetstream;
use async_nats::HeaderMap;
use bytes::Bytes;
use chime_common::bounds::{check_name, MAX_ID_LEN};
use chime_common::error::ErrorReply;
use chime_common::protocol::{Alert, AlertKind};
use chime_common::{headers, ApiError, FiringId, Subjects};
use chrono::Utc;

/// Header of a dead letter: the subject the original was published on.
pub const SUBJECT_HEADER: &str = "Chime-Subject";
/// Header of a dead letter: how many times the original was delivered.
pub const DELIVERIES_HEADER: &str = "Chime-Deliveries";

/// What kind of message was given up on; the last token of its dead-letter
/// subject and the `kind` label of `chime_dead_letters_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterKind {
    /// A worker's finished event (`chime.events.finished`).
    Finished,
    /// A worker's start request (`chime.worker.v1.start`).
    Start,
    /// A durable submission (`chime.submit`).
    Submit,
    /// An alert (`chime.alerts`) an alert webhook did not take after its tries.
    Webhook,
}

impl DeadLetterKind {
    /// `finished`, `start`, `submit` or `webhook`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterKind::Finished => "finished",
            DeadLetterKind::Start => "start",
            DeadLetterKind::Submit => "submit",
            DeadLetterKind::Webhook => "webhook",
        }
    }

    /// Whether its dead letters raise a `dead_letter` alert: not an alert
    /// a webhook refused, whose alert would go the same way.
    fn raises_alert(self) -> bool {
        self != DeadLetterKind::Webhook
    }
}

/// A message given up on, with why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub kind: DeadLetterKind,
    /// The subject the original arrived on.
    pub subject: String,
    /// The original body, unchanged.
    pub body: Bytes,
    /// Why it could not be applied.
    pub error: ApiError,
    /// How many times it was delivered (1 for a start request; for an
    /// alert, how many times it was POSTed).
    pub deliveries: u64,
    /// For a JetStream original, `<stream>:<sequence>`: the dead letter's
    /// `Nats-Msg-Id`, so one published again (its original's ack was lost
    /// and it came back) is stored once.
    pub source: Option<String>,
}

/// Publishing a dead letter failed; the original must not be acked.
#[derive(Debug, thiserror::Error)]
#[error("cannot publish a dead letter to {subject}: {reason}")]
pub struct DeadLetterError {
    pub subject: String,
    pub reason: String,
}

/// How many times a JetStream message has been delivered, if its ack subject says.
pub fn deliveries(message: &jetstream::Message) -> Option<u64> {
    let info = message.info().ok()?;
    u64::try_from(info.delivered).ok()
}

/// Whether a message that failed for a reason of its own has had its last
/// delivery: its `max_deliveries`-th (or later, since store outages count
/// too), or one whose count cannot be read, so nothing is retried forever.
pub fn exhausted(message: &jetstream::Message, max_deliveries: u32) -> bool {
    deliveries(message).is_none_or(|n| n >= u64::from(max_deliveries))
}

impl DeadLetter {
    /// A dead letter for a JetStream message, with its delivery count.
    pub fn of_jetstream(
        kind: DeadLetterKind,
        message: &jetstream::Message,
        error: ApiError,
    ) -> DeadLetter {
        DeadLetter {
            kind,
            subject: message.subject.to_string(),
            body: message.payload.clone(),
            error,
            deliveries: deliveries(message).unwrap_or(1),
            source: message
                .info()
                .ok()
                .map(|i| format!("{}:{}", i.stream, i.stream_sequence)),
        }
    }

    /// A dead letter for a core NATS message (a start request: delivered once).
    pub fn of_core(kind: DeadLetterKind, message: &async_nats::Message, error: ApiError) -> Self {
        DeadLetter {
            kind,
            subject: message.subject.to_string(),
            body: message.payload.clone(),
            error,
            deliveries: 1,
            source: None,
        }
    }

    /// Stores the dead letter and logs a failure; false if it could not be
    /// stored, so the original must come back instead of being acked.
    pub async fn store(
        &self,
        jetstream: &jetstream::Context,
        subjects: &Subjects,
        metrics: &Metrics,
    ) -> bool {
        match self.publish(jetstream, subjects, metrics).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, kind = self.kind.as_str(), "cannot store a dead letter");
                false
            }
        }
    }

    /// Stores the dead letter (waiting for JetStream's ack), counts it and
    /// raises a `dead_letter` alert (for every kind but `webhook`).
    pub async fn publish(
        &self,
        jetstream: &jetstream::Context,
        subjects: &Subjects,
        metrics: &Metrics,
    ) -> Result<(), DeadLetterError> {
        let subject = subjects.dead(self.kind.as_str());
        let fail = |reason: String| DeadLetterError {
            subject: subject.clone(),
            reason,
        };
        let error_json = serde_json::to_string(&ErrorReply {
            error: self.error.clone(),
        })
        .map_err(|e| fail(format!("encoding the error: {e}")))?;
        let mut h = HeaderMap::new();
        h.insert(headers::ERROR, error_json.as_str());
        h.insert(SUBJECT_HEADER, self.subject.as_str());
        h.insert(DELIVERIES_HEADER, self.deliveries.to_string().as_str());
        if let Some(source) = &self.source {
            h.insert(
                headers::NATS_MSG_ID,
                format!("dead:{}:{source}", self.kind.as_str()).as_str(),
            );
        }
        let ack = jetstream
            .publish_with_headers(subject.clone(), h, self.body.clone())
            .await
            .map_err(|e| fail(e.to_string()))?;
        ack.await.map_err(|e| fail(e.to_string()))?;
        metrics
            .dead_letters
            .with_label_values(&[self.kind.as_str()])
            .inc();
        let names = Names::of(&self.body);
        tracing::error!(
            kind = self.kind.as_str(),
            subject = %self.subject,
            deliveries = self.deliveries,
            job_id = %names.job_id,
            error = %self.error,
            "message moved to the dead-letter stream"
        );
        if !self.kind.raises_alert() {
            return Ok(());
        }
        let alert = Alert {
            kind: AlertKind::DeadLetter,
            job_id: names.job_id,
            group: names.group,
            firing_id: names.firing_id,
            message: format!(
                "a {} message on {} could not be applied after {} deliveries and was moved to {subject}: {}",
                self.kind.as_str(),
                self.subject,
                self.deliveries,
                self.error.message
            ),
            at: Utc::now(),
            consecutive_failures: None,
            paused: false,
            lateness_ms: None,
        };
        crate::ops::alerts::publish(jetstream, subjects, metrics, &alert).await;
        Ok(())
    }
}

/// The job, firing and group a body names, for the alert; empty where it
/// names none (or names one that is not a valid id).
#[derive(Debug, Default, PartialEq)]
struct Names {
    job_id: String,
    firing_id: Option<FiringId>,
    group: String,
}

impl Names {
    /// Reads `firing_id` (events, start requests), else `id` (a JobSpec),
    /// and `group` from a JSON object body.
    fn of(body: &[u8]) -> Names {
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(body) else {
            return Names::default();
        };
        let text = |key: &str| {
            fields
                .get(key)
                .and_then(serde_json::Value::as_str)
                .filter(|s| check_name(s, MAX_ID_LEN).is_ok())
                .map(str::to_string)
        };
        let firing_id = fields
            .get("firing_id")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| s.parse::<FiringId>().ok())
            .filter(|id| check_name(&id.job_id, MAX_ID_LEN).is_ok());
        let job_id = match &firing_id {
            Some(id) => id.job_id.clone(),
            None => text("id").unwrap_or_default(),
        };
        Names {
            job_id,
            firing_id,
            group: text("group").unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_events_and_specs() {
        let event = Names::of(br#"{"firing_id": "nightly@1000#2", "worker_id": "w"}"#);
        assert_eq!(event.job_id, "nightly");
        assert_eq!(event.firing_id, Some(FiringId::new("nightly", 1000, 2)));
        let start = Names::of(br#"{"firing_id": "a@1#1", "group": "reports"}"#);
        assert_eq!(start.group, "reports");
        let spec = Names::of(br#"{"id": "report", "handler": "shell"}"#);
        assert_eq!(spec.job_id, "report");
        assert_eq!(spec.firing_id, None);
    }

    #[test]
    fn malformed_or_hostile_bodies_name_nothing() {
        assert_eq!(Names::of(b"not json"), Names::default());
        assert_eq!(Names::of(b"[1, 2]"), Names::default());
        assert_eq!(Names::of(&[0xff, 0x00, 0xfe]), Names::default());
        let long = format!(r#"{{"id": "{}"}}"#, "x".repeat(10_000));
        assert_eq!(Names::of(long.as_bytes()), Names::default());
        let bad_firing = Names::of(br#"{"firing_id": "no separators", "id": "job"}"#);
        assert_eq!(bad_firing.firing_id, None);
        assert_eq!(bad_firing.job_id, "job");
    }
}
