//! `max_lateness` end to end: firings of a group with no worker wait in
//! JetStream; when a worker comes, each one that starts later than the
//! job's `max_lateness` raises exactly one `late` alert on `chime.alerts`,
//! and the metrics the dashboard's lateness panels query count them.
//! Real NATS, real PostgreSQL, a real replica and worker.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::protocol::{Alert, AlertKind};
use chime_common::{Firing, FiringState};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_worker::{FiringContext, Worker};
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

/// The firings of the job `tardy`.
async fn history(client: &Client) -> Vec<Firing> {
    client
        .list_firings(&ListFiringsRequest {
            job_id: Some("tardy".into()),
            limit: Some(100),
            ..Default::default()
        })
        .await
        .expect("firings.list")
        .firings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_firings_raise_one_late_alert_each_when_a_worker_comes() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let client = Client::new(nats.connect().await);
    let start = aligned_start(Duration::from_secs(2));
    client
        .put_job(&json!({
            "id": "tardy", "group": "tardy", "handler": "noop",
            "schedule": {"every": "1s", "start_at": rfc3339(start), "count": 3},
            "max_lateness": "1s",
        }))
        .await
        .expect("put");

    // No worker of the group for 5 s after the first instant: the three
    // firings are published and wait.
    eventually(
        Duration::from_secs(20),
        "three firings published",
        || async {
            let firings = history(&client).await;
            firings.len() == 3 && firings.iter().all(|f| f.state == FiringState::Published)
        },
    )
    .await;
    let worker_comes = start + 5_000;
    let wait_ms = worker_comes.saturating_sub(chrono::Utc::now().timestamp_millis());
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0))).await;

    let worker = Worker::builder()
        .nats(nats.connect().await)
        .group("tardy")
        .threads(4)
        .handler_fn("noop", |_ctx: FiringContext| async move { Ok(None) })
        .build()
        .expect("config")
        .start()
        .await
        .expect("worker");
    eventually(Duration::from_secs(20), "all three succeeded", || async {
        let firings = history(&client).await;
        firings.len() == 3 && firings.iter().all(|f| f.state == FiringState::Succeeded)
    })
    .await;

    let late: Vec<Alert> = alerts_of(&nats)
        .await
        .into_iter()
        .filter(|a| a.kind == AlertKind::Late)
        .collect();
    assert_eq!(late.len(), 3, "one late alert per late firing: {late:?}");
    let firings: HashSet<_> = late.iter().map(|a| a.firing_id.clone()).collect();
    assert_eq!(firings.len(), 3, "each about another firing: {late:?}");
    for alert in &late {
        assert_eq!(
            (alert.job_id.as_str(), alert.group.as_str()),
            ("tardy", "tardy")
        );
        // The last instant was 2 s after the first; the worker came at 5 s.
        let lateness = alert.lateness_ms.expect("lateness_ms");
        assert!(lateness >= 2_900, "{alert:?}");
    }

    // What the dashboard's panels query.
    let metrics = replica.metrics.render();
    let series = |name: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && l.contains("group=\"tardy\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(series("chime_firings_late_total"), 3.0, "{metrics}");
    assert_eq!(
        series("chime_firing_lateness_seconds_count"),
        3.0,
        "{metrics}"
    );
    assert!(
        series("chime_firing_lateness_seconds_sum") >= 3.0 * 2.9,
        "{metrics}"
    );
    let late_alerts: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("chime_alerts_total{kind=\"late\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(late_alerts, 3.0, "{metrics}");
    worker.shutdown().await;
    replica.shutdown().await;
}
