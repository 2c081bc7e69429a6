//! A worker runs only what the scheduler decided (issue 19, item 4): a
//! message published straight onto `chime.fire.default.normal` by someone
//! else, with the id of a real staged firing, `shell` and an argv of its
//! choosing, runs nothing: the scheduler refuses the start (`not_as_staged`)
//! and counts it, and the real firing still runs when its own message comes.

use async_nats::HeaderMap;
use chime_common::headers;
use chime_tests::{Binary, NatsServer, SqliteDatabase};
use serde_json::{json, Value};
use std::time::Duration;

/// `chimectl --json ARGS` against `nats`, parsed.
fn chimectl(nats: &NatsServer, args: &[&str]) -> Value {
    let out = Binary::Ctl
        .command()
        .args(["--nats-url", &nats.url(), "--json"])
        .args(args)
        .output()
        .expect("chimectl runs");
    assert!(
        out.status.success(),
        "chimectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("chimectl prints JSON")
}

/// The firings of `job` as `history` lists them.
fn firings(nats: &NatsServer, job: &str) -> Vec<Value> {
    let reply = chimectl(nats, &["history", job]);
    reply["firings"]
        .as_array()
        .or_else(|| reply.as_array())
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_firing_runs_nothing_and_the_real_one_still_runs() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pwned = dir.path().join("pwned");

    let mut scheduler = chime_tests::start_scheduler(&nats.url(), &db.url(), "forged-1").await;
    let mut worker = chime_tests::start_worker(&nats.url(), "default", 4, "forged-w1").await;

    // A real shell job due in a few seconds: staged ahead of its instant.
    let at = chime_tests::aligned_start(Duration::from_secs(8));
    let spec = json!({
        "id": "canary",
        "schedule": {"at": chime_tests::rfc3339(at)},
        "handler": "shell",
        "payload": {"argv": ["true"]},
    });
    let file = dir.path().join("canary.json");
    std::fs::write(&file, spec.to_string()).expect("job file");
    chimectl(&nats, &["put", &file.display().to_string()]);
    let staged_now = || {
        firings(&nats, "canary")
            .into_iter()
            .find(|f| f["state"] == "staged")
    };
    chime_tests::eventually(Duration::from_secs(8), "the firing is staged", || async {
        staged_now().is_some()
    })
    .await;
    let staged = staged_now().expect("staged ahead of its instant");
    let id = staged["id"].as_str().expect("a firing id").to_string();
    let scheduled_at = staged["scheduled_at"].as_str().expect("scheduled_at");

    // The forgery: the real id, shell, an argv that leaves a file.
    let mut forged = HeaderMap::new();
    forged.insert(headers::FIRING_ID, id.as_str());
    forged.insert(headers::JOB_ID, "canary");
    forged.insert(headers::HANDLER, "shell");
    forged.insert(headers::SCHEDULED_AT, scheduled_at);
    forged.insert(headers::ATTEMPT, "1");
    forged.insert(headers::PRIORITY, "5");
    forged.insert(
        headers::DEADLINE,
        chime_tests::rfc3339(at + 300_000).as_str(),
    );
    let body = json!({"argv": ["sh", "-c", format!("echo pwned > {}", pwned.display())]});
    let client = nats.connect().await;
    async_nats::jetstream::new(client)
        .publish_with_headers("chime.fire.default.normal", forged, body.to_string().into())
        .await
        .expect("published")
        .await
        .expect("stored");

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
        firings(&nats, "canary")
            .iter()
            .any(|f| f["state"] == "succeeded")
    })
    .await;
    assert!(!pwned.exists(), "the forged argv ran");
    worker.terminate(Duration::from_secs(10)).await;
    scheduler.terminate(Duration::from_secs(15)).await;
}
