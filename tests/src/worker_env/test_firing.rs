//! Firing messages as a scheduler publishes them (the contract's headers,
//! the band of their priority), for worker tests without a scheduler.

use async_nats::jetstream;
use async_nats::HeaderMap;
use chime_common::duration::format_time;
use chime_common::headers;
use chime_common::{Band, FiringId, Subjects};
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static NEXT_MS: AtomicU64 = AtomicU64::new(1_800_000_000_000);

/// A firing message to publish.
#[derive(Clone, Debug)]
pub struct TestFiring {
    pub group: String,
    pub job_id: String,
    pub scheduled_ms: i64,
    pub attempt: u32,
    pub handler: String,
    pub priority: u8,
    pub payload: serde_json::Value,
    pub timeout: Duration,
    /// `(shard, shards)` for a shard of a sharded job's instant.
    pub shard: Option<(u32, u32)>,
}

impl TestFiring {
    /// A firing of `job_id` for `handler` in `group`, priority 5, a fresh instant.
    pub fn new(group: &str, job_id: &str, handler: &str) -> TestFiring {
        TestFiring {
            group: group.into(),
            job_id: job_id.into(),
            scheduled_ms: NEXT_MS.fetch_add(1000, Ordering::Relaxed) as i64,
            attempt: 1,
            handler: handler.into(),
            priority: 5,
            payload: serde_json::json!({}),
            timeout: Duration::from_secs(60),
            shard: None,
        }
    }

    /// Shard `shard` of `shards` of its instant.
    pub fn shard(mut self, shard: u32, shards: u32) -> Self {
        self.shard = Some((shard, shards));
        self
    }

    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn id(&self) -> FiringId {
        match self.shard {
            Some((shard, shards)) => FiringId::of_shard(
                self.job_id.as_str(),
                self.scheduled_ms,
                shard,
                shards,
                self.attempt,
            ),
            None => FiringId::new(self.job_id.clone(), self.scheduled_ms, self.attempt),
        }
    }

    pub fn scheduled_at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.scheduled_ms).unwrap()
    }

    /// The contract's headers.
    pub fn headers(&self) -> HeaderMap {
        let id = self.id().to_string();
        let now = Utc::now();
        let mut h = HeaderMap::new();
        h.insert(headers::NATS_MSG_ID, id.as_str());
        h.insert(headers::FIRING_ID, id.as_str());
        h.insert(headers::JOB_ID, self.job_id.as_str());
        h.insert(headers::HANDLER, self.handler.as_str());
        h.insert(
            headers::SCHEDULED_AT,
            format_time(self.scheduled_at()).as_str(),
        );
        h.insert(headers::DUE_AT, format_time(now).as_str());
        h.insert(headers::ATTEMPT, self.attempt.to_string().as_str());
        h.insert(headers::PRIORITY, self.priority.to_string().as_str());
        let deadline = now + chrono::Duration::from_std(self.timeout).unwrap();
        h.insert(headers::DEADLINE, format_time(deadline).as_str());
        h.insert(
            headers::TIMEOUT_MS,
            self.timeout.as_millis().to_string().as_str(),
        );
        if let Some((shard, shards)) = self.shard {
            h.insert(headers::SHARD, shard.to_string().as_str());
            h.insert(headers::SHARDS, shards.to_string().as_str());
        }
        h
    }
}

/// Publishes `firing` on `chime.fire.<group>.<band>` and waits for the ack.
pub async fn publish(
    js: &jetstream::Context,
    subjects: &Subjects,
    firing: &TestFiring,
) -> FiringId {
    let subject = subjects.fire(&firing.group, Band::of_priority(firing.priority));
    let body = serde_json::to_vec(&firing.payload).unwrap();
    js.publish_with_headers(subject, firing.headers(), body.into())
        .await
        .expect("publish")
        .await
        .expect("publish ack");
    firing.id()
}
