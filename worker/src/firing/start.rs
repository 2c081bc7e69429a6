//! Asking the scheduler to start a firing (request/reply on the worker's own
//! `chime.worker.v1.start.<group>.<worker id>`).

use async_nats::{Client, Request, RequestErrorKind};
use chime_common::protocol::{payload_sha256, StartRefusal, StartReply, StartRequest};
use chime_common::FiringId;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Start requests sent for one delivery before giving up on it: a timed-out
/// request is repeated once (the scheduler answers a repeated start from the
/// same worker idempotently).
const START_ATTEMPTS: u32 = 2;

/// The first request waits this share of the start timeout, the repeat the
/// whole of it. A request that reached a replica just as it was killed gets
/// no answer; asking again after a quarter of the timeout (500 ms by
/// default) reaches a live replica sooner, while a slow but live store
/// still gets the full timeout on the second request.
const FIRST_ATTEMPT_SHARE: u32 = 4;

/// The scheduler's decision on one delivery.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StartDecision {
    /// Run it; the scheduler's deadline, if it sent one.
    Accepted { deadline: Option<DateTime<Utc>> },
    /// Drop it (ack, do not run).
    Refused(Option<StartRefusal>),
    /// No decision (no scheduler, timeout, garbage reply, `unavailable`):
    /// NAK it so it comes back, however often.
    Unavailable(String),
    /// The scheduler could not decide this firing for a reason of its own
    /// (an `internal` or `invalid_argument` error, already dead-lettered on
    /// its side): asked again a bounded number of times, then dropped.
    Rejected(String),
}

/// Deliveries of one firing the scheduler keeps rejecting before the worker
/// drops it (terminates the message); each waits twice as long as the last.
pub(crate) const MAX_REJECTED_DELIVERIES: u64 = 8;

