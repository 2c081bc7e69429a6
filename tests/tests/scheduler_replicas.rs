//! Several replicas on one store: every due instant is published exactly
//! once, also when the replica holding the next slices is killed.

use chime_common::client::Client;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_tests::{init_tracing, NatsServer, PgDatabase};
use futures::StreamExt;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;

/// Puts `jobs` jobs that fire every second from `start_ms`, `count` times,
/// several puts in flight at once, and checks that all of them were stored
/// before that instant: a job stored after it would begin at a later one.
async fn put_every_second_jobs(
    client: &Client,
    prefix: &str,
    jobs: usize,
    start_ms: i64,
    count: u32,
) {
    futures::stream::iter(0..jobs)
        .map(|i| async move {
            let spec = json!({
                "id": format!("{prefix}-{i}"),
                "group": "load",
                "schedule": {"every": "1s", "start_at": rfc3339(start_ms), "count": count},
                "handler": "noop",
            });
            client.put_job(&spec).await.expect("put job");
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let ahead_ms = start_ms - chrono::Utc::now().timestamp_millis();
    assert!(
        ahead_ms > 0,
        "the {prefix} jobs were stored {} ms after their first instant",
        -ahead_ms
    );
}

fn assert_each_instant_once(
    published: &[Published],
    prefix: &str,
    jobs: usize,
    start_ms: i64,
    count: u32,
) {
    let counts = count_by_instant(published);
    let duplicates: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "published more than once: {duplicates:?}"
    );
    let mut missing = Vec::new();
    for i in 0..jobs {
        for k in 0..count as i64 {
            let key = (format!("{prefix}-{i}"), start_ms + k * 1000, 1);
            if !counts.contains_key(&key) {
                missing.push(key);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} instants never published, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(published.len(), jobs * count as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_publish_every_instant_exactly_once() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut replicas = Vec::new();
    for i in 0..3 {
        let mut config = SchedulerConfig::new(nats.url(), db.url());
        config.replica_id = format!("replica-{i}");
        replicas.push(Replica::start(config).await.expect("replica starts"));
    }
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    let (jobs, count) = (200, 30);
    let start_ms = aligned_start(Duration::from_secs(4));
    put_every_second_jobs(&client, "load", jobs, start_ms, count).await;

    let end_ms = start_ms + count as i64 * 1000;
    let js = async_nats::jetstream::new(connection);
    eventually(
        Duration::from_millis(
            (end_ms - chrono::Utc::now().timestamp_millis()).max(0) as u64 + 10_000,
        ),
        "all firings published",
        || {
            let js = js.clone();
            async move {
                let info = js
                    .get_stream("CHIME_FIRE")
                    .await
                    .expect("stream")
                    .info()
                    .await
                    .expect("info")
                    .state
                    .messages;
                info >= (jobs * count as usize) as u64
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let published = read_fire_stream(&js, "CHIME_FIRE").await;
    assert_each_instant_once(&published, "load", jobs, start_ms, count);

    let mut by_replica = Vec::new();
    let mut total = 0.0;
    let mut duplicates = 0.0;
    for replica in &replicas {
        let text = replica.metrics.render();
        let n = metric_sum(&text, "chime_firings_published_total");
        by_replica.push(n);
        total += n;
        duplicates += metric_sum(&text, "chime_publish_duplicates_total");
    }
    println!("published per replica: {by_replica:?}");
    assert_eq!(
        total as usize,
        jobs * count as usize,
        "no replica published a firing twice"
    );
    assert_eq!(duplicates, 0.0, "JetStream saw no duplicate publish");
    assert!(
        by_replica.iter().filter(|n| **n > 0.0).count() >= 2,
        "the work is spread over replicas: {by_replica:?}"
    );
    let lateness: Vec<i64> = published
        .iter()
        .map(|p| p.stored_ms - p.scheduled_ms)
        .collect();
    println!(
        "max store lateness {} ms",
        lateness.iter().max().unwrap_or(&0)
    );
    for replica in replicas {
        replica.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_replica_hands_its_slices_over_on_time_and_loses_and_duplicates_nothing() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut processes = HashMap::new();
    for i in 0..3 {
        let id = format!("replica-{i}");
        let process = start_scheduler(&nats.url(), db.url(), &id).await;
        processes.insert(id, process);
    }
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    let (jobs, count) = (100, 20);
    let start_ms = aligned_start(Duration::from_secs(3));
    put_every_second_jobs(&client, "kill", jobs, start_ms, count).await;

    let js = async_nats::jetstream::new(connection);
    let kv = js
        .get_key_value("chime-slices")
        .await
        .expect("slices bucket");
    tokio::time::sleep(Duration::from_millis(
        (start_ms + 6_000 - chrono::Utc::now().timestamp_millis()).max(0) as u64,
    ))
    .await;

    // Every claimed slice that has not started yet, with its owner.
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut keys = kv.keys().await.expect("keys");
    let mut future: Vec<(i64, String)> = Vec::new();
    while let Some(Ok(key)) = keys.next().await {
        let Some(start) = key
            .strip_prefix("slice.")
            .and_then(|k| k.split('.').next())
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        if start > now_ms {
            let value = kv.get(&key).await.expect("get").expect("value");
            let claim: serde_json::Value = serde_json::from_slice(&value).expect("claim JSON");
            future.push((start, claim["owner"].as_str().expect("owner").to_string()));
        }
    }
    future.sort();
    // The victim holds the slice beginning about 2 s from now: claimed and
    // staged a second ago, so only a takeover can publish it. (A slice
    // claimed just before the kill may not be staged yet; its instants then
    // stay due and the next slice's owner stages them on time anyway.)
    let (_, owner) = future
        .iter()
        .find(|(s, _)| *s >= now_ms + 1_500)
        .cloned()
        .expect("a claimed slice beginning 1.5 s from now or later");
    let victim_slices: Vec<i64> = future
        .iter()
        .filter(|(_, o)| *o == owner)
        .map(|(s, _)| *s)
        .collect();
    println!(
        "killing {owner}, which holds slices starting {:?} ms from now",
        victim_slices.iter().map(|s| s - now_ms).collect::<Vec<_>>()
    );
    let killed_at = chrono::Utc::now().timestamp_millis();
    processes
        .get_mut(&owner)
        .expect("owner is one of ours")
        .kill9();

    let end_ms = start_ms + count as i64 * 1000;
    tokio::time::sleep(Duration::from_millis(
        (end_ms - chrono::Utc::now().timestamp_millis()).max(0) as u64 + 4_000,
    ))
    .await;
    let published = read_fire_stream(&js, "CHIME_FIRE").await;
    let worst = published
        .iter()
        .filter(|p| p.scheduled_ms >= killed_at - 1_000)
        .map(|p| p.stored_ms - p.scheduled_ms)
        .max()
        .unwrap_or(0);
    println!("largest publish delay after the kill: {worst} ms");
    assert_each_instant_once(&published, "kill", jobs, start_ms, count);
    // Its liveness lapses within a second of the kill and another replica
    // takes its claims over at once: slices it held that begin 1.5 s or more
    // after the kill are published on time, not at their lease's end (which
    // would make them 0.5–1.5 s late).
    let handed_over: Vec<i64> = victim_slices
        .iter()
        .copied()
        .filter(|s| *s >= killed_at + 1_500)
        .collect();
    assert!(
        !handed_over.is_empty(),
        "the victim held no slice starting 1.5 s after the kill: {victim_slices:?}, killed at {killed_at}"
    );
    let late = published
        .iter()
        .filter(|p| {
            handed_over
                .iter()
                .any(|s| p.scheduled_ms >= *s && p.scheduled_ms < s + 1_000)
        })
        .map(|p| p.stored_ms - p.scheduled_ms)
        .max()
        .expect("firings in the handed-over slices");
    assert!(
        late < 1_000,
        "slices {handed_over:?} of the killed replica were published up to {late} ms late"
    );
    for (_, mut process) in processes {
        process.terminate(Duration::from_secs(15)).await;
    }
}

/// A slice with at least `dense_jobs` jobs due is claimed and staged as it
/// enters the dense horizon, seconds before the lookahead would reach it,
/// and only its own instants go with it; a sparse slice waits for the
/// lookahead. Every instant is still published once, on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dense_slice_is_staged_before_the_lookahead_and_published_once() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut replicas = Vec::new();
    for i in 0..2 {
        let mut config = SchedulerConfig::new(nats.url(), db.url());
        config.replica_id = format!("replica-{i}");
        config.slicer.lookahead = Duration::from_secs(1);
        config.slicer.dense_horizon = Duration::from_secs(10);
        config.slicer.dense_jobs = 50;
        replicas.push(Replica::start(config).await.expect("replica starts"));
    }
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    // Each slice is checked once, as it enters the dense horizon, so every
    // job must be put before that: 10 s of margin, for a loaded machine.
    let dense_ms = aligned_start(Duration::from_secs(20));
    let sparse_ms = dense_ms + 1_000;
    let (dense, sparse) = (80, 5);
    for (prefix, n, at) in [("dense", dense, dense_ms), ("sparse", sparse, sparse_ms)] {
        for i in 0..n {
            let spec = json!({
                "id": format!("{prefix}-{i}"),
                "group": "load",
                "schedule": {"at": rfc3339(at + i as i64)},
                "handler": "noop",
            });
            client.put_job(&spec).await.expect("put job");
        }
    }
    put_every_second_jobs(&client, "steady", 3, dense_ms - 3_000, 6).await;
    let put_ahead_ms = dense_ms - chrono::Utc::now().timestamp_millis();
    assert!(
        put_ahead_ms > 10_000,
        "the jobs were put only {put_ahead_ms} ms before their instant, inside the dense horizon"
    );

    let js = async_nats::jetstream::new(connection);
    let kv = js
        .get_key_value("chime-slices")
        .await
        .expect("slices bucket");
    let dense_key = format!("slice.{dense_ms}.0");
    // The claim is in the bucket a moment before its firings are staged.
    let metrics: Vec<_> = replicas.iter().map(|r| r.metrics.clone()).collect();
    let staged = || {
        metrics
            .iter()
            .map(|m| metric_sum(&m.render(), "chime_wheel_staged_firings"))
            .sum::<f64>()
    };
    eventually(
        Duration::from_secs(16),
        "the dense slice claimed and staged",
        || {
            let (kv, key) = (kv.clone(), dense_key.clone());
            let in_wheels = staged();
            async move { kv.get(&key).await.expect("get").is_some() && in_wheels >= dense as f64 }
        },
    )
    .await;
    let ahead_ms = dense_ms - chrono::Utc::now().timestamp_millis();
    assert!(
        ahead_ms > 2_500,
        "claimed only {ahead_ms} ms before its instant; the lookahead is 1 s"
    );
    assert!(
        kv.get(&format!("slice.{sparse_ms}.0"))
            .await
            .expect("get")
            .is_none(),
        "the sparse slice after it waits for the lookahead"
    );

    let total = (dense + sparse + 3 * 6) as u64;
    eventually(Duration::from_secs(15), "all firings published", || {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream("CHIME_FIRE").await.expect("stream");
            stream.info().await.expect("info").state.messages >= total
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let published = read_fire_stream(&js, "CHIME_FIRE").await;
    let counts = count_by_instant(&published);
    assert!(counts.values().all(|n| *n == 1), "each instant once");
    assert_eq!(published.len() as u64, total);
    let late: Vec<_> = published
        .iter()
        .filter(|p| p.job_id.starts_with("dense-"))
        .map(|p| p.stored_ms - p.scheduled_ms)
        .filter(|late| *late > 1_000)
        .collect();
    assert!(late.is_empty(), "dense firings published late: {late:?}");
    for replica in replicas {
        replica.shutdown().await;
    }
}
