//! Broadcast jobs end to end: each instant runs once on every live worker
//! of the group, shard i of N on the i-th worker by id, each started only by
//! the worker it names; an offer a busy worker drops is made again; a share
//! whose worker is gone ends `lost`; an instant with nobody to go to is
//! skipped. Real NATS, both databases, the built workers running `shell`
//! jobs, a scheduler in process for its test signals.

use async_nats::jetstream;
use chime_common::api::BackfillRequest;
use chime_common::client::Client;
use chime_common::protocol::{heartbeat_key, StartRefusal, StartReply, StartRequest, WorkerInfo};
use chime_common::{ErrorCode, FiringState, Subjects};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

async fn replica(nats: &NatsServer, db_url: &str) -> Replica {
    Replica::start(SchedulerConfig::new(nats.url(), db_url.to_string()))
        .await
        .expect("replica starts")
}

/// Waits until `replica`'s offers pass sees `workers` workers that take offers.
async fn seeing(replica: &Replica, workers: usize) {
    replica
        .signals
        .offers
        .subscribe()
        .wait_for(
            Duration::from_secs(20),
            "an offers pass that sees every worker",
            |pass| matches!(pass, chime_runtime::service::Pass::Done(o) if o.audience == workers),
        )
        .await;
}

/// A shell job that appends `<shard> <shards> <firing id>` to `log`.
fn recording(id: &str, log: &std::path::Path, schedule: Value) -> Value {
    json!({
        "id": id, "group": "fleet", "handler": "shell", "broadcast": true,
        "payload": {"argv": ["/bin/sh", "-c", format!(
            "echo \"$CHIME_SHARD $CHIME_SHARDS $CHIME_FIRING_ID\" >> {}", log.display()
        )]},
        "schedule": schedule,
    })
}

backend_tests! {
    /// Three live workers, two instants: shards 0, 1 and 2 of 3 each
    /// instant, each addressed to and run by the worker of its rank by id,
    /// once.
    async fn a_broadcast_runs_once_on_every_live_worker(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = replica(&nats, &db.url()).await;
        let _workers = [
            start_worker(&nats.url(), "fleet", 2, "w-c").await,
            start_worker(&nats.url(), "fleet", 2, "w-a").await,
            start_worker(&nats.url(), "fleet", 2, "w-b").await,
        ];
        seeing(&replica, 3).await;
        let client = Client::new(nats.connect().await);
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("runs.log");
        let start = aligned_start(Duration::from_secs(2));
        let schedule = json!({"every": "2s", "start_at": rfc3339(start), "count": 2});
        client.put_job(&recording("inventory", &log, schedule)).await.expect("put");

        eventually(Duration::from_secs(60), "every share of both instants final", || {
            let client = client.clone();
            async move {
                let all = firings_of(&client, "inventory").await;
                all.len() == 6 && all.iter().all(|f| f.state.is_final())
            }
        })
        .await;
        let all = firings_of(&client, "inventory").await;
        let ranks = ["w-a", "w-b", "w-c"];
        let mut per_instant: BTreeMap<i64, BTreeSet<u32>> = BTreeMap::new();
        for f in &all {
            assert_eq!(f.state, FiringState::Succeeded, "{f:?}");
            let shard = f.shard.expect("a broadcast's firing has a shard");
            let addressed = f.worker_id.as_deref().expect("a broadcast's firing names its worker");
            assert_eq!(addressed, ranks[shard as usize], "{f:?}");
            assert_eq!(f.worker.as_deref(), Some(addressed), "run by another worker: {f:?}");
            assert!(per_instant.entry(f.id.scheduled_ms).or_default().insert(shard));
        }
        assert_eq!(per_instant.len(), 2, "{per_instant:?}");
        assert!(per_instant.values().all(|s| *s == BTreeSet::from([0, 1, 2])));

        let text = std::fs::read_to_string(&log).expect("the log");
        let mut ran = HashSet::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [shard, shards, id] = parts[..] else {
                panic!("unexpected line {line:?}");
            };
            assert!(ran.insert(id.to_string()), "{id} ran twice");
            let id: chime_common::FiringId = id.parse().expect("a firing id");
            assert_eq!(Some(shard.parse::<u32>().expect("CHIME_SHARD")), id.shard, "{line}");
            assert_eq!(shards, "3", "{line}");
        }
        assert_eq!(ran.len(), 6, "{text}");
        replica.shutdown().await;
    }
}

/// A worker whose one thread is busy drops its offer; the offer is made
/// again and the share runs once the thread is free. A lone worker's share
/// is shard 0 of 1.
#[tokio::test]
async fn an_offer_a_busy_worker_dropped_is_made_again() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db.url()).await;
    let _worker = start_worker(&nats.url(), "fleet", 1, "w-busy").await;
    seeing(&replica, 1).await;
    let client = Client::new(nats.connect().await);
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("runs.log");
    client
        .put_job(&json!({"id": "long", "group": "fleet", "handler": "shell",
            "payload": {"argv": ["sleep", "3"]}, "schedule": {"every": "1h"}}))
        .await
        .expect("put");
    client.trigger_job("long", None).await.expect("trigger");
    eventually(Duration::from_secs(20), "the long run started", || {
        let client = client.clone();
        async move {
            firings_of(&client, "long")
                .await
                .iter()
                .any(|f| f.state == FiringState::Executing)
        }
    })
    .await;
    client
        .put_job(&recording("census", &log, json!({"every": "1h"})))
        .await
        .expect("put");
    let id = client.trigger_job("census", None).await.expect("trigger");
    eventually(Duration::from_secs(30), "the share ran", || {
        let client = client.clone();
        async move {
            firings_of(&client, "census")
                .await
                .iter()
                .any(|f| f.state == FiringState::Succeeded)
        }
    })
    .await;
    let census = firings_of(&client, "census").await;
    assert_eq!(census.len(), 1, "{census:?}");
    assert_eq!(census[0].id.to_string(), id);
    assert_eq!(census[0].worker_id.as_deref(), Some("w-busy"));
    let long = &firings_of(&client, "long").await[0];
    let started = census[0].started_at.expect("started");
    assert!(
        long.finished_at.is_some_and(|end| started >= end),
        "the share started while the only thread was busy: {long:?} {census:?}"
    );
    let text = std::fs::read_to_string(&log).expect("the log");
    assert_eq!(text.trim(), format!("0 1 {id}"));
    replica.shutdown().await;
}

