//! A replica whose clock is really off (the binary under libfaketime, 3 s
//! ahead) beside a normal one on PostgreSQL: it measures and exports its
//! offset from the database clock, says not ready, raises a `clock_offset`
//! alert and claims no slice, while an every-second job keeps being
//! published exactly once per instant by the other replica.

use chime_common::client::Client;
use chime_tests::*;
use chime_tests::{free_port, init_tracing, Binary, ChimeProcess, NatsServer, PgDatabase};
use futures::StreamExt;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

async fn get(addr: &str, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("the metrics endpoint answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_is_off_claims_nothing_and_is_not_ready() {
    init_tracing();
    assert!(
        Path::new(LIBFAKETIME).is_file(),
        "{LIBFAKETIME} is missing: install the faketime package (deploy/local/test.sh does)"
    );
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let connection = nats.connect().await;
    let mut alerts = connection.subscribe("chime.alerts").await.unwrap();

    let mut steady = start_scheduler(&nats.url(), db.url(), "steady").await;
    let shifted_addr = format!("127.0.0.1:{}", free_port());
    let mut command = Binary::Scheduler.command();
    command
        .args(["--nats-url", &nats.url(), "--database-url", db.url()])
        .args(["--metrics-addr", &shifted_addr, "--replica-id", "shifted"])
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", "+3s")
        // Only the wall clock is off; timers keep real time.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    let mut shifted = ChimeProcess::spawn(command);
    shifted
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
        .await;

    let alert = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let message = alerts.next().await.expect("alerts subscription");
            let alert: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
            if alert["kind"] == "clock_offset" {
                return alert;
            }
        }
    })
    .await
    .expect("a clock_offset alert");
    assert!(
        alert["message"].as_str().unwrap().contains("shifted"),
        "{alert}"
    );

    let client = Client::new(connection.clone());
    let (count, start_ms) = (8, aligned_start(Duration::from_secs(3)));
    client
        .put_job(&json!({
            "id": "canary",
            "schedule": {"every": "1s", "start_at": rfc3339(start_ms), "count": count},
            "handler": "noop",
        }))
        .await
        .expect("put canary");
    let js = async_nats::jetstream::new(connection);
    eventually(
        Duration::from_secs(count as u64 + 20),
        "every canary instant published",
        || async { read_fire_stream(&js, "CHIME_FIRE").await.len() >= count },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let counts = count_by_instant(&read_fire_stream(&js, "CHIME_FIRE").await);
    for k in 0..count as i64 {
        let key = ("canary".to_string(), start_ms + k * 1000, 1);
        assert_eq!(counts.get(&key), Some(&1), "instant {k} published once");
    }
    assert_eq!(counts.len(), count);

    let (_, metrics) = get(&shifted_addr, "/metrics").await;
    let offset = metric_sum(&metrics, "chime_clock_offset_seconds");
    assert!(
        (-3.5..=-2.5).contains(&offset),
        "the shifted replica measures about -3 s, found {offset}"
    );
    assert_eq!(
        metric_sum(&metrics, "chime_slices_claimed_total")
            + metric_sum(&metrics, "chime_slices_taken_over_total"),
        0.0,
        "the shifted replica claimed slices"
    );
    let (status, body) = get(&shifted_addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("clock"), "{body}");
    let (status, _) = get(&shifted_addr, "/healthz").await;
    assert_eq!(status, 200, "an off clock is not a reason to restart");

    shifted.terminate(Duration::from_secs(20)).await;
    steady.terminate(Duration::from_secs(20)).await;
}
