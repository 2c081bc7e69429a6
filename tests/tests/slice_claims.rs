//! Slice claims in `chime-slices` between replicas that are alive: an owner
//! seen renewing its liveness keeps an unmarked claim for a grace past its
//! lease, a published mark the bucket refused is tried again, and a key
//! whose value is not a claim is taken over instead of holding its slice.
//! Real nats-server and SQLite; each slicer is driven one pass at a time
//! while its watch and liveness run.

use async_nats::jetstream::{self, kv};
use chime_common::{JobSpec, Limits};
use chime_scheduler::firing::claim::{slice_key, ClaimState, ClaimValue, SliceProgress};
use chime_scheduler::firing::slicer::{Slicer, SlicerConfig};
use chime_scheduler::firing::wheel::Wheel;
use chime_scheduler::ops::metrics::Metrics;
use chime_scheduler::store::{FiringFilter, Store, StoreOptions};
use chime_tests::{eventually, init_tracing, rfc3339, NatsServer, SqliteDatabase};
use chrono::Utc;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// A slicer of replica `id` on `kv` and `store`, with its watch and
/// liveness running until the handles are dropped.
fn slicer(id: &str, store: &Store, kv: &kv::Store) -> (Slicer, [AbortOnDropHandle<()>; 2]) {
    let metrics = Metrics::new();
    let (progress, done) = SliceProgress::new();
    // Nothing drains the finished slices: the test marks them itself.
    Box::leak(Box::new(done));
    let slicer = Slicer::new(
        SlicerConfig::default(),
        id,
        store.clone(),
        kv.clone(),
        Wheel::new(metrics.clone()),
        progress,
        metrics,
    );
    let following = slicer.follow(CancellationToken::new());
    (slicer, following)
}

/// NATS with Chime's buckets and a store on SQLite.
async fn setup() -> (
    NatsServer,
    SqliteDatabase,
    Store,
    jetstream::Context,
    kv::Store,
) {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let store = Store::connect(&db.url(), StoreOptions::default())
        .await
        .expect("store");
    let js = jetstream::new(nats.connect().await);
    let topology = chime_runtime::topology::Topology::new(
        js.clone(),
        chime_common::Subjects::default(),
        chime_runtime::topology::TopologyConfig::default(),
    );
    topology.ensure().await.expect("streams and buckets");
    let kv = topology.slices().await.expect("slices bucket");
    (nats, db, store, js, kv)
}

async fn claim_of(kv: &kv::Store, key: &str) -> Option<ClaimValue> {
    let bytes = kv.get(key).await.expect("read the claim")?;
    serde_json::from_slice(&bytes).ok()
}

/// The start (UTC ms) of the slice now is in.
fn this_slice() -> i64 {
    Utc::now().timestamp_millis().div_euclid(1_000) * 1_000
}

async fn sleep_until_ms(at_ms: i64) {
    let wait = at_ms - Utc::now().timestamp_millis();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// An owner whose published mark did not hold (the bucket between leaders)
/// but whose liveness is seen renewed keeps its claim two livenesses (2 s)
/// past the lease, so it can mark the slice before another replica
/// publishes it again; an owner stuck that long is taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_owner_keeps_its_unmarked_claim_two_livenesses_past_its_lease() {
    let (_nats, _db, store, _js, kv) = setup().await;
    let (owner, _owner_follows) = slicer("owner", &store, &kv);
    let (other, _other_follows) = slicer("other", &store, &kv);
    // Each sees the other's renewals steadily before anything is judged.
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let start = this_slice() + 1_000;
    let key = slice_key(start, 0);
    let claimed = owner.run_once(Utc::now()).await;
    assert!(claimed.claimed.contains(&key), "{claimed:?}");
    let until = claim_of(&kv, &key).await.expect("the claim").until_ms;

    sleep_until_ms(until + 500).await;
    let early = other.run_once(Utc::now()).await;
    assert!(
        !early.taken_over.contains(&key),
        "taken over 0.5 s past its lease while its owner renews: {early:?}"
    );
    assert_eq!(claim_of(&kv, &key).await.expect("the claim").owner, "owner");

    sleep_until_ms(until + 2_200).await;
    let late = other.run_once(Utc::now()).await;
    assert!(
        late.taken_over.contains(&key),
        "an owner still not done 2 s past its lease is taken over: {late:?}"
    );
    assert_eq!(claim_of(&kv, &key).await.expect("the claim").owner, "other");
}

