//! Reading a firing message: its headers and JSON body (docs/PROTOCOL.md, "Firing messages").

use async_nats::HeaderMap;
use chime_common::duration::parse_time_str;
use chime_common::headers;
use chime_common::traceparent::TraceParent;
use chime_common::FiringId;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// What a firing is: which job and attempt, what to run, when it was due.
/// Read from the message once and handed to the handler as it is, inside
/// its [`FiringContext`](crate::FiringContext).
#[derive(Debug, Clone, PartialEq)]
pub struct FiringDetails {
    /// `<job id>@<scheduled ms>#<attempt>`, or
    /// `<job id>@<scheduled ms>.<shard>#<attempt>` for a shard.
    pub firing_id: FiringId,
    pub job_id: String,
    /// The handler name the firing asked for.
    pub handler: String,
    /// The instant the schedule produced.
    pub scheduled_at: DateTime<Utc>,
    /// When the firing was due for publishing (`Chime-Due-At`): the
    /// scheduled instant, or later for a retry.
    pub due_at: DateTime<Utc>,
    /// 1, 2, …
    pub attempt: u32,
    /// 0–9.
    pub priority: u8,
    /// The job's payload (JSON `null` when the message had no body).
    pub payload: serde_json::Value,
    /// A sharded job's shard (`Chime-Shard`, `Chime-Shards`); `None` when unsharded.
    pub shard: Option<Shard>,
    /// The message's `traceparent`: the firing's trace, its `published`
    /// span the parent. `None` when it had none or a malformed one (a run
    /// then starts a trace of its own; never a reason to refuse it).
    pub traceparent: Option<TraceParent>,
}

/// Which shard of its instant a firing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0…`count`-1.
    pub index: u32,
    /// How many shards the instant has.
    pub count: u32,
}

/// A firing message, checked: the firing, and the two headers that only
/// decide its deadline (the run's own deadline is fixed at start).
#[derive(Debug, Clone, PartialEq)]
pub struct FiringMessage {
    pub firing: FiringDetails,
    /// `Chime-Deadline`: the cut-off if the run starts at once.
    pub deadline: DateTime<Utc>,
    /// `Chime-Timeout-Ms`, if present.
    pub timeout: Option<Duration>,
}

/// Why a message is not a firing; such messages are terminated, never run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadMessage {
    #[error("the message has no headers")]
    NoHeaders,
    #[error("header {0} is missing")]
    Missing(&'static str),
    #[error("header {header} is invalid: {reason}")]
    Invalid {
        header: &'static str,
        reason: String,
    },
    #[error("the body is not JSON: {0}")]
    Body(String),
}

impl FiringMessage {
    /// Reads a firing from a message's headers and body.
    pub fn parse(headers: Option<&HeaderMap>, body: &[u8]) -> Result<FiringMessage, BadMessage> {
        let headers = headers.ok_or(BadMessage::NoHeaders)?;
        let get = |name: &'static str| -> Result<&str, BadMessage> {
            headers
                .get(name)
                .map(|v| v.as_str().trim())
                .filter(|v| !v.is_empty())
                .ok_or(BadMessage::Missing(name))
        };
        let invalid =
            |header: &'static str| move |reason: String| BadMessage::Invalid { header, reason };

        let firing_id: FiringId = get(headers::FIRING_ID)?
            .parse()
            .map_err(invalid(headers::FIRING_ID))?;
        let job_id = get(headers::JOB_ID)?.to_string();
        if job_id != firing_id.job_id {
            return Err(invalid(headers::JOB_ID)(format!(
                "{job_id:?} is not the job of firing {firing_id}"
            )));
        }
        let handler = get(headers::HANDLER)?.to_string();
        let scheduled_at =
            parse_time_str(get(headers::SCHEDULED_AT)?).map_err(invalid(headers::SCHEDULED_AT))?;
        let due_at = match headers.get(headers::DUE_AT).map(|v| v.as_str().trim()) {
            None | Some("") => scheduled_at,
            Some(text) => parse_time_str(text).map_err(invalid(headers::DUE_AT))?,
        };
        let attempt: u32 = get(headers::ATTEMPT)?
            .parse()
            .map_err(|e| invalid(headers::ATTEMPT)(format!("not a whole number ({e})")))?;
        if attempt != firing_id.attempt {
            return Err(invalid(headers::ATTEMPT)(format!(
                "{attempt} is not the attempt of firing {firing_id}"
            )));
        }
        let priority: u8 = get(headers::PRIORITY)?
            .parse()
            .ok()
            .filter(|p| *p <= 9)
            .ok_or_else(|| invalid(headers::PRIORITY)("must be an integer from 0 to 9".into()))?;
        let deadline =
            parse_time_str(get(headers::DEADLINE)?).map_err(invalid(headers::DEADLINE))?;
        let timeout = match headers.get(headers::TIMEOUT_MS).map(|v| v.as_str().trim()) {
            None | Some("") => None,
            Some(text) => Some(Duration::from_millis(text.parse().map_err(|e| {
                invalid(headers::TIMEOUT_MS)(format!("not a whole number of milliseconds ({e})"))
            })?)),
        };
        let shard = read_shard(headers, &firing_id)?;
        let traceparent = headers
            .get(headers::TRACEPARENT)
            .and_then(|v| TraceParent::parse(v.as_str().trim()).ok());
        let payload = if body.iter().all(u8::is_ascii_whitespace) {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(body).map_err(|e| BadMessage::Body(e.to_string()))?
        };
        Ok(FiringMessage {
            firing: FiringDetails {
                firing_id,
                job_id,
                handler,
                scheduled_at,
                due_at,
                attempt,
                priority,
                payload,
                shard,
                traceparent,
            },
            deadline,
            timeout,
        })
    }
}

