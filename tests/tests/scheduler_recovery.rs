//! The nets under slice takeover: housekeeping publishes firings that were
//! staged and never published; the expiry lease has one holder at a time; a
//! replica started before NATS waits for it; a replica reports its periodic
//! passes on its test signals.

use chime_common::client::Client;
use chime_common::{JobSpec, Limits};
use chime_runtime::service::Pass;
use chime_scheduler::firing::wheel::Wheel;
use chime_scheduler::lease::Lease;
use chime_scheduler::ops::metrics::Metrics;
use chime_scheduler::recovery::housekeeping::{Housekeeping, HousekeepingConfig};
use chime_scheduler::store::{StageRequest, Store, StoreOptions};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{
    backend_tests, free_port, init_tracing, Binary, ChimeProcess, NatsServer, SqliteDatabase,
    TestDatabase,
};
use chrono::{Duration as Span, Utc};
use serde_json::json;
use std::time::Duration;

backend_tests! {
    async fn staged_firings_nobody_published_are_rescued_once(db: TestDatabase) {
        init_tracing();
        let store = Store::connect(&db.url(), StoreOptions::default()).await.expect("store");
        let t0 = Utc::now() - Span::seconds(30);
        for i in 0..3 {
            let spec = JobSpec::from_json(&json!({"id": format!("orphan-{i}"), "schedule": {"every": "1s"}, "handler": "noop"}), &Limits::default())
                .expect("spec");
            store.put_job(&spec, t0).await.expect("put");
        }
        // A replica claimed and staged a slice 30 s ago, then died before publishing.
        let staged = store
            .stage_slice(&StageRequest::new("slice.dead.0", 0, t0 + Span::milliseconds(1_500), t0))
            .await
            .expect("stage");
        assert_eq!(staged.firings.len(), 3);

        let metrics = Metrics::new();
        let wheel = Wheel::new(metrics.clone());
        let housekeeping = Housekeeping::new(HousekeepingConfig::default(), store.clone(), wheel.clone(), metrics);
        let outcome = housekeeping.run_once(Utc::now()).await.expect("pass");
        assert_eq!(outcome.rescued, 3);
        assert_eq!(wheel.len(), 3);
        let again = housekeeping.run_once(Utc::now()).await.expect("second pass");
        assert_eq!(again.rescued, 0, "a firing handed to the wheel is not handed over again");
        assert_eq!(wheel.len(), 3);

        let ids: Vec<_> = wheel.pop_due(Utc::now().timestamp_millis()).into_iter().map(|e| e.firing.id).collect();
        store.record_published(&ids, Utc::now()).await.expect("mark");
        let later = Utc::now() + Span::seconds(60);
        assert_eq!(housekeeping.run_once(later).await.expect("pass").rescued, 0, "published firings are left alone");
    }
}

#[tokio::test]
async fn a_lease_has_one_holder_until_it_expires_or_is_released() {
    init_tracing();
    let nats = NatsServer::start().await;
    let js = async_nats::jetstream::new(nats.connect().await);
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "leases".into(),
            ..Default::default()
        })
        .await
        .expect("bucket");
    let a = Lease::new(kv.clone(), "expiry", "a", Duration::from_secs(5));
    let b = Lease::new(kv.clone(), "expiry", "b", Duration::from_secs(5));
    let now = Utc::now();
    assert!(a.acquire_or_renew(now).await);
    assert!(!b.acquire_or_renew(now).await, "held by a");
    assert!(a.acquire_or_renew(now + Span::seconds(3)).await, "a renews");
    assert!(
        !b.acquire_or_renew(now + Span::seconds(6)).await,
        "renewed until now + 8 s"
    );
    assert!(
        b.acquire_or_renew(now + Span::seconds(9)).await,
        "expired: b takes it"
    );
    assert!(!a.acquire_or_renew(now + Span::seconds(9)).await);
    b.release().await;
    assert!(
        a.acquire_or_renew(now + Span::seconds(9)).await,
        "released: a takes it at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_before_nats_waits_for_it() {
    let mut nats = NatsServer::start().await;
    nats.stop().await;
    let db = SqliteDatabase::create();
    let mut command = Binary::Scheduler.command();
    command.args([
        "--nats-url",
        &nats.url(),
        "--database-url",
        &db.url(),
        "--metrics-addr",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    let mut scheduler = ChimeProcess::spawn(command);
    scheduler
        .wait_for_log_line("NATS is not reachable yet", Duration::from_secs(10))
        .await;
    assert!(scheduler.try_status().is_none(), "{}", scheduler.log());
    nats.restart().await;
    scheduler
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(15))
        .await;
    let client = chime_common::client::Client::new(nats.connect().await);
    client
        .put_job(&json!({"id": "after-wait", "handler": "noop", "schedule": {"every": "1h"}}))
        .await
        .expect("the replica answers once NATS is up");
    assert!(scheduler.terminate(Duration::from_secs(20)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reports_its_periodic_passes_on_test_signals() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.consumers.interval = Duration::from_millis(200);
    let replica = Replica::start(config).await.expect("replica starts");
    let mut consumers = replica.signals.consumers.subscribe();
    let mut expiry = replica.signals.expiry.subscribe();
    let client = Client::new(nats.connect().await);
    client
        .put_job(&json!({"id": "signalled", "group": "fresh", "handler": "noop", "schedule": {"every": "1h"}}))
        .await
        .expect("put");
    consumers
        .wait_for(
            Duration::from_secs(10),
            "the new group's consumers ensured",
            |pass| matches!(pass, Pass::Done(outcome) if outcome.ensured.iter().any(|g| g == "fresh")),
        )
        .await;
    expiry
        .wait_for(
            Duration::from_secs(10),
            "an expiry scan by the lease holder",
            |pass| matches!(pass, Pass::Done(_)),
        )
        .await;
    replica.shutdown().await;
}

/// On SQLite a replica copies the write-ahead log into the database file by
/// itself, apart from housekeeping's pass (`ops/checkpointer.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_replica_checkpoints_its_log_on_its_own() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let mut checkpoints = replica.signals.checkpoint.subscribe();
    let client = Client::new(nats.connect().await);
    for i in 0..20 {
        client
            .put_job(&json!({"id": format!("logged-{i}"), "handler": "noop", "schedule": {"every": "1h"}}))
            .await
            .expect("put");
    }
    checkpoints
        .wait_for(
            Duration::from_secs(10),
            "a checkpoint that copied the puts' log pages into the file",
            |pass| matches!(pass, Pass::Done(pages) if *pages > 0),
        )
        .await;
    replica.shutdown().await;
}
