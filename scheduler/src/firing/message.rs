//! A firing's message in `CHIME_FIRE`: its headers and message ids, and
//! whether the stream still holds it.
//!
//! The publisher, the duplicate check and the republisher all build and
//! look for the same message; this is where its shape is written once.

use crate::store::StagedFiring;
use async_nats::jetstream::{self, stream::RawMessageErrorKind};
use async_nats::HeaderMap;
use chime_common::bounds::MAX_TIMEOUT;
use chime_common::duration::format_time;
use chime_common::traceparent::FiringTrace;
use chime_common::{headers, FiringId};
use chrono::Utc;

/// The `Nats-Msg-Id` of a firing: its id, suffixed by `~n` when a queued
/// firing is deliberately published again (n = publish_seq).
fn message_id(firing_id: &str, publish_seq: u32) -> String {
    if publish_seq == 0 {
        firing_id.to_string()
    } else {
        format!("{firing_id}~{publish_seq}")
    }
}

/// Header names built once: `HeaderName::from_static` neither validates nor
/// allocates, where a `&str` name does both for every message; values are
/// owned so they are not copied a second time (measured with
/// `cargo bench -p chime-scheduler --bench publish`, docs/PERFORMANCE.md).
mod names {
    use async_nats::HeaderName;
    use chime_common::headers;

    pub const NATS_MSG_ID: HeaderName = HeaderName::from_static(headers::NATS_MSG_ID);
    pub const FIRING_ID: HeaderName = HeaderName::from_static(headers::FIRING_ID);
    pub const JOB_ID: HeaderName = HeaderName::from_static(headers::JOB_ID);
    pub const HANDLER: HeaderName = HeaderName::from_static(headers::HANDLER);
    pub const SCHEDULED_AT: HeaderName = HeaderName::from_static(headers::SCHEDULED_AT);
    pub const DUE_AT: HeaderName = HeaderName::from_static(headers::DUE_AT);
    pub const ATTEMPT: HeaderName = HeaderName::from_static(headers::ATTEMPT);
    pub const PRIORITY: HeaderName = HeaderName::from_static(headers::PRIORITY);
    pub const DEADLINE: HeaderName = HeaderName::from_static(headers::DEADLINE);
    pub const TIMEOUT_MS: HeaderName = HeaderName::from_static(headers::TIMEOUT_MS);
    pub const SHARD: HeaderName = HeaderName::from_static(headers::SHARD);
    pub const SHARDS: HeaderName = HeaderName::from_static(headers::SHARDS);
    pub const WORKER_ID: HeaderName = HeaderName::from_static(headers::WORKER_ID);
    pub const TRACEPARENT: HeaderName = HeaderName::from_static(headers::TRACEPARENT);
}

/// The headers of a firing message (CONTRACT.md, "Firing messages").
pub fn firing_headers(firing: &StagedFiring, now: chrono::DateTime<Utc>) -> HeaderMap {
    let mut h = HeaderMap::new();
    // The start reply sets the real deadline. A timeout beyond the accepted
    // range (an old row; validation lets none in) is cut to the range here,
    // and the start fails that firing with the reason.
    let timeout = chrono::Duration::from_std(firing.timeout.min(MAX_TIMEOUT))
        .expect("MAX_TIMEOUT fits a chrono duration");
    let deadline = now
        .checked_add_signed(timeout)
        .unwrap_or(chrono::DateTime::<Utc>::MAX_UTC);
    let id = firing.id.to_string();
    h.insert(names::NATS_MSG_ID, message_id(&id, firing.publish_seq));
    h.insert(names::FIRING_ID, id);
    h.insert(names::JOB_ID, firing.job_id.as_str());
    h.insert(names::HANDLER, firing.handler.as_str());
    h.insert(names::SCHEDULED_AT, format_time(firing.scheduled_at));
    h.insert(names::DUE_AT, format_time(firing.due_at));
    h.insert(names::ATTEMPT, firing.attempt.to_string());
    h.insert(names::PRIORITY, firing.priority.to_string());
    h.insert(names::DEADLINE, format_time(deadline));
    h.insert(names::TIMEOUT_MS, firing.timeout.as_millis().to_string());
    if let Some(shard) = firing.id.shard {
        h.insert(names::SHARD, shard.to_string());
        h.insert(names::SHARDS, firing.shards.to_string());
    }
    if let Some(worker) = &firing.worker_id {
        h.insert(names::WORKER_ID, worker.as_str());
    }
    // Its trace (the one it keeps, or its instant's), its `published`
    // span the parent: the same for every attempt's every copy.
    let trace = FiringTrace::of(&firing.id, firing.traceparent.as_ref());
    h.insert(names::TRACEPARENT, trace.message(&firing.id).to_string());
    h
}

