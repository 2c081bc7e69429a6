//! No job can stop the cluster: hostile and extreme specs put on
//! two scheduler replicas on PostgreSQL, with an every-second canary job, a
//! worker and a real nats-server. Each hostile spec is refused with its field
//! or runs and ends in a final state; the canary keeps finishing every
//! second; both replicas stay alive and healthy.
//!
//! Built-in payloads a worker could not run (too long an `argv`, a NUL in
//! a variable, a line break in a header, a `file:` URL) are refused at put.
//!
//! Also: a handler that prints a NUL byte has its firings end `succeeded`
//! with the output readable, on PostgreSQL and SQLite.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::{ErrorCode, Firing, FiringState, JobState};
use chime_tests::{
    backend_tests, init_tracing, ChimeProcess, NatsServer, PgDatabase, TestDatabase,
};
use chime_tests::{rfc3339, start_scheduler, start_worker, until_ok};
use serde_json::{json, Value};
use std::time::Duration;

/// Every firing of a job, newest first.
async fn firings(client: &Client, job_id: &str) -> Vec<Firing> {
    client
        .list_firings(&ListFiringsRequest {
            job_id: Some(job_id.to_string()),
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .map(|page| page.firings)
        .unwrap_or_default()
}

/// The metrics address a scheduler logged in its ready line.
fn metrics_addr(ready_line: &str) -> String {
    let start = ready_line
        .find("metrics=")
        .map(|i| i + "metrics=".len())
        .unwrap_or_else(|| panic!("no metrics address in {ready_line:?}"));
    let end = ready_line[start..]
        .find(char::is_whitespace)
        .map_or(ready_line.len(), |i| start + i);
    ready_line[start..end].to_string()
}

/// A scheduler process and its `/healthz`.
struct Replica {
    process: ChimeProcess,
    healthz: String,
}

impl Replica {
    async fn start(nats_url: &str, database_url: &str, id: &str) -> Replica {
        let mut process = start_scheduler(nats_url, database_url, id).await;
        let line = process
            .wait_for_log_line("chime-scheduler ready", Duration::from_secs(1))
            .await;
        Replica {
            healthz: format!("http://{}/healthz", metrics_addr(&line)),
            process,
        }
    }

    /// Alive and answering `/healthz` with 200.
    async fn assert_healthy(&mut self) {
        assert!(
            self.process.try_status().is_none(),
            "a replica exited: {}",
            self.process.log_tail(40)
        );
        let status = reqwest::get(&self.healthz)
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_eq!(
            status,
            200,
            "{}: {}",
            self.healthz,
            self.process.log_tail(40)
        );
        let log = self.process.log();
        assert!(!log.contains("panicked"), "a replica panicked: {log}");
    }
}

fn shell(id: &str, argv: &[&str], extra: Value) -> Value {
    let mut spec = json!({"id": id, "handler": "shell", "payload": {"argv": argv}, "timeout": "20s",
        "schedule": {"every": "1s", "count": 2}});
    if let (Value::Object(base), Value::Object(more)) = (&mut spec, extra) {
        base.extend(more);
    }
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_specs_are_refused_or_run_and_the_canary_keeps_firing() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut replicas = vec![
        Replica::start(&nats.url(), db.url(), "hostile-a").await,
        Replica::start(&nats.url(), db.url(), "hostile-b").await,
    ];
    let _worker = start_worker(&nats.url(), "default", 8, "hostile-worker").await;
    let client = Client::new(nats.connect().await).with_timeout(Duration::from_secs(10));
    client
        .put_job(&shell(
            "canary",
            &["true"],
            json!({"schedule": {"every": "1s"}}),
        ))
        .await
        .expect("canary");

    // Refused, each with the field named.
    let huge_ms = 1u64 << 62;
    let refused = [
        (
            shell("h-timeout", &["true"], json!({"timeout": "300000y"})),
            "timeout",
        ),
        (
            shell("h-timeout-ms", &["true"], json!({"timeout": huge_ms})),
            "timeout",
        ),
        (
            shell(
                "h-retry",
                &["true"],
                json!({"retry": {"initial": "300000y", "max": "300000y"}}),
            ),
            "retry.initial",
        ),
        (
            shell(
                "h-every",
                &["true"],
                json!({"schedule": {"every": "300000y"}}),
            ),
            "schedule.every",
        ),
        (
            shell(
                "h-start",
                &["true"],
                json!({"schedule": {"every": "1s", "start_at": "9999-12-31T23:59:59Z"}}),
            ),
            "schedule.start_at",
        ),
        (
            shell(
                "h-at",
                &["true"],
                json!({"schedule": {"at": "2100-01-01T00:00:00Z"}}),
            ),
            "schedule.at",
        ),
        (
            shell(
                "h-misfire",
                &["true"],
                json!({"misfire_threshold": "300000y"}),
            ),
            "misfire_threshold",
        ),
        (
            shell(
                "h-count",
                &["true"],
                json!({"schedule": {"every": "1s", "count": u64::MAX}}),
            ),
            "schedule.count",
        ),
        (
            shell(
                "h-self",
                &["true"],
                json!({"on_success": vec!["h-self"; 16]}),
            ),
            "on_success[0]",
        ),
        // Built-in payloads a worker could not run, refused at put.
        (shell("h-argv", &["x"; 257], json!({})), "payload.argv"),
        (
            shell(
                "h-env",
                &["true"],
                json!({"payload": {"argv": ["true"], "env": {"X": "a\u{0}b"}}}),
            ),
            "payload.env.X",
        ),
        (
            shell(
                "h-header",
                &["true"],
                json!({"handler": "http", "payload": {"url": "https://example.com",
                    "headers": {"X-A": "a\r\nInjected: 1"}}}),
            ),
            "payload.headers.X-A",
        ),
        (
            shell(
                "h-file",
                &["true"],
                json!({"handler": "http", "payload": {"url": "file:///etc/passwd"}}),
            ),
            "payload.url",
        ),
    ];
    for (spec, field) in &refused {
        let e = client.put_job(spec).await.expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{spec}: {e}");
        assert_eq!(e.field.as_deref(), Some(*field), "{spec}: {e}");
    }
    // A cycle through two jobs.
    client
        .put_job(&shell(
            "h-loop-a",
            &["true"],
            json!({"on_success": ["h-loop-b"]}),
        ))
        .await
        .expect("a -> b");
    let e = client
        .put_job(&shell(
            "h-loop-b",
            &["true"],
            json!({"on_success": ["h-loop-a"]}),
        ))
        .await
        .expect_err("b -> a closes a loop");
    assert_eq!(e.field.as_deref(), Some("on_success"), "{e}");

    // Accepted at the edges of the ranges: each runs and ends final.
    let now_ms = chrono::Utc::now().timestamp_millis();
    let accepted = [
        shell("x-timeout", &["true"], json!({"timeout": "30d"})),
        shell(
            "x-retry",
            &["false"],
            json!({"retry": {"max_attempts": 2, "initial": 0, "max": "30d", "multiplier": 100}}),
        ),
        shell(
            "x-every",
            &["true"],
            json!({"schedule": {"every": 1, "count": 3}}),
        ),
        shell("x-handler", &["true"], json!({"handler": "h".repeat(128)})),
        shell("x-nul", &["printf", "a\\000b"], json!({})),
        shell(
            "x-chain",
            &["true"],
            json!({"on_success": ["h-loop-a", "h-loop-a", "canary"]}),
        ),
    ];
    for spec in &accepted {
        client
            .put_job(spec)
            .await
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
    // Accepted with every instant in the past or far ahead: stored in the
    // state the schedule gives them, nothing to run now.
    let past = [
        (
            shell(
                "x-epoch",
                &["true"],
                json!({"schedule": {"at": "1970-01-01T00:00:00Z"}}),
            ),
            JobState::Completed,
        ),
        (
            shell(
                "x-skip",
                &["true"],
                json!({"schedule": {"at": rfc3339(now_ms - 3_600_000)}, "misfire": "skip"}),
            ),
            JobState::Completed,
        ),
        (
            shell(
                "x-decade",
                &["true"],
                json!({"schedule": {"every": "3650d", "start_at": "1970-01-01T00:00:00Z",
                    "count": 1_000_000_000_000u64}, "misfire_threshold": "30d"}),
            ),
            JobState::Active,
        ),
    ];
    for (spec, state) in &past {
        let job = client
            .put_job(spec)
            .await
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(job.state, *state, "{spec}");
        assert_eq!(
            job.next_fire_at.is_some(),
            *state == JobState::Active,
            "{job:?}"
        );
        assert!(
            job.next_fire_at.is_none_or(|t| t > chrono::Utc::now()),
            "{job:?}"
        );
    }
    let window_start = chrono::Utc::now();

    until_ok(
        Duration::from_secs(60),
        "every accepted job's firings final",
        || async {
            let mut unfinished = Vec::new();
            for spec in &accepted {
                let id = spec["id"].as_str().expect("id");
                let states: Vec<FiringState> =
                    firings(&client, id).await.iter().map(|f| f.state).collect();
                if states.is_empty() || states.iter().any(|s| !s.is_final()) {
                    unfinished.push(format!("{id}: {states:?}"));
                }
            }
            if unfinished.is_empty() {
                Ok(())
            } else {
                Err(format!("{unfinished:?}"))
            }
        },
    )
    .await;
    // The canary's window: ten seconds from the hostile puts on, and two
    // seconds more for its last firings to finish.
    let window_end = window_start + chrono::Duration::seconds(10);
    let finished_by = window_end + chrono::Duration::seconds(2);
    if let Ok(wait) = (finished_by - chrono::Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }

    // Two instants, two attempts each.
    let x_retry = firings(&client, "x-retry").await;
    assert_eq!(x_retry.len(), 4, "{x_retry:?}");
    assert!(x_retry.iter().all(|f| f.state == FiringState::Failed));
    let x_handler = firings(&client, "x-handler").await;
    assert!(
        x_handler.iter().all(|f| f.state == FiringState::Failed),
        "{x_handler:?}"
    );
    let x_nul = firings(&client, "x-nul").await;
    assert!(
        x_nul.iter().all(|f| f.state == FiringState::Succeeded
            && f.output.as_deref() == Some("a\u{fffd}b")),
        "{x_nul:?}"
    );

    let canary = firings(&client, "canary").await;
    let in_window: Vec<&Firing> = canary
        .iter()
        .filter(|f| f.scheduled_at >= window_start && f.scheduled_at < window_end)
        .collect();
    let seconds = (window_end - window_start).num_seconds();
    assert!(
        in_window.len() as i64 >= seconds - 1,
        "the canary fired {} times in {seconds} s",
        in_window.len()
    );
    assert!(
        in_window.iter().all(|f| f.state == FiringState::Succeeded),
        "{in_window:?}"
    );
    for replica in &mut replicas {
        replica.assert_healthy().await;
    }
}

backend_tests! {
    async fn a_handler_printing_nul_succeeds_with_readable_output(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let _scheduler = start_scheduler(&nats.url(), &db.url(), "nul-scheduler").await;
        let _worker = start_worker(&nats.url(), "default", 2, "nul-worker").await;
        let client = Client::new(nats.connect().await);
        client
            .put_job(&shell("nul", &["printf", "a\\000b\\377c"], json!({"schedule": {"every": "1s", "count": 2}})))
            .await
            .expect("put");
        chime_tests::eventually(Duration::from_secs(30), "both firings succeeded", || {
            let client = client.clone();
            async move {
                let all = firings(&client, "nul").await;
                all.iter()
                    .filter(|f| f.state == FiringState::Succeeded)
                    .count()
                    == 2
            }
        })
        .await;
        for f in firings(&client, "nul").await {
            assert_eq!(f.output.as_deref(), Some("a\u{fffd}b\u{fffd}c"), "{f:?}");
        }
    }
}
