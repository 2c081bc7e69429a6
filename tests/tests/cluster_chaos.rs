//! The guarantees on a three-node JetStream cluster: built schedulers and
//! workers on R3 streams and buckets (`--stream-replicas 3`), PostgreSQL,
//! and NATS failing under them node by node.
//!
//! One mixed load runs throughout (every-second and two-second jobs, cron,
//! one-shots, two groups). The faults come one after another: kill -9 of
//! the node leading `CHIME_FIRE`, kill -9 of the node leading the
//! `chime-slices` bucket, a rolling restart of all three nodes, and a
//! partition cutting one node from the other two for longer than an
//! election, then healed. After each, every instant due so far must be
//! final, no attempt may have run twice, and the counts are printed.

use async_nats::jetstream;
use chime_common::client::Client;
use chime_tests::guarantees::*;
use chime_tests::*;
use std::time::Duration;

/// Long enough for a killed leader's followers to elect another (JetStream
/// elects after four to nine seconds without a heartbeat).
const ELECTION: Duration = Duration::from_secs(30);

/// How long a node may take to catch its streams up after it comes back.
const HEAL: Duration = Duration::from_secs(60);

/// A partition this long outlasts the election timeout and the leader's
/// lost-quorum check, so the majority elects new leaders while the cut
/// node still thinks it leads.
const PARTITION: Duration = Duration::from_secs(12);

/// How long the instants due so far may take to become final after a fault.
const SETTLE: Duration = Duration::from_secs(90);

/// What a step needs to check the guarantees.
struct Check<'a> {
    client: &'a Client,
    jobs: &'a [serde_json::Value],
    put_at: chrono::DateTime<chrono::Utc>,
    start_ms: i64,
    runs: &'a std::path::Path,
    seen: &'a Publishes,
}

impl Check<'_> {
    /// Every instant due until now is final and no attempt ran twice.
    async fn after(&self, step: &str, began: tokio::time::Instant) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let due = due_instants(self.jobs, self.put_at, self.start_ms, now_ms);
        let verdict = verify(self.client, self.jobs, &due, self.runs, self.seen, SETTLE).await;
        println!("{step} ({:.1} s): {verdict}", began.elapsed().as_secs_f64());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_loses_and_repeats_nothing_through_crashes_restarts_and_a_partition() {
    init_tracing();
    let mut cluster = NatsCluster::start(3).await;
    let db = PgDatabase::create().await;
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(cluster.urls(), db.url().to_string(), runs.clone());
    cast.scheduler_args = vec!["--stream-replicas".into(), "3".into()];
    cast.staff(3, &["alpha", "beta", "alpha"]).await;
    let connection = cluster.connect().await;
    let js = jetstream::new(connection.clone());
    cluster.wait_healthy(&js, HEAL).await;
    let slices_stream = "KV_chime-slices";
    for stream in ["CHIME_FIRE", slices_stream] {
        let info = js
            .get_stream(stream)
            .await
            .expect("the schedulers created it")
            .info()
            .await
            .expect("stream info")
            .config
            .num_replicas;
        assert_eq!(info, 3, "{stream} is replicated on every node");
    }
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    // Longer than the faults take; only the instants due by each check count.
    let seconds = 240;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    let check = Check {
        client: &client,
        jobs: &jobs,
        put_at,
        start_ms,
        runs: &runs,
        seen: &seen,
    };
    // A few seconds of load in flight before the first fault.
    let steady = start_ms + 5_000 - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(steady.max(0) as u64)).await;

    for stream in ["CHIME_FIRE", slices_stream] {
        let began = tokio::time::Instant::now();
        let leader = cluster
            .stream_leader(&js, stream)
            .await
            .unwrap_or_else(|| panic!("{stream} has a leader"));
        cluster.kill(leader);
        let next = cluster.wait_new_leader(&js, stream, leader, ELECTION).await;
        cluster.start_node(leader).await;
        cluster.wait_healthy(&js, HEAL).await;
        check
            .after(
                &format!(
                    "kill -9 of {} leading {stream} (now led by {})",
                    cluster.name(leader),
                    cluster.name(next)
                ),
                began,
            )
            .await;
    }

    let began = tokio::time::Instant::now();
    for node in 0..cluster.size() {
        cluster.restart(node).await;
        cluster.wait_healthy(&js, HEAL).await;
    }
    check.after("rolling restart of all nodes", began).await;

    // Cut the node leading the firing stream, watched from one that stays
    // in the majority (the test's own client may be on the cut node).
    let began = tokio::time::Instant::now();
    let victim = cluster
        .stream_leader(&js, "CHIME_FIRE")
        .await
        .expect("CHIME_FIRE has a leader");
    let observer = jetstream::new(cluster.connect_node((victim + 1) % cluster.size()).await);
    cluster.isolate(victim);
    let next = cluster
        .wait_new_leader(&observer, "CHIME_FIRE", victim, ELECTION)
        .await;
    // The fault itself lasts a fixed time: that is what is being tested.
    tokio::time::sleep(PARTITION.saturating_sub(began.elapsed())).await;
    cluster.heal(victim);
    cluster.wait_healthy(&observer, HEAL).await;
    check
        .after(
            &format!(
                "{} cut from the others for {PARTITION:?} (CHIME_FIRE moved to {})",
                cluster.name(victim),
                cluster.name(next)
            ),
            began,
        )
        .await;

    cast.terminate_all(Duration::from_secs(20)).await;
}
