//! No published firing waits for good on a message that is gone: a worker
//! written from docs/PROTOCOL.md that acks a message after a start refused
//! through its own fault (`not_as_staged`), or terminates it, leaves the
//! firing `published` with nothing in the stream. The republisher finds the
//! message gone and publishes the firing again under a fresh message id; a
//! good worker then runs it, once. A firing whose copies all go the same
//! way ends `failed`, with the reason and a `firing_failed` alert. A
//! firing whose message still waits is not copied; its `not_started` alert
//! says that no worker of its group is alive.

use async_nats::jetstream::{self, consumer, AckKind};
use chime_common::headers;
use chime_common::protocol::{Alert, AlertKind, StartRequest};
use chime_common::{Band, FiringId, Subjects};
use chime_tests::{chimectl_ok, history_json, NatsServer, SqliteDatabase};
use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// Puts shell jobs `ids`, each due once at `at`, each appending its id to `runs`.
fn put_jobs(nats: &NatsServer, dir: &Path, runs: &Path, ids: &[&str], at: i64) {
    for id in ids {
        let spec = json!({
            "id": id,
            "schedule": {"at": chime_tests::rfc3339(at)},
            "handler": "shell",
            "payload": {"argv": ["sh", "-c", format!("echo {id} >> {}", runs.display())]},
        });
        let file = dir.join(format!("{id}.json"));
        std::fs::write(&file, spec.to_string()).expect("job file");
        chimectl_ok(nats, &["put", &file.display().to_string()]);
    }
}

/// How often each job ran.
fn runs_per_job(runs: &Path) -> HashMap<String, usize> {
    let mut counted = HashMap::new();
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        *counted.entry(line.to_string()).or_insert(0) += 1;
    }
    counted
}