/// Only the addressed worker may start a share (`wrong_worker` for any
/// other); a share whose worker's heartbeat is gone ends `lost` with that
/// reason, without a retry; with no worker to go to, the instant is
/// skipped; `broadcast` refuses `shards`, an overlap without
/// `max_concurrent`, and backfills.
#[tokio::test]
async fn a_share_is_its_workers_alone_and_ends_lost_when_it_is_gone() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let connection = nats.connect().await;
    let subjects = Subjects::default();
    let heartbeats = jetstream::new(connection.clone());
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let client = Client::new(connection.clone());
    let job = json!({"id": "sweep", "group": "fleet", "handler": "h", "broadcast": true,
        "schedule": {"every": "1h"}});

    // Refused at put.
    for (extra, field) in [
        (json!({"shards": 2}), "broadcast"),
        (json!({"overlap": "forbid"}), "max_concurrent"),
        (json!({"broadcast": "yes"}), "broadcast"),
    ] {
        let mut spec = job.clone();
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let error = client.put_job(&spec).await.expect_err("refused");
        assert_eq!(error.code, ErrorCode::InvalidArgument, "{error:?}");
        assert_eq!(error.field.as_deref(), Some(field), "{error:?}");
    }
    client.put_job(&job).await.expect("put");

    // Nobody to go to: skipped, with the reason.
    let skipped = client.trigger_job("sweep", None).await.expect("trigger");
    let firing = client.get_firing(&skipped).await.expect("firings.get");
    assert_eq!(firing.state, FiringState::Skipped, "{firing:?}");
    assert!(
        firing
            .error
            .as_deref()
            .is_some_and(|e| e.contains("no live worker")),
        "{firing:?}"
    );

    // A worker that takes offers, by its heartbeat alone: it never starts.
    let bucket = heartbeats
        .get_key_value(subjects.workers_bucket())
        .await
        .expect("workers bucket");
    let ghost = WorkerInfo {
        id: "ghost".into(),
        group: "fleet".into(),
        threads: 1,
        in_flight: 0,
        version: "0.0.0".into(),
        started_at: chrono::Utc::now(),
        running: None,
        handlers: None,
        offers: true,
        heartbeat_at: None,
    };
    let key = heartbeat_key("fleet", "ghost");
    let mut passes = replica.signals.offers.subscribe();
    bucket
        .put(&key, serde_json::to_vec(&ghost).unwrap().into())
        .await
        .expect("heartbeat");
    passes
        .wait_for(
            Duration::from_secs(10),
            "a pass that sees the ghost",
            |pass| matches!(pass, chime_runtime::service::Pass::Done(o) if o.audience == 1),
        )
        .await;
    let addressed = client.trigger_job("sweep", None).await.expect("trigger");
    let firing = client.get_firing(&addressed).await.expect("firings.get");
    assert_eq!(firing.worker_id.as_deref(), Some("ghost"), "{firing:?}");

    // Another worker of the group asks to start it: refused.
    let request = StartRequest {
        firing_id: addressed.parse().expect("a firing id"),
        worker_id: "intruder".into(),
        group: "fleet".into(),
        handler: None,
        payload_sha256: None,
    };
    let reply = connection
        .request(
            subjects.worker_start_as("fleet", "intruder"),
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .expect("a start reply");
    let reply: StartReply = serde_json::from_slice(&reply.payload).expect("a start reply");
    assert_eq!(reply.refusal, Some(StartRefusal::WrongWorker), "{reply:?}");

    // Its worker is gone: lost, once, with the reason.
    bucket.delete(&key).await.expect("heartbeat deleted");
    eventually(Duration::from_secs(15), "the share is lost", || {
        let (client, addressed) = (client.clone(), addressed.clone());
        async move {
            client
                .get_firing(&addressed)
                .await
                .is_ok_and(|f| f.state == FiringState::Lost)
        }
    })
    .await;
    let firing = client.get_firing(&addressed).await.expect("firings.get");
    assert!(
        firing
            .error
            .as_deref()
            .is_some_and(|e| e.contains("worker ghost is gone")),
        "{firing:?}"
    );
    let instant = firings_of(&client, "sweep")
        .await
        .into_iter()
        .filter(|f| f.id.scheduled_ms == firing.id.scheduled_ms)
        .count();
    assert_eq!(instant, 1, "a lost share is not retried");

    // Past instants went to the workers alive then: no backfill.
    let now = chrono::Utc::now();
    let error = client
        .backfill_job(&BackfillRequest {
            id: "sweep".into(),
            from: now - chrono::Duration::hours(2),
            to: now,
            limit: None,
            dry_run: false,
        })
        .await
        .expect_err("refused");
    assert_eq!(error.code, ErrorCode::InvalidArgument, "{error:?}");
    replica.shutdown().await;
}