/// The message id of copy `n` (from 1) of a firing published again: never
/// the id of its first message (`<firing id>`) nor of a queued firing's
/// deliberate new publish (`<firing id>~<n>`).
pub fn copy_message_id(id: &FiringId, n: u32) -> String {
    format!("{id}~r{n}")
}

/// A firing JetStream acknowledged, to be marked published.
pub(crate) struct Acked {
    pub id: FiringId,
    /// The stream sequence that holds its message: where the republisher
    /// looks for it.
    pub stream_seq: u64,
    /// When the ack arrived.
    pub at: chrono::DateTime<Utc>,
}

/// Why a published firing's message is not there to be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No message at its sequence: acked or terminated without a start, or lost.
    MessageGone,
    /// Another message holds its sequence: its message id was taken by a
    /// message that is not this firing's (a forgery, or a stale copy).
    MessageReplaced,
    /// Its publish was acknowledged as a duplicate, but the firing's
    /// message was not in the stream (`duplicates.rs`).
    DuplicateAck,
}

impl Cause {
    /// The `cause` label of `chime_firings_republished_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::MessageGone => "message_gone",
            Cause::MessageReplaced => "message_replaced",
            Cause::DuplicateAck => "duplicate_ack",
        }
    }

    /// What happened to the message at `seq`, for logs and errors.
    pub fn describe(self, seq: u64) -> String {
        match self {
            Cause::MessageGone => format!(
                "its message (stream sequence {seq}) left the stream without a start"
            ),
            Cause::MessageReplaced => format!(
                "the message at its stream sequence {seq} is not this firing's (its message id was taken)"
            ),
            Cause::DuplicateAck => format!(
                "its publish was acknowledged as a duplicate of stream sequence {seq}, which does not hold its message"
            ),
        }
    }
}

/// Where a published firing's message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whereabouts {
    /// In the stream, waiting for a worker.
    Waiting,
    /// Not where its ack said.
    Gone(Cause),
    /// Not known: no sequence was recorded.
    Unknown,
}

/// Where the message of `firing` that JetStream acknowledged at `seq` is:
/// read back from the stream leader. Err when the stream cannot answer now.
pub(crate) async fn whereabouts(
    stream: &jetstream::stream::Stream<()>,
    seq: u64,
    firing: &StagedFiring,
) -> Result<Whereabouts, String> {
    match stream.get_raw_message(seq).await {
        Ok(message) => {
            let id = firing.id.to_string();
            let same_firing = message
                .headers
                .get(headers::FIRING_ID)
                .is_some_and(|v| v.as_str() == id);
            // A forged message may carry the real firing id; it never
            // carries what was staged (the start compares digests).
            Ok(if same_firing && message.payload == firing.payload {
                Whereabouts::Waiting
            } else {
                Whereabouts::Gone(Cause::MessageReplaced)
            })
        }
        Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {
            Ok(Whereabouts::Gone(Cause::MessageGone))
        }
        Err(e) => Err(e.to_string()),
    }
}

