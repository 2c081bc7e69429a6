//! Schedulers own the NATS topology: existing streams and buckets are
//! brought in line with the configuration at start-up (or start-up fails
//! naming a setting JetStream cannot change), every group with a job or a
//! live worker gets its firing consumers, and a full firing stream refuses
//! firings (they stay staged, an alert is raised) instead of dropping them.

use async_nats::jetstream::{self, kv, stream};
use chime_common::client::Client;
use chime_common::protocol::WorkerInfo;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_tests::{init_tracing, NatsServer, SqliteDatabase};
use serde_json::json;
use std::time::Duration;

fn config(nats: &NatsServer, db: &SqliteDatabase) -> SchedulerConfig {
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.consumers.interval = Duration::from_millis(200);
    config
}

async fn consumer_names(js: &jetstream::Context) -> Vec<String> {
    use futures::StreamExt;
    let stream = js.get_stream("CHIME_FIRE").await.expect("fire stream");
    stream
        .consumer_names()
        .filter_map(|name| async move { name.ok() })
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_and_buckets_created_with_other_settings_are_reconciled_at_start() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let js = jetstream::new(nats.connect().await);
    // As a worker of an older version (or an operator) would have made them.
    js.create_stream(stream::Config {
        name: "CHIME_FIRE".into(),
        subjects: vec!["chime.fire.>".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        duplicate_window: Duration::from_secs(10),
        max_age: Duration::from_secs(3600),
        num_replicas: 1,
        ..Default::default()
    })
    .await
    .expect("create the firing stream");
    js.create_key_value(kv::Config {
        bucket: "chime-workers".into(),
        max_age: Duration::from_secs(60),
        history: 5,
        ..Default::default()
    })
    .await
    .expect("create the worker bucket");

    let config = config(&nats, &db);
    let wanted = config.topology.clone();
    let replica = Replica::start(config).await.expect("replica starts");

    let info = js
        .get_stream("CHIME_FIRE")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert_eq!(info.duplicate_window, wanted.duplicate_window);
    assert_eq!(info.max_age, wanted.fire_max_age);
    assert_eq!(info.num_replicas, 1);
    assert_eq!(info.max_messages, wanted.fire_max_msgs);
    assert_eq!(info.max_bytes, wanted.fire_max_bytes);
    assert_eq!(info.discard, stream::DiscardPolicy::New);

    let workers = js
        .get_stream("KV_chime-workers")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    assert_eq!(workers.max_age, wanted.worker_ttl);
    assert_eq!(workers.max_messages_per_subject, 1);
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_jetstream_cannot_change_makes_start_up_fail_naming_it() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let js = jetstream::new(nats.connect().await);
    js.create_stream(stream::Config {
        name: "CHIME_FIRE".into(),
        subjects: vec!["chime.fire.>".into()],
        retention: stream::RetentionPolicy::Limits,
        ..Default::default()
    })
    .await
    .expect("create the firing stream");
    let error = match Replica::start(config(&nats, &db)).await {
        Ok(_) => panic!("a replica must refuse a firing stream with the wrong retention"),
        Err(e) => format!("{e:#}"),
    };
    assert!(error.contains("stream CHIME_FIRE"), "{error}");
    assert!(error.contains("setting `retention`"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_get_their_consumers_from_jobs_and_from_worker_heartbeats() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let connection = nats.connect().await;
    let js = jetstream::new(connection.clone());
    let replica = Replica::start(config(&nats, &db))
        .await
        .expect("replica starts");
    assert!(!consumer_names(&js)
        .await
        .iter()
        .any(|n| n.contains("reports")));

    Client::new(connection)
        .put_job(&json!({
            "id": "yearly-report",
            "group": "reports",
            "schedule": {"cron": "@yearly"},
            "handler": "noop",
        }))
        .await
        .expect("put a job");
    eventually(
        Duration::from_secs(15),
        "the reports group's consumers",
        || async {
            let names = consumer_names(&js).await;
            ["high", "normal", "low"]
                .iter()
                .all(|band| names.contains(&format!("fire_g_reports_{band}")))
        },
    )
    .await;

    // A worker of a group no job names yet: its heartbeat is enough.
    let workers = js.get_key_value("chime-workers").await.expect("bucket");
    let info = WorkerInfo {
        id: "w-night".into(),
        group: "night.shift".into(),
        threads: 1,
        in_flight: 0,
        version: "test".into(),
        started_at: chrono::Utc::now(),
        running: None,
        handlers: None,
        offers: false,
        heartbeat_at: None,
    };
    workers
        .put("w-night", serde_json::to_vec(&info).unwrap().into())
        .await
        .expect("heartbeat");
    let name =
        chime_common::Subjects::default().fire_consumer("night.shift", chime_common::Band::Normal);
    eventually(
        Duration::from_secs(15),
        "the night.shift group's consumers",
        || async { consumer_names(&js).await.contains(&name) },
    )
    .await;
    // A consumer whose settings someone changed is put back at start-up.
    let fire = js.get_stream("CHIME_FIRE").await.unwrap();
    let mut changed = fire
        .get_consumer::<jetstream::consumer::pull::Config>(&name)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    changed.ack_wait = Duration::from_secs(5);
    fire.update_consumer(jetstream::consumer::pull::Config {
        durable_name: changed.durable_name.clone(),
        filter_subject: changed.filter_subject.clone(),
        ack_wait: Duration::from_secs(5),
        max_ack_pending: changed.max_ack_pending,
        max_deliver: changed.max_deliver,
        ..Default::default()
    })
    .await
    .expect("change the consumer");
    replica.shutdown().await;
    let replica = Replica::start(config(&nats, &db))
        .await
        .expect("replica starts again");
    let ack_wait = fire
        .get_consumer::<jetstream::consumer::pull::Config>(&name)
        .await
        .unwrap()
        .cached_info()
        .config
        .ack_wait;
    assert_eq!(ack_wait, Duration::from_secs(30));
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_firing_stream_refuses_firings_which_stay_staged_and_raise_an_alert() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let mut config = config(&nats, &db);
    config.topology.fire_max_msgs = 3;
    config.publisher.retry_after = Duration::from_millis(200);
    let replica = Replica::start(config).await.expect("replica starts");
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    let js = jetstream::new(connection.clone());
    let mut alerts = connection.subscribe("chime.alerts").await.unwrap();
    let at = rfc3339(aligned_start(Duration::from_secs(3)));
    for i in 0..6 {
        client
            .put_job(&json!({
                "id": format!("full-{i}"),
                "group": "idle",
                "schedule": {"at": at},
                "handler": "noop",
            }))
            .await
            .expect("put job");
    }
    let alert = tokio::time::timeout(Duration::from_secs(20), async {
        use futures::StreamExt;
        loop {
            let message = alerts.next().await.expect("alerts subscription");
            let alert: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
            if alert["kind"] == "stream_full" {
                return alert;
            }
        }
    })
    .await
    .expect("a stream_full alert");
    assert_eq!(alert["group"], "idle");
    assert!(
        alert["message"].as_str().unwrap().contains("CHIME_FIRE"),
        "{alert}"
    );
    let messages = |js: jetstream::Context| async move {
        js.get_stream("CHIME_FIRE")
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
    };
    assert_eq!(messages(js.clone()).await, 3, "the stream holds its limit");

    // A worker drains the stream: the refused firings were kept and arrive.
    let consumer = js
        .get_stream("CHIME_FIRE")
        .await
        .unwrap()
        .get_consumer::<jetstream::consumer::pull::Config>(
            &chime_common::Subjects::default().fire_consumer("idle", chime_common::Band::Normal),
        )
        .await
        .expect("the idle group's consumer");
    let mut received = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.len() < 6 && tokio::time::Instant::now() < deadline {
        use futures::StreamExt;
        let mut batch = consumer
            .fetch()
            .max_messages(10)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .unwrap();
        while let Some(Ok(message)) = batch.next().await {
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get("Chime-Job-Id"))
                .expect("a job id header")
                .to_string();
            received.insert(id);
            message.ack().await.unwrap();
        }
    }
    assert_eq!(
        received,
        (0..6).map(|i| format!("full-{i}")).collect(),
        "every firing arrives once the stream has room"
    );
    assert!(metric_sum(&replica.metrics.render(), "chime_alerts_total") >= 1.0);
    replica.shutdown().await;
}
