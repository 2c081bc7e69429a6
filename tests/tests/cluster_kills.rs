//! One node of a three-node JetStream cluster killed -9 for a while, then
//! restarted, under two schedulers on PostgreSQL (or one on SQLite) and two
//! workers: every instant due meanwhile runs exactly once, and no firing is
//! left without a final state.
//!
//! While a killed node led a stream, publishes in flight are answered
//! `409 duplicate message id is in process`, and a takeover makes two
//! replicas publish one firing; while it led the `chime-slices` bucket, no
//! replica can renew its liveness and each takes over the other's slices.
//! The kills cover a follower, the `CHIME_FIRE` leader and the meta leader
//! in turn, and a kill of the `CHIME_FIRE` leader in the middle of a
//! publish burst.

use async_nats::jetstream;
use chime_common::client::Client;
use chime_tests::guarantees::*;
use chime_tests::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// How long a node may take to catch its streams up after it comes back.
const HEAL: Duration = Duration::from_secs(60);

/// How long a killed node stays down: longer than an election and than a
/// replica's liveness, so leaders move and slices are taken over.
const DOWN: Duration = Duration::from_secs(12);

/// How long the instants due so far may take to become final after a kill.
const SETTLE: Duration = Duration::from_secs(60);

/// `count` jobs in group `alpha` firing every second from `start_ms` for
/// `seconds` instants, each run recorded in `runs`.
fn every_second(runs: &Path, start_ms: i64, seconds: i64, count: i64) -> Vec<Value> {
    (0..count)
        .map(|i| {
            json!({"id": format!("tick-{i}"), "group": "alpha", "handler": "shell",
                "payload": {"argv": ["sh", "-c", format!("echo \"$CHIME_FIRING_ID\" >> {}", runs.display())]},
                "schedule": {"every": "1s", "start_at": rfc3339(start_ms + i * 10), "count": seconds},
                "timeout": "20s"})
        })
        .collect()
}

/// The database the schedulers share.
enum Db {
    Postgres(PgDatabase),
    Sqlite(SqliteDatabase),
}

impl Db {
    async fn create(kind: DatabaseKind) -> Db {
        match kind {
            DatabaseKind::Postgres => Db::Postgres(PgDatabase::create().await),
            DatabaseKind::Sqlite => Db::Sqlite(SqliteDatabase::create()),
        }
    }

    fn url(&self) -> String {
        match self {
            Db::Postgres(db) => db.url().to_string(),
            Db::Sqlite(db) => db.url(),
        }
    }

    /// Two replicas on PostgreSQL; one on SQLite, which has one writer.
    fn schedulers(&self) -> usize {
        match self {
            Db::Postgres(_) => 2,
            Db::Sqlite(_) => 1,
        }
    }
}

/// A cluster, the database, its schedulers on R3 streams and two workers.
async fn setup(
    runs: &Path,
    kind: DatabaseKind,
) -> (NatsCluster, Db, Cast, jetstream::Context, Client) {
    let cluster = NatsCluster::start(3).await;
    let db = Db::create(kind).await;
    let mut cast = Cast::new(cluster.urls(), db.url(), runs.to_path_buf());
    cast.scheduler_args = vec!["--stream-replicas".into(), "3".into()];
    cast.staff(db.schedulers(), &["alpha", "alpha"]).await;
    let connection = cluster.connect().await;
    let js = jetstream::new(connection.clone());
    cluster.wait_healthy(&js, HEAL).await;
    (cluster, db, cast, js, Client::new(connection))
}

/// Kills node `node` -9, keeps it down for [`DOWN`], starts it again and
/// waits until every stream is whole again.
async fn kill_for_a_while(cluster: &mut NatsCluster, js: &jetstream::Context, node: usize) {
    cluster.kill(node);
    // The outage itself lasts a fixed time: that is what is being tested.
    tokio::time::sleep(DOWN).await;
    cluster.start_node(node).await;
    cluster.wait_healthy(js, HEAL).await;
}

/// How often the schedulers logged `needle` so far, summed.
fn logged(cast: &Cast, needle: &str) -> usize {
    cast.schedulers
        .iter()
        .map(|s| s.log().matches(needle).count())
        .sum()
}