/// The shard headers, checked against the firing id: both present exactly
/// when the id names a shard, the shard below the count and the id's own.
fn read_shard(headers: &HeaderMap, firing_id: &FiringId) -> Result<Option<Shard>, BadMessage> {
    let value = |name| {
        headers
            .get(name)
            .map(|v| v.as_str().trim())
            .filter(|v| !v.is_empty())
    };
    let invalid = |header: &'static str, reason: String| BadMessage::Invalid { header, reason };
    let (index, count) = match (
        firing_id.shard,
        value(headers::SHARD),
        value(headers::SHARDS),
    ) {
        (None, None, None) => return Ok(None),
        (None, Some(_), _) | (None, _, Some(_)) => {
            return Err(invalid(
                headers::SHARD,
                format!("firing {firing_id} is not a shard"),
            ))
        }
        (Some(_), None, _) => return Err(BadMessage::Missing(headers::SHARD)),
        (Some(_), _, None) => return Err(BadMessage::Missing(headers::SHARDS)),
        (Some(_), Some(index), Some(count)) => (index, count),
    };
    let index: u32 = index
        .parse()
        .map_err(|e| invalid(headers::SHARD, format!("not a whole number ({e})")))?;
    let count: u32 = count
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| invalid(headers::SHARDS, "must be a whole number above 0".into()))?;
    if Some(index) != firing_id.shard || index >= count {
        return Err(invalid(
            headers::SHARD,
            format!("{index} of {count} is not the shard of firing {firing_id}"),
        ));
    }
    Ok(Some(Shard { index, count }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(headers::NATS_MSG_ID, "job-1@1774661400000#2");
        h.insert(headers::FIRING_ID, "job-1@1774661400000#2");
        h.insert(headers::JOB_ID, "job-1");
        h.insert(headers::HANDLER, "echo");
        h.insert(headers::SCHEDULED_AT, "2026-03-28T01:30:00.000Z");
        h.insert(headers::DUE_AT, "2026-03-28T01:30:05.000Z");
        h.insert(headers::ATTEMPT, "2");
        h.insert(headers::PRIORITY, "5");
        h.insert(headers::DEADLINE, "2026-03-28T02:30:05.000Z");
        h.insert(headers::TIMEOUT_MS, "3600000");
        h
    }

    #[test]
    fn a_complete_message_parses() {
        let m = FiringMessage::parse(Some(&good()), br#"{"x": 1}"#).unwrap();
        assert_eq!(m.timeout, Some(Duration::from_secs(3600)));
        let m = m.firing;
        assert_eq!(m.firing_id, FiringId::new("job-1", 1_774_661_400_000, 2));
        assert_eq!(m.handler, "echo");
        assert_eq!(m.attempt, 2);
        assert_eq!(m.priority, 5);
        assert_eq!(m.payload, serde_json::json!({"x": 1}));
        assert!(m.due_at > m.scheduled_at);
    }

    #[test]
    fn a_shard_is_read_and_checked_against_its_id() {
        let sharded = || {
            let mut h = good();
            h.insert(headers::FIRING_ID, "job-1@1774661400000.3#2");
            h.insert(headers::SHARD, "3");
            h.insert(headers::SHARDS, "8");
            h
        };
        let m = FiringMessage::parse(Some(&sharded()), b"").unwrap().firing;
        assert_eq!(m.shard, Some(Shard { index: 3, count: 8 }));
        assert_eq!(m.firing_id.shard, Some(3));
        // A broadcast to one worker: shard 0 of 1.
        let mut h = good();
        h.insert(headers::FIRING_ID, "job-1@1774661400000.0#2");
        h.insert(headers::SHARD, "0");
        h.insert(headers::SHARDS, "1");
        let m = FiringMessage::parse(Some(&h), b"").unwrap().firing;
        assert_eq!(m.shard, Some(Shard { index: 0, count: 1 }));
        assert_eq!(
            FiringMessage::parse(Some(&good()), b"")
                .unwrap()
                .firing
                .shard,
            None
        );
        for (name, value, header) in [
            (headers::SHARD, "4", headers::SHARD),
            (headers::SHARD, "x", headers::SHARD),
            (headers::SHARDS, "3", headers::SHARD),
            (headers::SHARDS, "0", headers::SHARDS),
            (headers::SHARDS, "-8", headers::SHARDS),
        ] {
            let mut h = sharded();
            h.insert(name, value);
            match FiringMessage::parse(Some(&h), b"") {
                Err(BadMessage::Invalid { header: found, .. }) => assert_eq!(found, header),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        let mut h = sharded();
        h.insert(headers::SHARDS, "");
        assert_eq!(
            FiringMessage::parse(Some(&h), b""),
            Err(BadMessage::Missing(headers::SHARDS))
        );
        // Shard headers on a firing that is not a shard.
        let mut h = good();
        h.insert(headers::SHARD, "0");
        h.insert(headers::SHARDS, "2");
        assert!(matches!(
            FiringMessage::parse(Some(&h), b""),
            Err(BadMessage::Invalid {
                header: headers::SHARD,
                ..
            })
        ));
    }

    /// A firing's trace is read from its `traceparent`; a malformed one is
    /// ignored (the run starts a trace of its own), never a bad message.
    #[test]
    fn the_traceparent_is_read_and_a_malformed_one_ignored() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut h = good();
        h.insert(headers::TRACEPARENT, valid);
        let m = FiringMessage::parse(Some(&h), b"{}").unwrap();
        assert_eq!(
            m.firing.traceparent.map(|t| t.to_string()).as_deref(),
            Some(valid)
        );
        for bad in [
            "",
            "nonsense",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let mut h = good();
            h.insert(headers::TRACEPARENT, bad);
            let m = FiringMessage::parse(Some(&h), b"{}").expect("still a firing");
            assert_eq!(m.firing.traceparent, None, "{bad:?}");
        }
        let m = FiringMessage::parse(Some(&good()), b"{}").unwrap();
        assert_eq!(m.firing.traceparent, None, "no header");
    }

    #[test]
    fn optional_headers_and_empty_bodies_have_defaults() {
        let mut h = good();
        h.insert(headers::DUE_AT, "");
        h.insert(headers::TIMEOUT_MS, "");
        let m = FiringMessage::parse(Some(&h), b"").unwrap();
        assert_eq!(m.timeout, None);
        assert_eq!(m.firing.due_at, m.firing.scheduled_at);
        assert_eq!(m.firing.payload, serde_json::Value::Null);
    }

    #[test]
    fn garbage_is_rejected_with_the_header_named() {
        assert_eq!(
            FiringMessage::parse(None, b"{}"),
            Err(BadMessage::NoHeaders)
        );
        let cases: [(&str, &str); 7] = [
            (headers::FIRING_ID, "not-a-firing"),
            (headers::JOB_ID, "other-job"),
            (headers::SCHEDULED_AT, "yesterday"),
            (headers::ATTEMPT, "3"),
            (headers::PRIORITY, "12"),
            (headers::DEADLINE, "soon"),
            (headers::TIMEOUT_MS, "-5"),
        ];
        for (name, value) in cases {
            let mut h = good();
            h.insert(name, value);
            match FiringMessage::parse(Some(&h), b"{}") {
                Err(BadMessage::Invalid { header, .. }) => assert_eq!(header, name),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        let mut h = HeaderMap::new();
        h.insert(headers::FIRING_ID, "job-1@1#1");
        assert_eq!(
            FiringMessage::parse(Some(&h), b"{}"),
            Err(BadMessage::Missing(headers::JOB_ID))
        );
        assert!(matches!(
            FiringMessage::parse(Some(&good()), b"{nope"),
            Err(BadMessage::Body(_))
        ));
    }
}
