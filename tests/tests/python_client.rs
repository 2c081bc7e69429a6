//! A client in another language: a Python nats-py script, written from
//! docs/API.md alone, puts jobs through the request/reply API and the submit
//! stream and reads errors back.

use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{init_tracing, NatsServer, SqliteDatabase};
use serde_json::Value;
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_puts_submits_and_reads_errors() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/client.py");
    let output = tokio::process::Command::new("python3")
        .arg(&script)
        .arg(nats.url())
        .output()
        .await
        .expect("python3 runs (and `pip install nats-py` was done; deploy/local/test.sh does it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a JSON summary");
    assert_eq!(summary["put_version"], 1);
    assert_eq!(
        summary["put_next_fire_at"]
            .as_str()
            .map(|s| s.ends_with('Z')),
        Some(true)
    );
    assert_eq!(summary["error_code"], "invalid_argument");
    assert_eq!(summary["error_field"], "schedule.cron");
    assert_eq!(summary["missing_code"], "not_found");
    assert_eq!(summary["rejected_code"], "invalid_argument");
    assert_eq!(summary["submitted_state"], "active");
    replica.shutdown().await;
}
