//! A worker runs only what the scheduler decided: a message published
//! straight onto `chime.fire.default.normal` by someone else, with the id of
//! a real staged firing, `shell` and an argv of its choosing, runs nothing:
//! the scheduler refuses the start (`not_as_staged`) and counts it, and the
//! real firing still runs, once: when its own message comes, or, when the
//! forgery also took the firing's `Nats-Msg-Id` so that JetStream answered
//! the real publish as a duplicate of it, when the publisher finds that the
//! sequence the ack named does not hold the firing's message and publishes
//! it again under a fresh id. The same holds on a three-node cluster with
//! replicated streams, where the duplicate answer comes from the stream's
//! leader.

use async_nats::HeaderMap;
use chime_common::headers;
use chime_tests::{
    chimectl_ok, history_json, NatsCluster, NatsServer, NatsUrl, PgDatabase, SqliteDatabase,
};
use serde_json::json;
use std::time::Duration;

/// What the forgery of one staged firing needs to know of it.
struct Staged {
    id: String,
    scheduled_at: String,
    at: i64,
}

/// Puts a shell job `canary` due a few seconds ahead whose run appends a
/// line to `runs`, and returns its firing once it is staged.
async fn stage_canary(
    nats: &impl NatsUrl,
    dir: &std::path::Path,
    runs: &std::path::Path,
) -> Staged {
    let at = chime_tests::aligned_start(Duration::from_secs(8));
    let spec = json!({
        "id": "canary",
        "schedule": {"at": chime_tests::rfc3339(at)},
        "handler": "shell",
        "payload": {"argv": ["sh", "-c", format!("echo ran >> {}", runs.display())]},
    });
    let file = dir.join("canary.json");
    std::fs::write(&file, spec.to_string()).expect("job file");
    chimectl_ok(nats, &["put", &file.display().to_string()]);
    let staged_now = || {
        history_json(nats, "canary")
            .into_iter()
            .find(|f| f["state"] == "staged")
    };
    chime_tests::eventually(Duration::from_secs(8), "the firing is staged", || async {
        staged_now().is_some()
    })
    .await;
    let staged = staged_now().expect("staged ahead of its instant");
    Staged {
        id: staged["id"].as_str().expect("a firing id").to_string(),
        scheduled_at: staged["scheduled_at"]
            .as_str()
            .expect("scheduled_at")
            .to_string(),
        at,
    }
}

/// Publishes a forgery of `staged` whose argv leaves `pwned`, with the
/// real firing's `Nats-Msg-Id` when `take_message_id`.
async fn forge(
    client: async_nats::Client,
    staged: &Staged,
    pwned: &std::path::Path,
    take_message_id: bool,
) {
    let mut forged = HeaderMap::new();
    if take_message_id {
        forged.insert(headers::NATS_MSG_ID, staged.id.as_str());
    }
    forged.insert(headers::FIRING_ID, staged.id.as_str());
    forged.insert(headers::JOB_ID, "canary");
    forged.insert(headers::HANDLER, "shell");
    forged.insert(headers::SCHEDULED_AT, staged.scheduled_at.as_str());
    forged.insert(headers::ATTEMPT, "1");
    forged.insert(headers::PRIORITY, "5");
    forged.insert(
        headers::DEADLINE,
        chime_tests::rfc3339(staged.at + 300_000).as_str(),
    );
    let body = json!({"argv": ["sh", "-c", format!("echo pwned > {}", pwned.display())]});
    async_nats::jetstream::new(client)
        .publish_with_headers("chime.fire.default.normal", forged, body.to_string().into())
        .await
        .expect("published")
        .await
        .expect("stored");
}