/// The `default` group's normal-band consumer, once the scheduler made it.
async fn fire_consumer(js: &jetstream::Context) -> consumer::PullConsumer {
    let name = Subjects::default().fire_consumer("default", Band::Normal);
    chime_tests::until_ok(
        Duration::from_secs(20),
        "the scheduler creates the group's consumer",
        || async {
            let stream = js
                .get_stream(Subjects::default().fire_stream())
                .await
                .map_err(|e| e.to_string())?;
            stream
                .get_consumer::<consumer::pull::Config>(&name)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await
}

/// The next delivery on `consumer`, waiting as long as it takes (pulls of 1 s).
async fn next_delivery(consumer: &consumer::PullConsumer) -> jetstream::Message {
    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .expect("a pull");
        if let Some(message) = batch.next().await {
            return message.expect("a delivery");
        }
    }
}

/// The firing id a delivery carries.
fn firing_of(message: &jetstream::Message) -> FiringId {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(headers::FIRING_ID))
        .expect("a firing id header")
        .as_str()
        .parse()
        .expect("a valid firing id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_a_worker_refused_or_terminated_through_its_own_fault_still_runs_once() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runs = dir.path().join("runs");
    let republish = [
        "--republish-after".to_string(),
        "1s".to_string(),
        "--not-started-after".to_string(),
        "2s".to_string(),
    ];
    let mut scheduler =
        chime_tests::start_scheduler_with(&nats.url(), &db.url(), "own-fault", &republish).await;
    let at = chime_tests::aligned_start(Duration::from_secs(5));
    put_jobs(&nats, dir.path(), &runs, &["refused", "terminated"], at);

    // A worker of its own making takes both messages: it asks to start
    // `refused` with a digest of a payload it mangled, is refused
    // `not_as_staged` and acks the message, as docs/PROTOCOL.md says for a
    // refusal; it terminates `terminated` without asking.
    let client = nats.connect().await;
    let mut alerts = client
        .subscribe(Subjects::default().alerts())
        .await
        .expect("subscribed");
    client.flush().await.expect("flushed");
    let js = jetstream::new(client.clone());
    let consumer = fire_consumer(&js).await;
    let subject = Subjects::default().worker_start_as("default", "rogue");
    let mut handled = Vec::new();
    while handled.len() < 2 {
        let message = next_delivery(&consumer).await;
        let id = firing_of(&message);
        if id.job_id == "refused" {
            let request = StartRequest {
                firing_id: id.clone(),
                worker_id: "rogue".into(),
                group: "default".into(),
                handler: Some("shell".into()),
                payload_sha256: Some(chime_common::protocol::payload_sha256(b"mangled")),
            };
            let reply = client
                .request(
                    subject.clone(),
                    serde_json::to_vec(&request).expect("json").into(),
                )
                .await
                .expect("a start reply");
            let reply: Value = serde_json::from_slice(&reply.payload).expect("json");
            assert_eq!(reply["refusal"], "not_as_staged", "{reply}");
            message.ack().await.expect("acked");
        } else {
            message.ack_with(AckKind::Term).await.expect("terminated");
        }
        handled.push(id.job_id);
    }
    handled.sort();
    assert_eq!(handled, ["refused", "terminated"]);

    // A good worker: both firings come back to it and run, once each.
    let mut worker = chime_tests::start_worker(&nats.url(), "default", 4, "good").await;
    for job in ["refused", "terminated"] {
        chime_tests::eventually(Duration::from_secs(30), &format!("{job} runs"), || async {
            history_json(&nats, job)
                .iter()
                .any(|f| f["state"] == "succeeded")
        })
        .await;
    }
    let ran = runs_per_job(&runs);
    assert_eq!(ran.get("refused"), Some(&1), "{ran:?}");
    assert_eq!(ran.get("terminated"), Some(&1), "{ran:?}");
    scheduler
        .wait_for_log_line("published a firing again", Duration::from_secs(1))
        .await;
    // A message gone is not a group without workers: no not_started alert.
    while let Some(Some(message)) = alerts.next().now_or_never() {
        let alert: Alert = serde_json::from_slice(&message.payload).expect("an alert");
        assert_ne!(alert.kind, AlertKind::NotStarted, "{}", alert.message);
    }
    worker.terminate(Duration::from_secs(10)).await;
    scheduler.terminate(Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_whose_every_copy_is_terminated_ends_failed_with_an_alert() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runs = dir.path().join("runs");
    let republish = [
        "--republish-after".to_string(),
        "1s".to_string(),
        "--max-republishes".to_string(),
        "2".to_string(),
    ];
    let mut scheduler =
        chime_tests::start_scheduler_with(&nats.url(), &db.url(), "bounded", &republish).await;
    let client = nats.connect().await;
    let mut alerts = client
        .subscribe(Subjects::default().alerts())
        .await
        .expect("subscribed");
    client.flush().await.expect("flushed");
    let at = chime_tests::aligned_start(Duration::from_secs(5));
    put_jobs(&nats, dir.path(), &runs, &["doomed"], at);

    // Every delivery is terminated: the first message and each copy.
    let js = jetstream::new(client.clone());
    let consumer = fire_consumer(&js).await;
    let failed = async {
        let mut messages = Vec::new();
        loop {
            let message = next_delivery(&consumer).await;
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get(headers::NATS_MSG_ID))
                .map(|v| v.as_str().to_string())
                .unwrap_or_default();
            message.ack_with(AckKind::Term).await.expect("terminated");
            messages.push(id);
            if messages.len() == 3 {
                return messages;
            }
        }
    };
    let messages = tokio::time::timeout(Duration::from_secs(60), failed)
        .await
        .expect("the firing and its two copies are delivered");
    let firing = history_json(&nats, "doomed")
        .first()
        .and_then(|f| f["id"].as_str().map(str::to_string))
        .expect("a firing");
    assert_eq!(
        messages,
        [
            firing.clone(),
            format!("{firing}~r1"),
            format!("{firing}~r2")
        ],
        "each copy under a message id of its own"
    );

    let alert = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let message = alerts.next().await.expect("the alerts subscription");
            let alert: Alert = serde_json::from_slice(&message.payload).expect("an alert");
            if alert.kind == AlertKind::FiringFailed {
                return alert;
            }
        }
    })
    .await
    .expect("a firing_failed alert");
    assert_eq!(
        alert.firing_id.as_ref().map(ToString::to_string).as_deref(),
        Some(firing.as_str())
    );
    assert!(alert.message.contains("never started"), "{}", alert.message);
    let listed = history_json(&nats, "doomed");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "failed", "{listed:?}");
    assert!(
        listed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("published 3 times and never started")),
        "{listed:?}"
    );
    assert!(runs_per_job(&runs).is_empty(), "nothing ran");
    scheduler.terminate(Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_firing_of_a_group_without_workers_is_reported_naming_the_cause() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runs = dir.path().join("runs");
    let settings = [
        "--republish-after".to_string(),
        "1s".to_string(),
        "--not-started-after".to_string(),
        "2s".to_string(),
    ];
    let mut scheduler =
        chime_tests::start_scheduler_with(&nats.url(), &db.url(), "unstaffed", &settings).await;
    let client = nats.connect().await;
    let mut alerts = client
        .subscribe(Subjects::default().alerts())
        .await
        .expect("subscribed");
    client.flush().await.expect("flushed");
    let at = chime_tests::aligned_start(Duration::from_secs(4));
    put_jobs(&nats, dir.path(), &runs, &["unstaffed"], at);

    let alert = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let message = alerts.next().await.expect("the alerts subscription");
            let alert: Alert = serde_json::from_slice(&message.payload).expect("an alert");
            if alert.kind == AlertKind::NotStarted {
                return alert;
            }
        }
    })
    .await
    .expect("a not_started alert");
    assert_eq!(alert.job_id, "unstaffed");
    assert!(
        alert.message.contains("its message waits in the stream")
            && alert
                .message
                .contains("no worker of group \"default\" is alive"),
        "{}",
        alert.message
    );
    // Its message waits: nothing was published again.
    assert!(
        !scheduler.log().contains("published a firing again"),
        "a waiting message was copied"
    );
    let listed = history_json(&nats, "unstaffed");
    assert_eq!(listed[0]["state"], "published", "{listed:?}");
    scheduler.terminate(Duration::from_secs(15)).await;
}

