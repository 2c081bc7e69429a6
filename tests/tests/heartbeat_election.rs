//! The heartbeat bucket through the loss of its leader: on a three-node
//! cluster with `chime-workers` replicated three times, kill -9 of the node
//! leading the bucket leaves it without a leader until the other two elect
//! one. Workers' heartbeats must ride that out without fencing.
//!
//! `a_worker_rides_out_the_election_of_its_heartbeat_buckets_leader` runs a
//! real worker with the default heartbeat settings through that kill.
//!
//! `the_heartbeat_buckets_leaderless_time_is_measured` is a measurement
//! (`--ignored --nocapture`): it writes a key every 50 ms through a node
//! that survives, kills the leader, and prints the longest time between two
//! acknowledged writes, several times over. docs/OPERATIONS.md sizes the
//! heartbeat settings on its figures.

use async_nats::jetstream::{self, kv};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{init_tracing, until_ok, NatsCluster, SqliteDatabase};
use chime_worker::{FiringContext, Worker};
use std::time::Duration;
use tokio::time::Instant;

const BUCKET: &str = "chime-workers";
const STREAM: &str = "KV_chime-workers";
/// How long the cluster may take to elect and to catch a node up.
const HEAL: Duration = Duration::from_secs(60);
/// Kills measured.
const RUNS: usize = 5;

/// Puts a key every `every` until `stop`, each put waiting at most 1 s as a
/// heartbeat does; returns the longest time from one acknowledged put's send
/// to the next acknowledged put's send.
async fn longest_gap(
    store: kv::Store,
    every: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Duration {
    let mut last_ok: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    while !*stop.borrow() {
        let sent = Instant::now();
        let put = tokio::time::timeout(Duration::from_secs(1), store.put("w", "beat".into())).await;
        if let Ok(Ok(_)) = put {
            if let Some(last) = last_ok {
                longest = longest.max(sent - last);
            }
            last_ok = Some(sent);
        }
        tokio::time::sleep(every).await;
    }
    longest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn the_heartbeat_buckets_leaderless_time_is_measured() {
    init_tracing();
    let mut cluster = NatsCluster::start(3).await;
    let admin = jetstream::new(cluster.connect().await);
    admin
        .create_key_value(kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            max_age: Duration::from_secs(6),
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .expect("bucket");
    cluster.wait_healthy(&admin, HEAL).await;
    let mut gaps = Vec::new();
    for run in 0..RUNS {
        let leader = cluster
            .stream_leader(&admin, STREAM)
            .await
            .expect("the bucket has a leader");
        let writer_node = (leader + 1) % cluster.size();
        let writer = jetstream::new(cluster.connect_node(writer_node).await);
        let store = writer.get_key_value(BUCKET).await.expect("bucket");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let putting = tokio::spawn(longest_gap(store, Duration::from_millis(50), stopped));
        tokio::time::sleep(Duration::from_secs(1)).await;
        cluster.kill(leader);
        let killed = Instant::now();
        let observer = jetstream::new(cluster.connect_node(writer_node).await);
        let elected = cluster
            .wait_new_leader(&observer, STREAM, leader, HEAL)
            .await;
        let election = killed.elapsed();
        // Writes go on a while after the election, so a slow first write counts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.send_replace(true);
        let gap = putting.await.expect("the writer");
        println!(
            "run {run}: killed {} (leader), {} elected after {:.2} s as seen by polling; longest time between acknowledged puts {:.2} s",
            cluster.name(leader),
            cluster.name(elected),
            election.as_secs_f64(),
            gap.as_secs_f64()
        );
        gaps.push(gap);
        cluster.start_node(leader).await;
        cluster.wait_healthy(&observer, HEAL).await;
    }
    let longest = gaps.iter().max().copied().unwrap_or_default();
    println!(
        "longest time between acknowledged heartbeat puts over {RUNS} kills of the bucket's leader: {:.2} s",
        longest.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rides_out_the_election_of_its_heartbeat_buckets_leader() {
    init_tracing();
    let mut cluster = NatsCluster::start(3).await;
    let db = SqliteDatabase::create();
    let mut config = SchedulerConfig::new(cluster.urls(), db.url());
    config.topology.replicas = 3;
    let replica = Replica::start(config).await.expect("replica starts");
    let admin = jetstream::new(cluster.connect().await);
    cluster.wait_healthy(&admin, HEAL).await;
    let leader = cluster
        .stream_leader(&admin, STREAM)
        .await
        .expect("the bucket has a leader");
    let survivor = (leader + 1) % cluster.size();
    // Default heartbeat interval, fence margin and retries; the bucket's
    // default key TTL, as the scheduler created it.
    let worker = Worker::builder()
        .nats(cluster.connect_node(survivor).await)
        .worker_id("steady")
        .handler_fn("noop", |_ctx: FiringContext| async { Ok(None) })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker starts");
    let observer = jetstream::new(cluster.connect_node(survivor).await);
    let workers = observer.get_key_value(BUCKET).await.expect("bucket");
    let before = workers
        .entry(chime_common::protocol::heartbeat_key("default", "steady"))
        .await
        .expect("read")
        .expect("the worker beats")
        .revision;

    cluster.kill(leader);
    cluster
        .wait_new_leader(&observer, STREAM, leader, HEAL)
        .await;
    // Two beats acknowledged after the election.
    until_ok(
        Duration::from_secs(30),
        "two heartbeats after the election",
        || {
            let workers = workers.clone();
            async move {
                let now = workers
                    .entry(chime_common::protocol::heartbeat_key("default", "steady"))
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("no heartbeat key")?
                    .revision;
                if now >= before + 2 {
                    Ok(())
                } else {
                    Err(format!("revision {now}"))
                }
            }
        },
    )
    .await;
    assert_eq!(
        worker.metrics().fenced.get(),
        0,
        "the worker fenced itself while its bucket elected a leader"
    );
    assert!(!worker.status().is_fenced());
    worker.shutdown().await;
    replica.shutdown().await;
}