/// How long a rejected firing stays away after its `delivered`-th delivery:
/// `nak_delay` doubling per delivery, at most a minute.
pub(crate) fn rejected_delay(nak_delay: Duration, delivered: u64) -> Duration {
    let doublings = u32::try_from(delivered.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(16);
    nak_delay
        .saturating_mul(1 << doublings)
        .min(Duration::from_secs(60))
}

/// Asks the scheduler to start firings for one worker of one group.
#[derive(Clone)]
pub(crate) struct Starter {
    client: Client,
    /// This worker's own start subject, `chime.worker.v1.start.<group>.<id>`.
    subject: String,
    worker_id: String,
    group: String,
    /// How long the whole request may take (see [`FIRST_ATTEMPT_SHARE`]).
    timeout: Duration,
}

impl Starter {
    pub(crate) fn new(
        client: Client,
        subject: String,
        worker_id: String,
        group: String,
        timeout: Duration,
    ) -> Self {
        Starter {
            client,
            subject,
            worker_id,
            group,
            timeout,
        }
    }

    /// Asks to start the firing `firing_id` that arrived with `handler` and
    /// `body`, and reads the decision; the scheduler compares both with
    /// what it staged.
    pub(crate) async fn ask(
        &self,
        firing_id: &FiringId,
        handler: &str,
        body: &[u8],
    ) -> StartDecision {
        let request = StartRequest {
            firing_id: firing_id.clone(),
            worker_id: self.worker_id.clone(),
            group: self.group.clone(),
            handler: Some(handler.to_string()),
            payload_sha256: Some(payload_sha256(body)),
        };
        request_start(&self.client, &self.subject, &request, self.timeout).await
    }
}

/// Sends `request` on `subject` and reads the decision.
async fn request_start(
    client: &Client,
    subject: &str,
    request: &StartRequest,
    timeout: Duration,
) -> StartDecision {
    let body = match serde_json::to_vec(request) {
        Ok(body) => body,
        Err(e) => {
            return StartDecision::Unavailable(format!("cannot encode the start request: {e}"))
        }
    };
    let mut last = String::new();
    for attempt in 1..=START_ATTEMPTS {
        let wait = if attempt == 1 {
            timeout / FIRST_ATTEMPT_SHARE
        } else {
            timeout
        };
        let sent = client
            .send_request(
                subject.to_string(),
                Request::new()
                    .payload(body.clone().into())
                    .timeout(Some(wait)),
            )
            .await;
        match sent {
            Ok(reply) => return decide(&reply.payload),
            Err(e) if e.kind() == RequestErrorKind::TimedOut && attempt < START_ATTEMPTS => {
                tracing::debug!(attempt, "start request timed out; asking again");
                last = e.to_string();
            }
            Err(e) if e.kind() == RequestErrorKind::NoResponders => {
                return StartDecision::Unavailable("no scheduler answers start requests".into());
            }
            Err(e) => {
                last = e.to_string();
                break;
            }
        }
    }
    StartDecision::Unavailable(format!("start request failed: {last}"))
}

/// Reads a reply: a [`StartReply`], or an API error `{"error": {...}}`.
///
/// A refusal reason this worker does not know (a newer scheduler) is still a
/// refusal; an unreadable deadline falls back to the message's own.
fn decide(payload: &[u8]) -> StartDecision {
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(value) => value,
        Err(e) => {
            return StartDecision::Unavailable(format!(
                "unreadable start reply ({e}): {}",
                String::from_utf8_lossy(&payload[..payload.len().min(200)])
            ))
        }
    };
    match value.get("accepted").and_then(serde_json::Value::as_bool) {
        Some(true) => StartDecision::Accepted {
            deadline: serde_json::from_value::<StartReply>(value)
                .ok()
                .and_then(|reply| reply.deadline),
        },
        Some(false) => StartDecision::Refused(
            value
                .get("refusal")
                .and_then(|r| serde_json::from_value::<StartRefusal>(r.clone()).ok()),
        ),
        None => match value.get("error") {
            Some(error) if error.get("code").and_then(|c| c.as_str()) == Some("unavailable") => {
                StartDecision::Unavailable(format!("the scheduler answered with an error: {error}"))
            }
            Some(error) => {
                StartDecision::Rejected(format!("the scheduler answered with an error: {error}"))
            }
            None => StartDecision::Unavailable(format!("unreadable start reply: {value}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_firings_stay_away_longer_each_time() {
        let base = Duration::from_secs(1);
        assert_eq!(rejected_delay(base, 1), base);
        assert_eq!(rejected_delay(base, 3), Duration::from_secs(4));
        assert_eq!(rejected_delay(base, 40), Duration::from_secs(60));
        assert_eq!(rejected_delay(base, u64::MAX), Duration::from_secs(60));
    }

    #[test]
    fn replies_map_to_decisions() {
        assert_eq!(
            decide(br#"{"accepted": true, "deadline": "2026-03-28T01:30:00.000Z"}"#),
            StartDecision::Accepted {
                deadline: Some("2026-03-28T01:30:00Z".parse().unwrap())
            }
        );
        assert_eq!(
            decide(br#"{"accepted": true}"#),
            StartDecision::Accepted { deadline: None }
        );
        assert_eq!(
            decide(br#"{"accepted": false, "refusal": "already_started"}"#),
            StartDecision::Refused(Some(StartRefusal::AlreadyStarted))
        );
        assert!(matches!(
            decide(br#"{"error": {"code": "unavailable", "message": "db down"}}"#),
            StartDecision::Unavailable(m) if m.contains("db down")
        ));
        assert!(matches!(
            decide(br#"{"error": {"code": "internal", "message": "corrupt row"}}"#),
            StartDecision::Rejected(m) if m.contains("corrupt row")
        ));
        assert!(matches!(decide(b"garbage"), StartDecision::Unavailable(_)));
        assert_eq!(
            decide(br#"{"accepted": false, "refusal": "some_future_reason"}"#),
            StartDecision::Refused(None)
        );
    }
}
