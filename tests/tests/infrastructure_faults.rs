//! The infrastructure's faults are not the job's failures: a start its
//! worker never ran, a run cut by a drain that overran its grace, and a
//! worker whose heartbeats leave a firing out each run the firing again
//! without spending the job's `max_attempts` (here 1), and a crash loop
//! still ends, on the scheduler's own budget (`--infra-retries`), failed
//! and alerted. A worker that does not list what it runs keeps being judged
//! by its heartbeat key alone.
//!
//! Real NATS, a real replica, real workers or a worker played by the test
//! (heartbeats written into `chime-workers`, starts written through a store
//! on the replica's database).

use async_nats::jetstream::{self, kv};
use chime_common::client::Client;
use chime_common::protocol::{Alert, AlertKind, StartRequest, WorkerInfo};
use chime_common::{FiringId, FiringState, Subjects};
use chime_scheduler::store::{Store, StoreOptions};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_worker::{FiringContext, HandlerError, Worker, WorkerHandle};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const GROUP: &str = "faults";

/// A worker of `GROUP` whose `count` handler counts its runs, and whose
/// `stuck` handler runs attempt 1 until it is stopped and later attempts
/// at once. A firing it gives up starting stays away a minute.
async fn worker(client: async_nats::Client, id: &str, runs: Arc<AtomicUsize>) -> WorkerHandle {
    beating_every(client, id, runs, Duration::from_secs(1)).await
}

/// [`worker`], heartbeating every `interval`.
async fn beating_every(
    client: async_nats::Client,
    id: &str,
    runs: Arc<AtomicUsize>,
    interval: Duration,
) -> WorkerHandle {
    let stuck_runs = runs.clone();
    Worker::builder()
        .nats(client)
        .group(GROUP)
        .worker_id(id)
        .threads(2)
        .heartbeat_interval(interval)
        .poll_interval(Duration::from_millis(250))
        .nak_delay(Duration::from_secs(60))
        .drain_grace(Duration::from_secs(1))
        .handler_fn("count", move |_ctx: FiringContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(Some("ran".into()))
            }
        })
        .handler_fn("stuck", move |ctx: FiringContext| {
            let runs = stuck_runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if ctx.firing.attempt == 1 {
                    ctx.cancel.cancelled().await;
                    return Err(HandlerError::new("stopped"));
                }
                Ok(Some("ran".into()))
            }
        })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker starts")
}

async fn consumers(nats: &NatsServer) {
    chime_tests::create_group_consumers(
        &jetstream::new(nats.connect().await),
        &Subjects::default(),
        &chime_runtime::topology::TopologyConfig::default(),
        GROUP,
    )
    .await;
}

/// A one-shot job of `GROUP` due in a second.
fn one_shot(id: &str, handler: &str) -> serde_json::Value {
    json!({
        "id": id, "group": GROUP, "handler": handler,
        "schedule": {"at": chime_common::duration::format_time(chrono::Utc::now() + chrono::Duration::seconds(1))},
        "retry": {"max_attempts": 1, "initial": "100ms"},
        "timeout": "1h",
    })
}