/// A published mark the bucket refuses is tried again once it takes
/// writes: the claim ends `published`, not left for a takeover to publish
/// its slice again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_mark_the_bucket_refused_is_tried_again() {
    let (_nats, _db, store, js, kv) = setup().await;
    let (owner, _follows) = slicer("owner", &store, &kv);
    let key = slice_key(this_slice() + 1_000, 0);
    let claimed = owner.run_once(Utc::now()).await;
    assert!(claimed.claimed.contains(&key), "{claimed:?}");

    // The bucket refuses every write while its messages may hold 8 bytes.
    let stream = format!("KV_{}", chime_common::Subjects::default().slices_bucket());
    let mut config = js
        .get_stream(&stream)
        .await
        .expect("bucket stream")
        .cached_info()
        .config
        .clone();
    let unlimited = config.max_message_size;
    config.max_message_size = 8;
    js.update_stream(&config).await.expect("limit message size");
    assert!(
        !owner.mark_published(&key).await,
        "the mark cannot hold while the bucket refuses writes"
    );
    config.max_message_size = unlimited;
    js.update_stream(&config).await.expect("lift the limit");

    eventually(
        Duration::from_secs(10),
        "the slice marked published",
        || async {
            owner.run_once(Utc::now()).await;
            claim_of(&kv, &key)
                .await
                .is_some_and(|claim| claim.state == ClaimState::Published && claim.owner == "owner")
        },
    )
    .await;
}

/// A slice key whose value is not a claim (a JetStream ack aimed at it, say)
/// is taken over once a claim of its slice would have run out, not left
/// holding the slice forever; a job due in that slice is staged all the
/// same, by the next slice's claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_key_that_holds_no_claim_is_taken_over() {
    let (_nats, _db, store, _js, kv) = setup().await;
    let start = this_slice() + 2_000;
    let key = slice_key(start, 0);
    let due = chime_common::duration::from_millis(start + 500);
    let spec = JobSpec::from_json(
        &json!({"id": "in-the-slice", "handler": "noop", "schedule": {"at": rfc3339(start + 500)}}),
        &Limits::default(),
    )
    .expect("a valid spec");
    store.put_job(&spec, Utc::now()).await.expect("put");
    kv.put(&key, r#"{"stream":"CHIME_FIRE","seq":7}"#.into())
        .await
        .expect("put a value that is not a claim");
    let (replica, _follows) = slicer("replica", &store, &kv);
    let first = replica.run_once(Utc::now()).await;
    assert!(!first.claimed.contains(&key), "the key exists: {first:?}");

    // A claim of the slice would have run out 0.5 s after the slice's end.
    sleep_until_ms(start + 1_000 + 600).await;
    eventually(
        Duration::from_secs(5),
        "the unreadable claim taken over",
        || async { replica.run_once(Utc::now()).await.taken_over.contains(&key) },
    )
    .await;
    let claim = claim_of(&kv, &key).await.expect("a claim now");
    assert_eq!(claim.owner, "replica");
    let firings = store
        .list_firings(&FiringFilter {
            job_id: Some("in-the-slice".into()),
            ..Default::default()
        })
        .await
        .expect("firings");
    assert!(
        firings.items.iter().any(|f| f.scheduled_at == due),
        "the instant in the slice is staged: {:?}",
        firings.items
    );
}
