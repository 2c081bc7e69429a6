//! Supervised services: a service that fails for real (its stream deleted
//! under it) is restarted and counted, `/healthz` fails naming it while it
//! keeps failing and recovers with it, and firings keep flowing meanwhile.

use chime_common::client::Client;
use chime_common::Subjects;
use chime_runtime::supervisor::SupervisorConfig;
use chime_runtime::topology::Topology;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_tests::{init_tracing, NatsServer, SqliteDatabase};
use serde_json::json;
use std::time::Duration;

async fn get(replica: &Replica, path: &str) -> (u16, String) {
    let addr = replica.metrics_addr.expect("serving metrics");
    let response = reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("the metrics endpoint answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

fn published(replica: &Replica) -> f64 {
    metric_sum(&replica.metrics.render(), "chime_firings_published_total")
}

fn submit_restarts(replica: &Replica) -> f64 {
    replica
        .metrics
        .service_restarts
        .with_label_values(&["submit"])
        .get() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_stream_is_deleted_is_restarted_and_reported_until_it_recovers() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    config.supervisor = SupervisorConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(500),
        healthy_after: Duration::from_secs(2),
        unhealthy_after: 3,
    };
    let topology_config = config.topology.clone();
    let replica = Replica::start(config).await.expect("replica starts");
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    let js = async_nats::jetstream::new(connection);
    client
        .put_job(&json!({
            "id": "canary",
            "schedule": {"every": "1s"},
            "handler": "noop",
        }))
        .await
        .expect("put canary");
    assert_eq!(get(&replica, "/healthz").await, (200, "ok".to_string()));

    // A genuine fault: the submission stream vanishes under the submit service.
    js.delete_stream("CHIME_SUBMIT")
        .await
        .expect("delete the stream");
    eventually(
        Duration::from_secs(30),
        "/healthz fails naming the submit service",
        || async {
            let (status, body) = get(&replica, "/healthz").await;
            status == 503 && body.contains("service submit keeps failing")
        },
    )
    .await;
    assert!(submit_restarts(&replica) >= 2.0);
    let (_, body) = get(&replica, "/metrics").await;
    assert!(
        body.contains("chime_service_restarts_total{service=\"submit\"}"),
        "{body}"
    );

    // Firings keep flowing while the submit service is down.
    let before = published(&replica);
    eventually(
        Duration::from_secs(15),
        "the canary keeps being published",
        || async { published(&replica) >= before + 3.0 },
    )
    .await;
    let (status, _) = get(&replica, "/healthz").await;
    assert_eq!(status, 503, "still failing: the stream is still gone");

    // The stream comes back (as another replica's start-up would create it):
    // the next restart opens the consumer again and the service recovers.
    Topology::new(js.clone(), Subjects::default(), topology_config)
        .ensure()
        .await
        .expect("recreate the streams");
    eventually(Duration::from_secs(30), "/healthz is ok again", || async {
        get(&replica, "/healthz").await == (200, "ok".to_string())
    })
    .await;
    js.publish(
        "chime.submit",
        serde_json::to_vec(&json!({
            "id": "submitted-after-recovery",
            "schedule": {"every": "1h"},
            "handler": "noop",
        }))
        .unwrap()
        .into(),
    )
    .await
    .expect("publish")
    .await
    .expect("ack");
    eventually(
        Duration::from_secs(15),
        "a durable submission is applied again",
        || async { client.get_job("submitted-after-recovery").await.is_ok() },
    )
    .await;
    assert!(replica.health.failing().is_empty());
    replica.shutdown().await;
}