/// Waits until attempt `attempt` of `job` is in `state`.
async fn until_state(
    client: &Client,
    job: &str,
    attempt: u32,
    state: FiringState,
    within: Duration,
) {
    let what = format!("attempt {attempt} of {job} {}", state.as_str());
    until_ok(within, &what, || async {
        let firings = firings_of(client, job).await;
        match firings.iter().find(|f| f.attempt == attempt) {
            Some(f) if f.state == state => Ok(()),
            _ => Err(format!("{firings:#?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_recorded_after_its_worker_gave_up_runs_once_within_seconds() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let upstream: std::net::SocketAddr = "127.0.0.1:5432".parse().expect("addr");
    let link = Proxy::start(upstream).await;
    let proxied = db
        .url()
        .replace("127.0.0.1:5432", &link.addr().to_string())
        .replace("localhost:5432", &link.addr().to_string());
    assert_ne!(
        proxied,
        db.url(),
        "the database is reached through the proxy"
    );
    let replica = Replica::start(SchedulerConfig::new(nats.url(), proxied))
        .await
        .expect("replica starts");
    consumers(&nats).await;
    let client = Client::new(nats.connect().await);
    client
        .put_job(&one_shot("once", "count"))
        .await
        .expect("put");
    until_state(
        &client,
        "once",
        1,
        FiringState::Published,
        Duration::from_secs(20),
    )
    .await;

    // The store answers nothing until the worker that fetched it gave up.
    link.block();
    let runs = Arc::new(AtomicUsize::new(0));
    let a = worker(nats.connect().await, "worker-a", runs.clone()).await;
    let b = worker(nats.connect().await, "worker-b", runs.clone()).await;
    let gave_up = |w: &WorkerHandle| {
        w.metrics()
            .start_refusals
            .with_label_values(&["scheduler_unavailable"])
            .get()
    };
    eventually(
        Duration::from_secs(20),
        "a worker gave up its start",
        || {
            let given_up = gave_up(&a) + gave_up(&b);
            async move { given_up > 0 }
        },
    )
    .await;
    link.unblock();

    // The start is recorded for the worker that gave up; its heartbeats
    // leave it out, and the instant runs again, long before its hour.
    until_state(
        &client,
        "once",
        2,
        FiringState::Succeeded,
        Duration::from_secs(45),
    )
    .await;
    let firings = history(&client, "once").await;
    assert_eq!(firings.len(), 2, "{firings:#?}");
    assert_eq!(firings[0].state, FiringState::Lost, "{firings:#?}");
    assert!(
        firings[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("does not run it"),
        "{firings:#?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the instant ran exactly once"
    );
    let raised: Vec<Alert> = alerts_of(&nats)
        .await
        .into_iter()
        .filter(|a| a.kind == AlertKind::NotRunning)
        .collect();
    assert_eq!(raised.len(), 1, "{raised:#?}");
    assert_eq!(raised[0].firing_id.as_ref(), Some(&firings[0].id));
    a.shutdown().await;
    b.shutdown().await;
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_by_a_drain_runs_again_without_spending_its_attempt() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    consumers(&nats).await;
    let client = Client::new(nats.connect().await);
    let runs = Arc::new(AtomicUsize::new(0));
    let a = worker(nats.connect().await, "worker-a", runs.clone()).await;
    client
        .put_job(&one_shot("drained", "stuck"))
        .await
        .expect("put");
    until_state(
        &client,
        "drained",
        1,
        FiringState::Executing,
        Duration::from_secs(20),
    )
    .await;
    let b = worker(nats.connect().await, "worker-b", runs.clone()).await;

    let report = a.shutdown().await;
    assert_eq!((report.drained, report.interrupted), (false, 1));
    until_state(
        &client,
        "drained",
        2,
        FiringState::Succeeded,
        Duration::from_secs(30),
    )
    .await;
    let firings = history(&client, "drained").await;
    assert_eq!(firings.len(), 2, "{firings:#?}");
    assert_eq!(firings[0].state, FiringState::Failed, "never cancelled");
    assert_eq!(firings[0].worker.as_deref(), Some("worker-a"));
    assert_eq!(firings[1].worker.as_deref(), Some("worker-b"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    b.shutdown().await;
    replica.shutdown().await;
}

/// Writes `info` as worker `id`'s heartbeat every 300 ms until dropped.
fn heartbeat(workers: kv::Store, info: WorkerInfo) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let value = serde_json::to_vec(&info).expect("json");
            let _ = workers.put(&info.id, value.into()).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

fn info(id: &str, running: Option<Vec<FiringId>>) -> WorkerInfo {
    WorkerInfo {
        id: id.into(),
        group: "default".into(),
        threads: 1,
        in_flight: 0,
        version: "test".into(),
        started_at: chrono::Utc::now(),
        running,
        handlers: None,
        offers: false,
        heartbeat_at: None,
    }
}

/// A replica on a fresh PostgreSQL database with `store` options, a store
/// of its own on that database, and the heartbeat bucket.
async fn replica_and_store(
    nats: &NatsServer,
    db: &PgDatabase,
    store: StoreOptions,
) -> (Replica, Store, kv::Store) {
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.store = store.clone();
    let replica = Replica::start(config).await.expect("replica starts");
    let own = Store::connect(db.url(), store).await.expect("store");
    let workers = jetstream::new(nats.connect().await)
        .get_key_value(Subjects::default().workers_bucket())
        .await
        .expect("the replica created the bucket");
    (replica, own, workers)
}

/// Firing `id` as the API shows it.
async fn firing(client: &Client, id: &FiringId) -> Option<chime_common::Firing> {
    firings_of(client, &id.job_id)
        .await
        .into_iter()
        .find(|f| &f.id == id)
}

async fn state_of(client: &Client, id: &FiringId) -> Option<FiringState> {
    firing(client, id).await.map(|f| f.state)
}

/// The firings of `job`, first attempt first.
async fn history(client: &Client, job: &str) -> Vec<chime_common::Firing> {
    let mut firings = firings_of(client, job).await;
    firings.sort_by_key(|f| f.attempt);
    firings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lists_nothing_is_judged_by_its_key_alone() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let (replica, store, workers) = replica_and_store(&nats, &db, StoreOptions::default()).await;
    let client = Client::new(nats.connect().await);
    let now = chrono::Utc::now();
    let quiet = started(&store, &["quiet"], "quiet-worker", now)
        .await
        .remove(0);
    let listed = started(&store, &["listed"], "listing-worker", now)
        .await
        .remove(0);
    let beats = [
        heartbeat(workers.clone(), info("quiet-worker", None)),
        heartbeat(workers.clone(), info("listing-worker", Some(vec![]))),
    ];

    // Both workers beat alike; only the one that lists what it runs, and
    // leaves the firing out, loses it.
    eventually(
        Duration::from_secs(20),
        "the unlisted firing re-queued",
        || {
            let (client, listed) = (client.clone(), listed.clone());
            async move { state_of(&client, &listed).await == Some(FiringState::Lost) }
        },
    )
    .await;
    assert_eq!(
        state_of(&client, &quiet).await,
        Some(FiringState::Executing),
        "a heartbeat without `running` says nothing of the firings"
    );
    for beat in beats {
        beat.abort();
    }
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_ends_failed_and_alerted_once_the_infrastructure_budget_is_spent() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let budget = 2;
    let options = StoreOptions {
        infra_retries: budget,
        ..StoreOptions::default()
    };
    let (replica, store, workers) = replica_and_store(&nats, &db, options).await;
    let client = Client::new(nats.connect().await);
    let first = started(&store, &["looping"], "crashing", chrono::Utc::now())
        .await
        .remove(0);
    // The worker takes every attempt and never runs one.
    let beat = heartbeat(workers, info("crashing", Some(vec![])));
    let mut id = first;
    for _ in 0..budget {
        let next = id.next_attempt();
        let start = StartRequest {
            firing_id: next.clone(),
            worker_id: "crashing".into(),
            group: "default".into(),
            handler: None,
            payload_sha256: None,
        };
        until_ok(Duration::from_secs(20), &format!("{next} started"), || {
            let (store, start) = (store.clone(), start.clone());
            async move {
                let decided = store
                    .start(std::slice::from_ref(&start), chrono::Utc::now())
                    .await
                    .map_err(|e| e.to_string())?;
                match decided.first() {
                    Some(d) if d.reply.accepted => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
        id = next;
    }
    eventually(Duration::from_secs(20), "the last attempt ended", || {
        let (client, id) = (client.clone(), id.clone());
        async move { state_of(&client, &id).await == Some(FiringState::Failed) }
    })
    .await;
    let error = firing(&client, &id)
        .await
        .and_then(|f| f.error)
        .unwrap_or_default();
    assert!(error.contains("--infra-retries"), "{error}");
    assert_eq!(
        state_of(&client, &id.next_attempt()).await,
        None,
        "no attempt after the budget"
    );
    let raised = alerts_of(&nats).await;
    let failed: Vec<&Alert> = raised
        .iter()
        .filter(|a| a.kind == AlertKind::FiringFailed)
        .collect();
    assert_eq!(failed.len(), 1, "{raised:#?}");
    assert_eq!(failed[0].firing_id.as_ref(), Some(&id));
    let not_running = raised
        .iter()
        .filter(|a| a.kind == AlertKind::NotRunning)
        .count();
    assert_eq!(
        not_running,
        usize::try_from(budget).unwrap() + 1,
        "{raised:#?}"
    );
    beat.abort();
    replica.shutdown().await;
}

/// One delete of a running worker's heartbeat (by anyone who may write the
/// group's keys) does not re-queue its firing: the monitor waits, the
/// worker writes its heartbeat again, and the run goes on as attempt 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_deleted_once_does_not_requeue_a_running_firing() {
    use chime_runtime::service::Pass;
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    consumers(&nats).await;
    let client = Client::new(nats.connect().await);
    let runs = Arc::new(AtomicUsize::new(0));
    // Beats 4 s apart, so the monitor sees the key missing between them.
    let a = beating_every(
        nats.connect().await,
        "worker-a",
        runs.clone(),
        Duration::from_secs(4),
    )
    .await;
    client
        .put_job(&one_shot("held", "stuck"))
        .await
        .expect("put");
    until_state(
        &client,
        "held",
        1,
        FiringState::Executing,
        Duration::from_secs(20),
    )
    .await;
    let firing = firings_of(&client, "held").await[0].id.clone();

    let mut expiry = replica.signals.expiry.subscribe();
    let workers = jetstream::new(nats.connect().await)
        .get_key_value("chime-workers")
        .await
        .expect("bucket");
    let key = chime_common::protocol::heartbeat_key(GROUP, "worker-a");
    // The forger deletes the heartbeat for 3 s, less than the monitor's
    // deleted grace, faster than the worker writes it.
    let forger = {
        let (workers, key) = (workers.clone(), key.clone());
        tokio::spawn(async move {
            for _ in 0..15 {
                workers
                    .delete(&key)
                    .await
                    .expect("the forger deletes the heartbeat");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    expiry
        .wait_for(
            Duration::from_secs(10),
            "a scan that sees the deleted heartbeat and waits",
            |pass| matches!(pass, Pass::Done(outcome) if outcome.deferred.contains(&firing)),
        )
        .await;
    forger.await.expect("the forger ran");
    until_ok(
        Duration::from_secs(15),
        "the worker wrote its heartbeat again",
        || async {
            match workers.entry(&key).await {
                Ok(Some(entry)) if entry.operation == kv::Operation::Put => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    expiry
        .wait_for(Duration::from_secs(10), "a scan after it", |pass| {
            matches!(pass, Pass::Done(_))
        })
        .await;
    let firings = firings_of(&client, "held").await;
    assert_eq!(firings.len(), 1, "{firings:#?}");
    assert_eq!(firings[0].state, FiringState::Executing, "{firings:#?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    a.shutdown().await;
    replica.shutdown().await;
}
