//! Fan-in schedules end to end: a job `after: [a, b]` fires exactly once
//! per pair of upstream successes, never on one alone, and what one success
//! counted survives a scheduler killed with SIGKILL before the other.
//! Real NATS, real PostgreSQL, the built scheduler and worker binaries.

use chime_common::api::PreviewRequest;
use chime_common::client::Client;
use chime_common::{ErrorCode, FiringState};
use chime_tests::*;
use serde_json::json;
use std::time::Duration;

/// Triggers `job` and waits until that firing succeeded. A fan-in is
/// decided in the transaction that records the success, so once it shows,
/// any downstream firing it caused is stored too.
async fn run_to_success(client: &Client, job: &str) {
    let id = client.trigger_job(job, None).await.expect("trigger");
    eventually(
        Duration::from_secs(30),
        &format!("{id} succeeds"),
        || async {
            firings_of(client, job)
                .await
                .iter()
                .any(|f| f.id.to_string() == id && f.state == FiringState::Succeeded)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_and_b_fires_once_per_pair_and_survives_a_scheduler_kill() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut scheduler = start_scheduler(&nats.url(), db.url(), "r1").await;
    let _worker = start_worker(&nats.url(), "fan", 4, "w1").await;
    let client = Client::new(nats.connect().await);
    let job = |id: &str, schedule: serde_json::Value| {
        json!({"id": id, "group": "fan", "schedule": schedule, "handler": "shell",
               "payload": {"argv": ["/bin/true"]}})
    };
    // The upstreams fire only when triggered here.
    for id in ["a", "b"] {
        client
            .put_job(&job(id, json!({"every": "24h"})))
            .await
            .expect("put upstream");
    }
    let c = client
        .put_job(&job("c", json!({"after": ["a", "b"]})))
        .await
        .expect("put fan-in");
    assert_eq!(c.next_fire_at, None);
    assert!(c.upstream_missing.is_empty());
    let refused = client
        .preview(&PreviewRequest {
            schedule: json!({"after": ["a", "b"]}),
            from: None,
            count: None,
            id: None,
            dst: None,
            jitter: None,
            exclude: None,
        })
        .await
        .expect_err("a fan-in has no instants");
    assert_eq!(refused.code, ErrorCode::InvalidArgument);
    assert_eq!(refused.field.as_deref(), Some("schedule.after"));

    run_to_success(&client, "a").await;
    assert!(firings_of(&client, "c").await.is_empty(), "not on a alone");

    // The replica dies with a's success counted; another one starts.
    scheduler.kill9();
    let _scheduler = start_scheduler(&nats.url(), db.url(), "r2").await;

    run_to_success(&client, "b").await;
    eventually(
        Duration::from_secs(30),
        "c runs once and succeeds",
        || async {
            let c = firings_of(&client, "c").await;
            c.len() == 1 && c[0].state == FiringState::Succeeded
        },
    )
    .await;

    // The next pair: a alone fires nothing, then b fires c a second time.
    run_to_success(&client, "a").await;
    run_to_success(&client, "a").await;
    assert_eq!(firings_of(&client, "c").await.len(), 1, "not on a alone");
    run_to_success(&client, "b").await;
    eventually(Duration::from_secs(30), "c runs a second time", || async {
        let c = firings_of(&client, "c").await;
        c.len() == 2 && c.iter().all(|f| f.state == FiringState::Succeeded)
    })
    .await;

    // A deleted upstream is reported on the job.
    client.delete_job("b").await.expect("delete b");
    let c = client.get_job("c").await.expect("get c");
    assert_eq!(c.upstream_missing, ["b"]);
}