/// Slices the schedulers took over from each other, and what they did
/// about publishes JetStream did not back: copies published after a
/// duplicate ack whose sequence did not hold the firing's message, and
/// copies the republisher published.
fn rescues(cast: &Cast) -> String {
    format!(
        "{} slices taken over, {} firings published again after a duplicate ack, {} by the republisher",
        logged(cast, "took over a stale slice"),
        logged(cast, "acknowledged as a duplicate but"),
        logged(cast, "published a firing again")
    )
}

/// Panics if a scheduler or worker process exited.
fn all_alive(cast: &mut Cast) {
    for (i, scheduler) in cast.schedulers.iter_mut().enumerate() {
        assert!(
            scheduler.try_status().is_none(),
            "scheduler {i} exited:\n{}",
            scheduler.log_tail(60)
        );
    }
    for (group, worker) in &mut cast.workers {
        assert!(
            worker.try_status().is_none(),
            "a worker of {group} exited:\n{}",
            worker.log_tail(60)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_follower_the_stream_leader_and_the_meta_leader_loses_and_repeats_no_instant() {
    kill_each_node_role(DatabaseKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_killing_each_node_role_loses_and_repeats_no_instant() {
    kill_each_node_role(DatabaseKind::Sqlite).await;
}

/// The node kills cycle through these roles.
const ROLES: [&str; 4] = [
    "a follower",
    "the CHIME_FIRE leader",
    "the meta leader",
    "the chime-slices leader",
];

/// The node that plays `role` now.
async fn node_playing(cluster: &mut NatsCluster, js: &jetstream::Context, role: &str) -> usize {
    let leader = cluster
        .stream_leader(js, "CHIME_FIRE")
        .await
        .expect("CHIME_FIRE has a leader");
    let meta = cluster.meta_leader().await.expect("a meta leader");
    match role {
        "a follower" => (0..cluster.size())
            .find(|n| *n != leader && *n != meta)
            .unwrap_or((leader + 1) % cluster.size()),
        "the CHIME_FIRE leader" => leader,
        "the meta leader" => meta,
        _ => cluster
            .stream_leader(js, "KV_chime-slices")
            .await
            .expect("chime-slices has a leader"),
    }
}

/// Kills a follower, the `CHIME_FIRE` leader, the meta leader and the
/// `chime-slices` leader in turn under a steady load of every-second jobs.
async fn kill_each_node_role(kind: DatabaseKind) {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let (mut cluster, _db, mut cast, js, client) = setup(&runs, kind).await;
    let seen = watch_publishes(cluster.connect().await);
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = every_second(&runs, start_ms, 300, 20);
    let put_at = put_all(&client, &jobs).await;
    // A few seconds of load in flight before the first kill.
    let steady = start_ms + 4_000 - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(steady.max(0) as u64)).await;

    for role in ROLES {
        let node = node_playing(&mut cluster, &js, role).await;
        let began = tokio::time::Instant::now();
        kill_for_a_while(&mut cluster, &js, node).await;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let due = due_instants(&jobs, put_at, start_ms, now_ms);
        let verdict = verify(&client, &jobs, &due, &runs, &seen, SETTLE).await;
        all_alive(&mut cast);
        println!(
            "kill -9 of {} ({role}) for {DOWN:?} ({:.1} s): {verdict}; {}",
            cluster.name(node),
            began.elapsed().as_secs_f64(),
            rescues(&cast)
        );
    }
    cast.terminate_all(Duration::from_secs(20)).await;
}

/// A number of seconds from the environment variable `name`, or `default`.
fn seconds_from_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number of seconds"))
        })
        .unwrap_or(default)
}

/// The soak behind docs/PERFORMANCE.md's cluster figure: twenty
/// every-second jobs on two PostgreSQL schedulers for an hour
/// (`CHIME_SOAK_SECONDS`), one node killed -9 for [`DOWN`] every four
/// minutes (`CHIME_SOAK_KILL_EVERY`), the roles in turn; after each kill
/// every instant due so far ran exactly once. Ignored: it runs for the
/// hour, on demand (`cargo test -p chime-tests --test cluster_kills --
/// --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "an hour-long soak, run on demand"]
async fn an_hour_of_node_kills_loses_and_repeats_no_instant() {
    init_tracing();
    let seconds = seconds_from_env("CHIME_SOAK_SECONDS", 3600);
    let every = Duration::from_secs(seconds_from_env("CHIME_SOAK_KILL_EVERY", 240));
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let (mut cluster, _db, mut cast, js, client) = setup(&runs, DatabaseKind::Postgres).await;
    let seen = watch_publishes(cluster.connect().await);
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = every_second(&runs, start_ms, seconds as i64, 20);
    let put_at = put_all(&client, &jobs).await;
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);

    let mut kills = 0;
    let mut next = tokio::time::Instant::now() + every;
    while next + DOWN + SETTLE < end {
        // The load runs undisturbed between kills: the pause is the test.
        tokio::time::sleep_until(next).await;
        let role = ROLES[kills % ROLES.len()];
        let node = node_playing(&mut cluster, &js, role).await;
        kill_for_a_while(&mut cluster, &js, node).await;
        kills += 1;
        let due = due_instants(
            &jobs,
            put_at,
            start_ms,
            chrono::Utc::now().timestamp_millis(),
        );
        let verdict = verify(&client, &jobs, &due, &runs, &seen, SETTLE).await;
        all_alive(&mut cast);
        println!(
            "kill {kills}, {} ({role}), at {:.0} s: {verdict}; {}",
            cluster.name(node),
            (chrono::Utc::now().timestamp_millis() - start_ms) as f64 / 1000.0,
            rescues(&cast)
        );
        next += every;
    }
    tokio::time::sleep_until(end).await;
    let due = due_instants(
        &jobs,
        put_at,
        start_ms,
        chrono::Utc::now().timestamp_millis(),
    );
    let verdict = verify(&client, &jobs, &due, &runs, &seen, SETTLE).await;
    all_alive(&mut cast);
    println!(
        "soak of {seconds} s with {kills} node kills: {verdict}; {}",
        rescues(&cast)
    );
    assert!(kills > 0, "the soak is long enough for a kill");
    cast.terminate_all(Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_stream_leader_in_the_middle_of_a_publish_burst_loses_and_repeats_no_instant() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let (mut cluster, _db, mut cast, js, client) = setup(&runs, DatabaseKind::Postgres).await;
    let connection = cluster.connect().await;
    let seen = watch_publishes(connection.clone());
    // Every burst publish, as the wire carries it.
    let mut burst_publishes = connection
        .subscribe("chime.fire.alpha.>")
        .await
        .expect("subscribed");
    connection.flush().await.expect("flushed");

    let burst = 400;
    let at = aligned_start(Duration::from_secs(10));
    let jobs: Vec<Value> = (0..burst)
        .map(|i| {
            json!({"id": format!("burst-{i}"), "group": "alpha", "handler": "shell",
                "payload": {"argv": ["sh", "-c", format!("echo \"$CHIME_FIRING_ID\" >> {}", runs.display())]},
                "schedule": {"at": rfc3339(at)}, "timeout": "20s"})
        })
        .collect();
    let put_at = put_all(&client, &jobs).await;
    let leader = cluster
        .stream_leader(&js, "CHIME_FIRE")
        .await
        .expect("CHIME_FIRE has a leader");
    // Killed once a tenth of the burst is on the wire.
    let mut on_the_wire = 0;
    while on_the_wire < burst / 10 {
        burst_publishes.next().await.expect("the subscription");
        on_the_wire += 1;
    }
    kill_for_a_while(&mut cluster, &js, leader).await;

    let due = due_instants(&jobs, put_at, at, at + 1);
    assert_eq!(due.len(), burst, "every job is due once");
    let verdict = verify(&client, &jobs, &due, &runs, &seen, SETTLE).await;
    all_alive(&mut cast);
    println!(
        "kill -9 of {} leading CHIME_FIRE after {on_the_wire} of {burst} burst publishes: {verdict}; {}",
        cluster.name(leader),
        rescues(&cast)
    );
    cast.terminate_all(Duration::from_secs(20)).await;
}