impl Acked {
    /// What the store's marker records of it.
    pub(crate) fn firing(&self) -> crate::store::AckedFiring {
        crate::store::AckedFiring {
            id: self.id.clone(),
            stream_seq: self.stream_seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::traceparent::{span_id, FiringSpan, TraceParent};
    use std::time::Duration;

    /// A staged first attempt of `id`, due and scheduled at `now`.
    fn staged(
        id: FiringId,
        now: chrono::DateTime<Utc>,
        timeout: Duration,
        shards: u32,
    ) -> StagedFiring {
        StagedFiring {
            job_id: id.job_id.clone(),
            id,
            group: "default".into(),
            priority: 5,
            handler: "shell".into(),
            payload: bytes::Bytes::from_static(b"null"),
            scheduled_at: now,
            due_at: now,
            attempt: 1,
            timeout,
            publish_seq: 0,
            shards,
            traceparent: None,
            staged_at: now,
            worker_id: None,
        }
    }

    #[test]
    fn firing_headers_follow_the_contract() {
        let scheduled_at = chrono::DateTime::parse_from_rfc3339("2026-03-28T01:30:00.250Z")
            .expect("a valid time")
            .with_timezone(&Utc);
        let mut firing = StagedFiring {
            id: FiringId {
                job_id: "nightly".into(),
                scheduled_ms: scheduled_at.timestamp_millis(),
                shard: None,
                attempt: 2,
            },
            job_id: "nightly".into(),
            group: "reports".into(),
            priority: 7,
            handler: "shell".into(),
            payload: bytes::Bytes::from_static(b"null"),
            scheduled_at,
            due_at: scheduled_at + chrono::Duration::seconds(4),
            attempt: 2,
            timeout: Duration::from_secs(600),
            publish_seq: 0,
            shards: 1,
            traceparent: None,
            staged_at: scheduled_at,
            worker_id: None,
        };
        let now = scheduled_at + chrono::Duration::seconds(5);
        let h = firing_headers(&firing, now);
        let value = |name: &str| h.get(name).map(|v| v.as_str().to_string());
        let id = "nightly@1774661400250#2";
        for (name, expected) in [
            (headers::NATS_MSG_ID, id),
            (headers::FIRING_ID, id),
            (headers::JOB_ID, "nightly"),
            (headers::HANDLER, "shell"),
            (headers::SCHEDULED_AT, "2026-03-28T01:30:00.250Z"),
            (headers::DUE_AT, "2026-03-28T01:30:04.250Z"),
            (headers::ATTEMPT, "2"),
            (headers::PRIORITY, "7"),
            (headers::DEADLINE, "2026-03-28T01:40:05.250Z"),
            (headers::TIMEOUT_MS, "600000"),
        ] {
            assert_eq!(value(name).as_deref(), Some(expected), "{name}");
        }
        // A queued firing published again gets a new message id, same firing id.
        firing.publish_seq = 3;
        let h = firing_headers(&firing, now);
        assert_eq!(
            h.get(headers::NATS_MSG_ID).map(|v| v.as_str()),
            Some("nightly@1774661400250#2~3")
        );
        assert_eq!(h.get(headers::FIRING_ID).map(|v| v.as_str()), Some(id));
        assert!(h.get(headers::SHARD).is_none() && h.get(headers::SHARDS).is_none());
    }

    #[test]
    fn a_shard_carries_its_shard_and_the_instant_s_count() {
        let now = Utc::now();
        let id = FiringId::of_shard("scan", now.timestamp_millis(), 3, 8, 1);
        let firing = staged(id.clone(), now, Duration::from_secs(60), 8);
        let h = firing_headers(&firing, now);
        let value = |name: &str| h.get(name).map(|v| v.as_str().to_string());
        assert_eq!(value(headers::SHARD).as_deref(), Some("3"));
        assert_eq!(value(headers::SHARDS).as_deref(), Some("8"));
        assert_eq!(value(headers::NATS_MSG_ID), Some(id.to_string()));
    }

    /// The `traceparent` of a message: valid W3C, its parent the firing's
    /// `published` span; the instant's trace for every attempt and copy,
    /// or the stored trace when the firing keeps one.
    #[test]
    fn every_message_carries_the_firing_s_trace() {
        let now = Utc::now();
        let traceparent = |firing: &StagedFiring| -> TraceParent {
            let h = firing_headers(firing, now);
            let text = h.get(headers::TRACEPARENT).expect("a traceparent").as_str();
            text.parse().expect("a valid traceparent")
        };
        let first = staged(
            FiringId::new("nightly", 1_000, 1),
            now,
            Duration::from_secs(60),
            1,
        );
        let mut retry = staged(first.id.next_attempt(), now, Duration::from_secs(60), 1);
        let of_first = traceparent(&first);
        assert_eq!(of_first.trace_id, FiringTrace::of(&first.id, None).trace_id);
        assert_eq!(
            of_first.parent_id,
            span_id(&first.id, 0, FiringSpan::Published)
        );
        assert!(of_first.sampled());
        let of_retry = traceparent(&retry);
        assert_eq!(
            of_retry.trace_id, of_first.trace_id,
            "one trace per instant"
        );
        assert_eq!(
            of_retry.parent_id,
            span_id(&retry.id, 0, FiringSpan::Published)
        );
        retry.publish_seq = 2;
        assert_eq!(
            traceparent(&retry),
            of_retry,
            "a held firing published again"
        );

        let given: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .expect("valid");
        retry.traceparent = Some(given);
        let kept = traceparent(&retry);
        assert_eq!(kept.trace_id, given.trace_id);
        assert_eq!(kept.parent_id, span_id(&retry.id, 0, FiringSpan::Published));
    }

    #[test]
    fn a_timeout_beyond_the_range_is_cut_to_it_instead_of_panicking() {
        let now = Utc::now();
        let id = FiringId {
            job_id: "huge".into(),
            scheduled_ms: now.timestamp_millis(),
            shard: None,
            attempt: 1,
        };
        let firing = staged(id, now, Duration::from_secs(300_000 * 365 * 24 * 3600), 1);
        let h = firing_headers(&firing, now);
        let deadline = now + chrono::Duration::from_std(MAX_TIMEOUT).unwrap();
        assert_eq!(
            h.get(headers::DEADLINE).map(|v| v.as_str().to_string()),
            Some(format_time(deadline))
        );
        assert_eq!(
            h.get(headers::FIRING_ID).map(|v| v.as_str().to_string()),
            Some(firing.id.to_string())
        );
    }
}
