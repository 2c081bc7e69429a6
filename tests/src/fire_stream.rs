//! What really reached the firing stream, read back message by message, so
//! a suite checks the publisher's output rather than the store's account of it.

use async_nats::jetstream;
use std::collections::HashMap;

/// One firing message as it sits in the CHIME_FIRE stream.
#[derive(Debug, Clone)]
pub struct Published {
    pub firing_id: String,
    pub job_id: String,
    pub scheduled_ms: i64,
    pub attempt: u32,
    pub priority: u8,
    pub subject: String,
    /// When JetStream stored it.
    pub stored_ms: i64,
    /// Its `traceparent` header, if it has one.
    pub traceparent: Option<String>,
}

/// Every message currently in `stream`, in stream order.
pub async fn read_fire_stream(js: &jetstream::Context, stream: &str) -> Vec<Published> {
    let mut stream = js.get_stream(stream).await.expect("fire stream exists");
    let info = stream.info().await.expect("stream info").state.clone();
    let mut out = Vec::new();
    if info.messages == 0 {
        return out;
    }
    for seq in info.first_sequence..=info.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        let header = |name: &str| {
            message
                .headers
                .get(name)
                .map(|v| v.to_string())
                .unwrap_or_else(|| panic!("firing message {seq} lacks {name}"))
        };
        let firing_id = header("Chime-Firing-Id");
        let parsed: chime_common::FiringId = firing_id.parse().expect("a valid firing id");
        out.push(Published {
            job_id: header("Chime-Job-Id"),
            scheduled_ms: parsed.scheduled_ms,
            attempt: parsed.attempt,
            priority: header("Chime-Priority").parse().expect("priority"),
            subject: message.subject.to_string(),
            stored_ms: (message.time.unix_timestamp_nanos() / 1_000_000) as i64,
            traceparent: message.headers.get("traceparent").map(|v| v.to_string()),
            firing_id,
        });
    }
    out
}

/// Counts messages per (job, scheduled instant, attempt).
pub fn count_by_instant(published: &[Published]) -> HashMap<(String, i64, u32), usize> {
    let mut counts = HashMap::new();
    for p in published {
        *counts
            .entry((p.job_id.clone(), p.scheduled_ms, p.attempt))
            .or_insert(0) += 1;
    }
    counts
}
