//! A PostgreSQL failover under load: a private primary with a synchronous
//! streaming standby (`pg_basebackup`), schedulers reaching the database
//! through one address (a proxy, as an operator's virtual IP), and mid-run
//! the primary killed, the standby promoted a few seconds later and the
//! address moved to it.
//!
//! Every due instant must be final afterwards and no attempt may have run
//! twice; the outage's effect is printed: the longest time no firing
//! started, and the latest start.

use chime_common::client::Client;
use chime_tests::guarantees::*;
use chime_tests::*;
use std::time::Duration;

/// How long the database is gone before the standby is promoted: an HA
/// manager (Patroni, a cloud's managed failover) first has to decide that
/// the primary is dead, which takes seconds, not the instant a test could.
const DETECTION: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_primary_and_promoting_the_standby_loses_and_repeats_nothing() {
    init_tracing();
    let primary = PgCluster::start(PgClusterOptions {
        replication: true,
        ..Default::default()
    });
    // Synchronous: a commit a scheduler saw succeed is on the standby too.
    // With asynchronous replication the last commits before the crash can
    // vanish: a start the store accepted is forgotten, and the same
    // attempt can be accepted, and run, a second time.
    let standby = primary.start_standby(true);
    let address = Proxy::start(primary.addr()).await;
    let database_url = format!("postgres://postgres@{}/postgres", address.addr());
    let nats = NatsServer::start().await;
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), database_url, runs.clone());
    cast.staff(2, &["alpha", "beta"]).await;
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let seconds = 30;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    let until =
        |ms: i64| Duration::from_millis((ms - chrono::Utc::now().timestamp_millis()).max(0) as u64);
    tokio::time::sleep(until(start_ms + 10_000)).await;

    let failed_at = tokio::time::Instant::now();
    let failed_ms = chrono::Utc::now().timestamp_millis();
    address.cut();
    primary.kill();
    // The outage itself lasts a fixed time: that is what is being tested.
    tokio::time::sleep(DETECTION).await;
    tokio::task::block_in_place(|| standby.promote());
    assert_eq!(
        standby.psql("SELECT pg_is_in_recovery()").trim(),
        "f",
        "the standby is a primary now"
    );
    address.retarget(standby.addr());
    address.unblock();
    let switched = failed_at.elapsed();

    let end_ms = start_ms + seconds * 1000;
    tokio::time::sleep(until(end_ms)).await;
    let due = due_instants(&jobs, put_at, start_ms, end_ms);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    let firings = all_firings(&client, &jobs).await.expect("history");
    let mut starts: Vec<i64> = firings
        .iter()
        .filter_map(|f| f.started_at.map(|t| t.timestamp_millis()))
        .filter(|t| *t >= start_ms && *t < end_ms)
        .collect();
    starts.sort_unstable();
    let silence = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let latest = firings
        .iter()
        .filter_map(|f| Some((f.started_at? - f.scheduled_at).num_milliseconds()))
        .max()
        .unwrap_or(0);
    let first_after = starts
        .iter()
        .find(|t| **t > failed_ms)
        .map(|t| t - failed_ms);
    println!(
        "PostgreSQL failover (standby promoted and address moved {:.1} s after the kill): {verdict}; longest time without a start {silence} ms, first start {:?} ms after the kill, latest start {latest} ms after its instant",
        switched.as_secs_f64(),
        first_after
    );
    assert!(
        first_after.is_some(),
        "firings started again after the failover"
    );
    cast.terminate_all(Duration::from_secs(20)).await;
}
