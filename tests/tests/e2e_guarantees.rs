//! The guarantees, shown with real processes: built `chime-scheduler` and
//! `chime-worker` binaries, a real nats-server, PostgreSQL and SQLite, and a
//! chaos task that kills them.
//!
//! Each scenario checks, for every due instant of a mixed load (cron, every
//! and at jobs across two groups): it ran to a recorded final state; no
//! attempt was run twice (every run appends its firing id to a file); and it
//! prints the counts (instants, kills, re-queues, raw re-publishes that
//! JetStream's dedup absorbed).

use chime_common::client::Client;
use chime_common::FiringState;
use chime_tests::guarantees::*;
use chime_tests::*;
use chime_tests::{init_tracing, NatsServer, PgDatabase, Proxy, SqliteDatabase};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_postgres_every_instant_final_no_attempt_twice() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url().to_string(), runs.clone());
    cast.staff(3, &["alpha", "beta", "alpha"]).await;
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let seconds = 60;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&cast.runs_file, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;

    let (mut scheduler_kills, mut worker_kills) = (0, 0);
    let chaos_start = tokio::time::Instant::now();
    let mut tick = 0u64;
    while chaos_start.elapsed() < Duration::from_secs(seconds as u64) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        tick += 5;
        if tick.is_multiple_of(10) {
            let i = (rand_index(tick) % cast.schedulers.len() as u64) as usize;
            cast.schedulers[i].kill9();
            scheduler_kills += 1;
            let s = cast.scheduler().await;
            cast.schedulers[i] = s;
        }
        if tick.is_multiple_of(15) {
            let i = (rand_index(tick * 7) % cast.workers.len() as u64) as usize;
            cast.workers[i].1.kill9();
            worker_kills += 1;
            let group = cast.workers[i].0.clone();
            let w = cast.worker(&group).await;
            cast.workers[i].1 = w;
        }
    }
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    println!(
        "chaos on PostgreSQL: {} instants, {} scheduler kills, {} worker kills, {} attempts re-queued (lost), {} raw re-publishes absorbed by dedup",
        verdict.instants, scheduler_kills, worker_kills, verdict.requeued, verdict.republished
    );
    assert!(scheduler_kills >= 5 && worker_kills >= 3);
    for s in &mut cast.schedulers {
        s.terminate(Duration::from_secs(20)).await;
    }
    for (_, w) in &mut cast.workers {
        w.terminate(Duration::from_secs(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_sqlite_with_one_scheduler() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url(), runs.clone());
    cast.staff(1, &["alpha", "beta"]).await;
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let seconds = 30;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    let (mut scheduler_kills, mut worker_kills) = (0, 0);
    for tick in [8u64, 16, 24] {
        // 200 ms past the second, when the load's runs are in flight.
        tokio::time::sleep(Duration::from_millis(
            (start_ms + tick as i64 * 1000 + 200 - chrono::Utc::now().timestamp_millis()).max(0)
                as u64,
        ))
        .await;
        let i = (tick as usize / 8) % cast.workers.len();
        cast.workers[i].1.kill9();
        worker_kills += 1;
        let group = cast.workers[i].0.clone();
        let w = cast.worker(&group).await;
        cast.workers[i].1 = w;
        if tick == 16 {
            cast.schedulers[0].kill9();
            scheduler_kills += 1;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let s = cast.scheduler().await;
            cast.schedulers[0] = s;
        }
    }
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    println!(
        "chaos on SQLite: {} instants, {} scheduler kills, {} worker kills, {} attempts re-queued (lost), {} raw re-publishes absorbed by dedup",
        verdict.instants, scheduler_kills, worker_kills, verdict.requeued, verdict.republished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_mid_run_loses_nothing() {
    init_tracing();
    let mut nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url().to_string(), runs.clone());
    cast.staff(1, &["alpha", "beta"]).await;
    let seconds = 24;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = {
        let client = Client::new(nats.connect().await);
        put_all(&client, &jobs).await
    };
    tokio::time::sleep(Duration::from_millis(
        (start_ms + 8_000 - chrono::Utc::now().timestamp_millis()).max(0) as u64,
    ))
    .await;
    nats.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    nats.restart().await;
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    let firings = all_firings(&client, &jobs).await.expect("firings");
    let succeeded = firings
        .iter()
        .filter(|f| f.state == FiringState::Succeeded)
        .count();
    println!(
        "NATS restart: {} instants, {} succeeded attempts, {} re-queued",
        verdict.instants, succeeded, verdict.requeued
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_does_not_need_a_scheduler_restart() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let upstream: std::net::SocketAddr = "127.0.0.1:5432".parse().expect("addr");
    let proxy = Proxy::start(upstream).await;
    let proxied = db
        .url()
        .replace("127.0.0.1:5432", &proxy.addr().to_string())
        .replace("localhost:5432", &proxy.addr().to_string());
    assert_ne!(
        proxied,
        db.url(),
        "the test database URL goes through 127.0.0.1:5432"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), proxied, runs.clone());
    cast.staff(1, &["alpha", "beta"]).await;
    let client = Client::new(nats.connect().await);
    let seconds = 20;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    tokio::time::sleep(Duration::from_millis(
        (start_ms + 6_000 - chrono::Utc::now().timestamp_millis()).max(0) as u64,
    ))
    .await;
    proxy.cut();
    let during = client
        .put_job(
            &json!({"id": "during-outage", "schedule": {"every": "1h"}, "handler": "shell",
            "payload": {"argv": ["/bin/true"]}}),
        )
        .await;
    assert_eq!(
        during.expect_err("the store is down").code,
        chime_common::ErrorCode::Unavailable
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.unblock();
    // The same process serves again.
    eventually(Duration::from_secs(20), "the scheduler serves puts again", || {
        let client = client.clone();
        async move { client.put_job(&json!({"id": "after-outage", "schedule": {"every": "1h"}, "handler": "shell",
            "payload": {"argv": ["/bin/true"]}})).await.is_ok() }
    })
    .await;
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let seen = Arc::default();
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    assert!(
        cast.schedulers[0].try_status().is_none(),
        "the scheduler was never restarted"
    );
    println!(
        "PostgreSQL outage of 4 s: {} instants all final, {} re-queued",
        verdict.instants, verdict.requeued
    );
}