/// The lines `runs` holds: one per run of the canary.
fn runs_of(runs: &std::path::Path) -> usize {
    std::fs::read_to_string(runs).map_or(0, |text| text.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_firing_runs_nothing_and_the_real_one_still_runs() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (pwned, runs) = (dir.path().join("pwned"), dir.path().join("runs"));

    let mut scheduler = chime_tests::start_scheduler(&nats.url(), &db.url(), "forged-1").await;
    let mut worker = chime_tests::start_worker(&nats.url(), "default", 4, "forged-w1").await;
    let staged = stage_canary(&nats, dir.path(), &runs).await;
    forge(nats.connect().await, &staged, &pwned, false).await;

    worker
        .wait_for_log_line("not_as_staged", Duration::from_secs(10))
        .await;
    scheduler
        .wait_for_log_line(
            "refused a start that does not match the staged firing",
            Duration::from_secs(5),
        )
        .await;
    assert!(!pwned.exists(), "the forged argv ran");

    // The real firing runs at its instant, as staged.
    chime_tests::eventually(Duration::from_secs(20), "the real firing runs", || async {
        history_json(&nats, "canary")
            .iter()
            .any(|f| f["state"] == "succeeded")
    })
    .await;
    assert!(!pwned.exists(), "the forged argv ran");
    assert_eq!(runs_of(&runs), 1, "the real firing ran once");
    worker.terminate(Duration::from_secs(10)).await;
    scheduler.terminate(Duration::from_secs(15)).await;
}

/// The forgery takes the real firing's message id first: JetStream answers
/// the real publish as a duplicate of the forgery's sequence. That ack is
/// not taken as proof: the publisher reads the sequence back, finds a
/// message that is not the firing's (or none, once the forgery's refusal
/// acked it away) and publishes the firing at once under `<id>~v`, which
/// runs, once. The republisher is kept out of it (`--republish-after 1h`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgery_that_takes_the_real_message_id_does_not_strand_the_real_firing() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (pwned, runs) = (dir.path().join("pwned"), dir.path().join("runs"));

    let no_republish = ["--republish-after".to_string(), "1h".to_string()];
    let mut scheduler =
        chime_tests::start_scheduler_with(&nats.url(), &db.url(), "forged-2", &no_republish).await;
    let mut worker = chime_tests::start_worker(&nats.url(), "default", 4, "forged-w2").await;
    let staged = stage_canary(&nats, dir.path(), &runs).await;
    forge(nats.connect().await, &staged, &pwned, true).await;
    worker
        .wait_for_log_line("not_as_staged", Duration::from_secs(10))
        .await;

    scheduler
        .wait_for_log_line("acknowledged as a duplicate", Duration::from_secs(30))
        .await;
    chime_tests::eventually(Duration::from_secs(20), "the real firing runs", || async {
        history_json(&nats, "canary")
            .iter()
            .any(|f| f["state"] == "succeeded")
    })
    .await;
    assert!(!pwned.exists(), "the forged argv ran");
    assert_eq!(runs_of(&runs), 1, "the real firing ran once");
    worker.terminate(Duration::from_secs(10)).await;
    scheduler.terminate(Duration::from_secs(15)).await;
}

/// The same forgery on a three-node cluster, the streams replicated three
/// times and two schedulers on PostgreSQL: the real publish is answered as
/// a duplicate by the stream's leader, read back there, and the firing runs
/// once under `<id>~v`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_forgery_that_takes_the_real_message_id_does_not_strand_the_real_firing() {
    chime_tests::init_tracing();
    let cluster = NatsCluster::start(3).await;
    let db = PgDatabase::create().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (pwned, runs) = (dir.path().join("pwned"), dir.path().join("runs"));

    let args: Vec<String> = ["--republish-after", "1h", "--stream-replicas", "3"]
        .map(String::from)
        .to_vec();
    let url = cluster.client_url();
    let mut schedulers = [
        chime_tests::start_scheduler_with(&url, db.url(), "forged-c1", &args).await,
        chime_tests::start_scheduler_with(&url, db.url(), "forged-c2", &args).await,
    ];
    let mut worker = chime_tests::start_worker(&url, "default", 4, "forged-cw").await;
    let staged = stage_canary(&cluster, dir.path(), &runs).await;
    forge(cluster.connect().await, &staged, &pwned, true).await;
    worker
        .wait_for_log_line("not_as_staged", Duration::from_secs(10))
        .await;
    chime_tests::eventually(Duration::from_secs(30), "the real firing runs", || async {
        history_json(&cluster, "canary")
            .iter()
            .any(|f| f["state"] == "succeeded")
    })
    .await;
    let republished = schedulers
        .iter()
        .any(|s| s.log().contains("acknowledged as a duplicate"));
    assert!(republished, "no scheduler found the duplicate ack");
    assert!(!pwned.exists(), "the forged argv ran");
    assert_eq!(runs_of(&runs), 1, "the real firing ran once");
    worker.terminate(Duration::from_secs(10)).await;
    for scheduler in &mut schedulers {
        scheduler.terminate(Duration::from_secs(15)).await;
    }
}
