//! Workers fence themselves: a worker cut off from NATS stops its runs
//! before the scheduler's expiry monitor can re-queue them, so one firing
//! never runs on two workers at once; the firing then runs again without
//! spending the job's one attempt, since the fault was NATS's, not the job's. Real NATS, a real scheduler replica on
//! SQLite, two real workers; one of them reaches NATS through a proxy the
//! test blocks.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::{Firing, FiringState};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{eventually, init_tracing, NatsServer, Proxy, SqliteDatabase};
use chime_worker::{FiringContext, HandlerError, Worker, WorkerHandle};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const GROUP: &str = "fenced";

/// One run of the handler, as it saw itself.
#[derive(Debug, Clone)]
struct Run {
    worker: String,
    attempt: u32,
    started: Instant,
    /// When the handler saw its cancel token fire.
    cancelled: Option<Instant>,
    ended: Option<Instant>,
}

type Runs = Arc<Mutex<Vec<Run>>>;

/// A worker of `GROUP` on `client` whose `long` handler runs attempt 1 for a
/// minute (until cancelled) and later attempts for half a second.
async fn worker(client: async_nats::Client, id: &str, runs: Runs) -> WorkerHandle {
    Worker::builder()
        .nats(client)
        .group(GROUP)
        .worker_id(id)
        .threads(2)
        .heartbeat_interval(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(250))
        .handler_fn("long", move |ctx: FiringContext| {
            let runs = runs.clone();
            async move {
                let index = {
                    let mut runs = runs.lock().unwrap();
                    runs.push(Run {
                        worker: ctx.worker_id.clone(),
                        attempt: ctx.firing.attempt,
                        started: Instant::now(),
                        cancelled: None,
                        ended: None,
                    });
                    runs.len() - 1
                };
                let work = if ctx.firing.attempt == 1 {
                    Duration::from_secs(60)
                } else {
                    Duration::from_millis(500)
                };
                let cancelled = tokio::select! {
                    _ = tokio::time::sleep(work) => false,
                    _ = ctx.cancel.cancelled() => true,
                };
                let now = Instant::now();
                let mut runs = runs.lock().unwrap();
                runs[index].ended = Some(now);
                if cancelled {
                    runs[index].cancelled = Some(now);
                    return Err(HandlerError::new("stopped"));
                }
                Ok(Some(format!("attempt {} done", ctx.firing.attempt)))
            }
        })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker starts")
}

async fn history(client: &Client, job: &str) -> Vec<Firing> {
    let mut firings = client
        .list_firings(&ListFiringsRequest {
            job_id: Some(job.into()),
            limit: Some(100),
            ..Default::default()
        })
        .await
        .expect("firings.list")
        .firings;
    firings.sort_by_key(|f| f.attempt);
    firings
}

fn run_of(runs: &Runs, attempt: u32) -> Option<Run> {
    runs.lock()
        .unwrap()
        .iter()
        .find(|r| r.attempt == attempt)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_nats_stops_its_run_before_the_next_attempt_starts() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    // What the scheduler does for the groups it sees; see chime_tests::create_group_consumers.
    let jetstream = async_nats::jetstream::new(nats.connect().await);
    chime_tests::create_group_consumers(
        &jetstream,
        &chime_common::Subjects::default(),
        &chime_runtime::topology::TopologyConfig::default(),
        GROUP,
    )
    .await;
    let client = Client::new(nats.connect().await);
    let runs: Runs = Arc::default();

    let nats_addr: SocketAddr = format!("127.0.0.1:{}", nats.port()).parse().unwrap();
    let proxy = Proxy::start(nats_addr).await;
    let behind_proxy = async_nats::connect(format!("nats://{}", proxy.addr()))
        .await
        .expect("connect through the proxy");
    let a = worker(behind_proxy, "worker-a", runs.clone()).await;

    client
        .put_job(&json!({
            "id": "long", "group": GROUP, "handler": "long",
            "schedule": {"at": chime_common::duration::format_time(chrono::Utc::now() + chrono::Duration::seconds(1))},
            "retry": {"max_attempts": 1, "initial": "100ms", "max": "1s"},
            "timeout": "5m",
        }))
        .await
        .expect("put");
    eventually(
        Duration::from_secs(20),
        "attempt 1 runs on worker-a",
        || {
            let runs = runs.clone();
            async move { run_of(&runs, 1).is_some() }
        },
    )
    .await;
    let b = worker(nats.connect().await, "worker-b", runs.clone()).await;

    // worker-a's heartbeats (and everything else) stop reaching NATS.
    proxy.block();
    let blocked = Instant::now();
    eventually(
        Duration::from_secs(30),
        "attempt 2 runs on worker-b",
        || {
            let runs = runs.clone();
            async move { run_of(&runs, 2).is_some() }
        },
    )
    .await;
    let first = run_of(&runs, 1).unwrap();
    let second = run_of(&runs, 2).unwrap();
    assert_eq!(
        (first.worker.as_str(), second.worker.as_str()),
        ("worker-a", "worker-b")
    );
    let cancelled = first.cancelled.unwrap_or_else(|| {
        panic!(
            "attempt 1 was still running on worker-a when attempt 2 started on worker-b, {:?} after the block",
            second.started - blocked
        )
    });
    assert!(
        cancelled < second.started,
        "attempt 1 was cancelled {:?} after attempt 2 started",
        cancelled - second.started
    );
    println!(
        "fenced {:?} after the block, {:?} before attempt 2 started",
        cancelled - blocked,
        second.started - cancelled
    );
    assert!(a.status().is_fenced());
    assert_eq!(a.metrics().fenced.get(), 1);

    // Back on the network: the fence lifts, and attempt 1's late report
    // (failed: fenced) changes nothing, since the scheduler already ended it.
    proxy.unblock();
    eventually(Duration::from_secs(20), "worker-a's fence lifts", || {
        let status = a.status();
        async move { !status.is_fenced() }
    })
    .await;
    eventually(Duration::from_secs(20), "attempt 2 succeeded", || {
        let client = client.clone();
        async move {
            history(&client, "long")
                .await
                .iter()
                .any(|f| f.attempt == 2 && f.state == FiringState::Succeeded)
        }
    })
    .await;
    let report = a.shutdown().await;
    assert_eq!(
        report.unsent_events, 0,
        "the fenced run's report was published"
    );
    let firings = history(&client, "long").await;
    assert_eq!(firings.len(), 2, "{firings:#?}");
    assert_eq!(firings[0].state, FiringState::Lost, "{firings:#?}");
    assert_eq!(firings[0].worker.as_deref(), Some("worker-a"));
    assert_eq!(firings[1].worker.as_deref(), Some("worker-b"));
    assert_eq!(runs.lock().unwrap().len(), 2, "each attempt ran once");
    b.shutdown().await;
    replica.shutdown().await;
}
