//! The per-message work of publishing a firing: building its headers
//! (CONTRACT.md, "Firing messages"), done once for every firing at its
//! instant, 100,000 times in a second in the aligned burst.
//!
//! ```text
//! cargo bench -p chime-scheduler --bench publish
//! ```

use chime_common::FiringId;
use chime_scheduler::firing::message::firing_headers;
use chime_scheduler::store::StagedFiring;
use chrono::{DateTime, Utc};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;

fn firing() -> StagedFiring {
    let scheduled_at: DateTime<Utc> =
        DateTime::from_timestamp(1_893_456_000, 0).expect("a valid instant");
    StagedFiring {
        id: FiringId {
            job_id: "burst-0012345".into(),
            scheduled_ms: scheduled_at.timestamp_millis(),
            shard: None,
            attempt: 1,
        },
        job_id: "burst-0012345".into(),
        group: "bench".into(),
        priority: 5,
        handler: "noop".into(),
        payload: bytes::Bytes::from_static(b"null"),
        scheduled_at,
        due_at: scheduled_at,
        attempt: 1,
        timeout: Duration::from_secs(3600),
        publish_seq: 0,
        shards: 1,
        traceparent: None,
        staged_at: scheduled_at,
        worker_id: None,
    }
}

fn publish_benches(c: &mut Criterion) {
    let firing = firing();
    let now = firing.due_at;
    let mut group = c.benchmark_group("publish");
    group.throughput(Throughput::Elements(1));
    group.bench_function("firing_headers", |b| {
        b.iter(|| firing_headers(black_box(&firing), black_box(now)))
    });
    group.finish();
}

criterion_group!(benches, publish_benches);
criterion_main!(benches);