/// A job whose handler no live worker of its group offers is warned of
/// when it is put, and when its firing waits unstarted the `not_started`
/// alert names that cause, with the handlers the group's workers do offer
/// (their heartbeats list them). The group's one worker is busy with a
/// long run, so the firing waits in the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_no_live_worker_offers_is_warned_at_put_and_named_by_the_alert() {
    chime_tests::init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let settings = [
        "--republish-after".to_string(),
        "1s".to_string(),
        "--not-started-after".to_string(),
        "2s".to_string(),
    ];
    let mut scheduler =
        chime_tests::start_scheduler_with(&nats.url(), &db.url(), "unoffered", &settings).await;
    let mut worker = chime_tests::start_worker(&nats.url(), "default", 1, "only").await;
    let client = nats.connect().await;
    let mut alerts = client
        .subscribe(Subjects::default().alerts())
        .await
        .expect("subscribed");
    client.flush().await.expect("flushed");

    // The worker's one thread runs this for a minute.
    let busy = json!({"id": "busy", "schedule": {"every": "24h"}, "handler": "shell",
        "payload": {"argv": ["sleep", "60"]}});
    let file = dir.path().join("busy.json");
    std::fs::write(&file, busy.to_string()).expect("job file");
    chimectl_ok(&nats, &["put", &file.display().to_string()]);
    chimectl_ok(&nats, &["trigger", "busy"]);
    chime_tests::eventually(Duration::from_secs(20), "busy runs", || async {
        history_json(&nats, "busy")
            .iter()
            .any(|f| f["state"] == "executing")
    })
    .await;

    let at = chime_tests::aligned_start(Duration::from_secs(3));
    let typo = json!({"id": "typo", "schedule": {"at": chime_tests::rfc3339(at)},
        "handler": "nosuch", "payload": {"argv": ["true"]}});
    let file = dir.path().join("typo.json");
    std::fs::write(&file, typo.to_string()).expect("job file");
    let (code, reply, stderr) =
        chime_tests::chimectl_json(&nats.url(), &["put", &file.display().to_string()]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let expected =
        "no live worker of group \"default\" offers handler \"nosuch\" (they offer: http, shell)";
    assert_eq!(reply["warnings"][0]["field"], "handler", "{reply}");
    assert!(
        reply["warnings"][0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(expected)),
        "{reply}"
    );
    assert!(
        stderr.contains(&format!("chimectl: warning: handler: {expected}")),
        "{stderr}"
    );

    let alert = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let message = alerts.next().await.expect("the alerts subscription");
            let alert: Alert = serde_json::from_slice(&message.payload).expect("an alert");
            if alert.kind == AlertKind::NotStarted && alert.job_id == "typo" {
                return alert;
            }
        }
    })
    .await
    .expect("a not_started alert");
    assert!(
        alert.message.contains("its message waits in the stream")
            && alert.message.ends_with(expected),
        "{}",
        alert.message
    );
    worker.kill9();
    scheduler.terminate(Duration::from_secs(15)).await;
}
