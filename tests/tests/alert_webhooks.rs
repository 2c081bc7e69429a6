//! Alert webhooks end to end: real NATS, real databases, real scheduler
//! replicas and a real HTTP receiver. An alert (here a `dead_letter` alert,
//! raised by a finished event that is not JSON) is POSTed once per URL as
//! its JSON object, signed when a secret is set; a receiver that is down at
//! first gets it once it is back; one that never takes it gets at most the
//! bounded tries, then the alert is dead-lettered; several replicas deliver
//! each alert once, and an alert waiting while every replica restarts is
//! delivered after. Bad settings stop the binary at start-up naming the flag.

use chime_common::protocol::{Alert, AlertKind};
use chime_common::Subjects;
use chime_runtime::secret::Secret;
use chime_scheduler::ops::webhooks::{WebhookReport, WebhookResult, WebhookTarget};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use hmac::{Hmac, Mac};
use std::collections::BTreeSet;
use std::time::Duration;

/// A replica on `database_url` that POSTs alerts to `url`, trying each
/// `tries` times with pauses from `backoff`.
fn config(nats: &NatsServer, database_url: &str, url: &str, tries: u32) -> SchedulerConfig {
    let mut config = SchedulerConfig::new(nats.url(), database_url);
    config.webhooks.targets = vec![WebhookTarget::parse(url).expect("a webhook URL")];
    config.webhooks.delivery.tries = tries;
    config.webhooks.delivery.backoff = Duration::from_millis(100);
    config.webhooks.delivery.max_backoff = Duration::from_millis(400);
    config.webhooks.delivery.deadline = Duration::from_secs(30);
    config
}

/// Publishes `n` finished events that are not JSON: the replicas
/// dead-letter each at once and raise one `dead_letter` alert for it.
async fn raise_alerts(nats: &NatsServer, n: usize) {
    let js = async_nats::jetstream::new(nats.connect().await);
    for i in 0..n {
        js.publish(
            Subjects::default().finished(),
            format!("not an event {i}").into_bytes().into(),
        )
        .await
        .expect("publish")
        .await
        .expect("ack");
    }
}

/// Waits for the report of the next alert that ends (not handed back).
async fn next_report(
    reports: &mut chime_runtime::signal::SignalReceiver<WebhookReport>,
) -> WebhookReport {
    reports
        .wait_for(
            Duration::from_secs(60),
            "an alert delivered or given up on",
            |r| r.result != WebhookResult::Returned,
        )
        .await
}

/// `sha256=<hex HMAC-SHA256 of body>`, as a receiver computes it.
fn expected_signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("a key");
    mac.update(body);
    format!("sha256={:x}", mac.finalize().into_bytes())
}

/// The value of the series `name{labels}` on a metrics page (0 if absent).
fn series(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_reaches_the_webhook_once_as_its_json_object_signed() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let receiver = WebhookReceiver::start(free_port(), 200).await;
    let mut config = config(&nats, &db.url(), &receiver.url("/hooks/chime"), 5);
    config.webhooks.secret = Some(Secret::new("a shared secret"));
    let replica = Replica::start(config).await.expect("replica starts");
    let mut reports = replica.signals.webhooks.subscribe();

    raise_alerts(&nats, 1).await;
    let report = next_report(&mut reports).await;
    assert_eq!(report.result, WebhookResult::Delivered { tries: 1 });
    let label = receiver.url("/hooks/chime");
    assert_eq!(report.url, label);

    // Nothing more comes (a quiet window: absence cannot be waited for).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let request = &received[0];
    assert_eq!(request.path, "/hooks/chime");
    assert_eq!(request.header("content-type"), Some("application/json"));
    let published = alerts_of(&nats).await;
    assert_eq!(published.len(), 1, "{published:?}");
    let alert: Alert = serde_json::from_slice(&request.body).expect("the body is an alert");
    assert_eq!(alert, published[0]);
    assert_eq!(alert.kind, AlertKind::DeadLetter);
    assert_eq!(
        request.header("x-chime-signature"),
        Some(expected_signature("a shared secret", &request.body).as_str()),
        "the signature is the HMAC-SHA256 of the exact body"
    );
    assert_eq!(
        request.header("x-chime-alert-id"),
        Some(report.alert_id.to_string().as_str())
    );
    let metrics = replica.metrics.render();
    let url = format!("{{url=\"{label}\"}}");
    assert_eq!(
        series(
            &metrics,
            &format!("chime_alert_webhook_deliveries_total{url}")
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        series(&metrics, &format!("chime_alert_webhook_retries_total{url}")),
        0.0
    );
    assert_eq!(
        series(
            &metrics,
            &format!("chime_alert_webhook_failures_total{url}")
        ),
        0.0
    );

    // What is not a JSON object is no alert: dead-lettered, never sent.
    let js = async_nats::jetstream::new(nats.connect().await);
    js.publish(Subjects::default().alerts(), "not an alert".into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    let report = next_report(&mut reports).await;
    assert_eq!(report.result, WebhookResult::DeadLettered { tries: 0 });
    assert_eq!(receiver.received().len(), 1);
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_at_first_gets_the_alert_once_it_is_back() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let replica = Replica::start(config(&nats, &db.url(), &url, 20))
        .await
        .expect("replica starts");
    let mut reports = replica.signals.webhooks.subscribe();

    raise_alerts(&nats, 1).await;
    // Nothing listens on the port: the tries fail and are retried.
    let retries = format!("chime_alert_webhook_retries_total{{url=\"{url}\"}}");
    eventually(Duration::from_secs(20), "two tries failed", || async {
        series(&replica.metrics.render(), &retries) >= 2.0
    })
    .await;
    let receiver = WebhookReceiver::start(port, 200).await;

    let report = next_report(&mut reports).await;
    let WebhookResult::Delivered { tries } = report.result else {
        panic!("not delivered: {report:?}");
    };
    assert!(tries >= 3, "delivered at try {tries}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let alert: Alert = serde_json::from_slice(&received[0].body).expect("an alert");
    assert_eq!(alert.kind, AlertKind::DeadLetter);
    let metrics = replica.metrics.render();
    assert_eq!(
        series(
            &metrics,
            &format!("chime_alert_webhook_failures_total{{url=\"{url}\"}}")
        ),
        0.0,
        "{metrics}"
    );
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_never_takes_the_alert_gets_the_bounded_tries_then_a_dead_letter() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let receiver = WebhookReceiver::start(free_port(), 503).await;
    let url = receiver.url("/hook");
    let replica = Replica::start(config(&nats, &db.url(), &format!("{url}?token=s3cret"), 3))
        .await
        .expect("replica starts");
    let mut reports = replica.signals.webhooks.subscribe();

    raise_alerts(&nats, 1).await;
    let report = next_report(&mut reports).await;
    assert_eq!(report.result, WebhookResult::DeadLettered { tries: 3 });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let received = receiver.received();
    assert_eq!(received.len(), 3, "exactly the bounded tries: {received:?}");
    assert!(
        received.iter().all(|r| r.body == received[0].body
            && r.header("x-chime-alert-id") == received[0].header("x-chime-alert-id")),
        "every try is the same alert"
    );

    // The alert waits in the dead-letter stream, body unchanged, its error
    // naming the URL without its query.
    let js = async_nats::jetstream::new(nats.connect().await);
    let mut dead = js.get_stream("CHIME_DEAD").await.expect("CHIME_DEAD");
    let state = dead.info().await.expect("info").state.clone();
    let mut webhook_letters = Vec::new();
    for seq in state.first_sequence..=state.last_sequence {
        let letter = dead.get_raw_message(seq).await.expect("a dead letter");
        if letter.subject.as_str() == "chime.dead.webhook" {
            webhook_letters.push(letter);
        }
    }
    assert_eq!(webhook_letters.len(), 1);
    let letter = &webhook_letters[0];
    assert_eq!(letter.payload.as_ref(), received[0].body.as_slice());
    let header = |name: &str| {
        letter
            .headers
            .get(name)
            .map(|v| v.to_string())
            .unwrap_or_else(|| panic!("the dead letter lacks {name}"))
    };
    assert_eq!(header("Chime-Subject"), "chime.alerts");
    assert_eq!(header("Chime-Deliveries"), "3");
    let error = header("Chime-Error");
    assert!(
        error.contains(&url) && error.contains("HTTP 503"),
        "{error}"
    );
    assert!(!error.contains("s3cret"), "{error}");

    let metrics = replica.metrics.render();
    let labelled = format!("{{url=\"{url}\"}}");
    assert_eq!(
        series(
            &metrics,
            &format!("chime_alert_webhook_failures_total{labelled}")
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        series(
            &metrics,
            &format!("chime_alert_webhook_retries_total{labelled}")
        ),
        2.0
    );
    assert_eq!(
        series(&metrics, "chime_dead_letters_total{kind=\"webhook\"}"),
        1.0
    );
    assert!(!metrics.contains("s3cret"), "no secret in a label");
    // Giving up raised no alert of its own (it would go the same way).
    let dead_letter_alerts = alerts_of(&nats)
        .await
        .into_iter()
        .filter(|a| a.kind == AlertKind::DeadLetter)
        .count();
    assert_eq!(dead_letter_alerts, 1);
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_waiting_while_every_replica_restarts_is_delivered_after() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let receiver = WebhookReceiver::start(free_port(), 200).await;
    let url = receiver.url("/hook");
    let replica = Replica::start(config(&nats, &db.url(), &url, 5))
        .await
        .expect("replica starts");
    replica.shutdown().await;

    // Raised while no replica runs (as by a replica that stops right after).
    let alert = Alert {
        kind: AlertKind::ClockOffset,
        job_id: String::new(),
        group: String::new(),
        firing_id: None,
        message: "replica r1's clock is off".into(),
        at: chrono::Utc::now(),
        consecutive_failures: None,
        paused: false,
        lateness_ms: None,
    };
    let body = serde_json::to_vec(&alert).expect("JSON");
    let js = async_nats::jetstream::new(nats.connect().await);
    js.publish(Subjects::default().alerts(), body.clone().into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    assert!(receiver.received().is_empty());

    let restarted = Replica::start(config(&nats, &db.url(), &url, 5))
        .await
        .expect("replica starts again");
    eventually(Duration::from_secs(20), "the alert delivered", || async {
        !receiver.received().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].body, body);
    restarted.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_each_alert_arrives_once() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let receiver = WebhookReceiver::start(free_port(), 200).await;
    let url = receiver.url("/hook");
    let first = Replica::start(config(&nats, db.url(), &url, 5))
        .await
        .expect("first replica starts");
    let second = Replica::start(config(&nats, db.url(), &url, 5))
        .await
        .expect("second replica starts");

    let alerts = 12;
    raise_alerts(&nats, alerts).await;
    eventually(Duration::from_secs(30), "every alert received", || async {
        receiver.received().len() >= alerts
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let received = receiver.received();
    assert_eq!(received.len(), alerts, "no alert twice: {received:?}");
    let ids: BTreeSet<&str> = received
        .iter()
        .map(|r| r.header("x-chime-alert-id").expect("an alert id"))
        .collect();
    assert_eq!(ids.len(), alerts);
    // Two alerts raised in the same millisecond may read alike: compare
    // what arrived with what was published, repeats included.
    let mut bodies: Vec<String> = received
        .iter()
        .map(|r| String::from_utf8(r.body.clone()).expect("UTF-8 JSON"))
        .collect();
    let mut published: Vec<String> = alerts_of(&nats)
        .await
        .iter()
        .map(|a| serde_json::to_string(a).expect("an alert"))
        .collect();
    bodies.sort();
    published.sort();
    assert_eq!(bodies, published);
    let delivered = format!("chime_alert_webhook_deliveries_total{{url=\"{url}\"}}");
    let total =
        series(&first.metrics.render(), &delivered) + series(&second.metrics.render(), &delivered);
    assert_eq!(total, alerts as f64);
    first.shutdown().await;
    second.shutdown().await;
}

/// Environment variables set for one run.
type Env = Vec<(&'static str, String)>;

/// The binary refuses bad webhook settings before it connects anywhere,
/// naming the flag and never printing the secret parts of a URL.
#[tokio::test]
async fn bad_webhook_settings_stop_the_scheduler_naming_the_flag() {
    let dir = tempfile::tempdir().expect("a directory");
    let empty = dir.path().join("empty-secret");
    std::fs::write(&empty, "\n").expect("write");
    let cases: Vec<(Env, Vec<String>, &str)> = vec![
        (
            vec![],
            vec![
                "--alert-webhook".into(),
                "ftp://user:pw@files.example/x".into(),
            ],
            "--alert-webhook: ftp://user:***@files.example/x is not an http:// or https:// URL",
        ),
        (
            vec![(
                "CHIME_ALERT_WEBHOOKS",
                "http://127.0.0.1:9/a,gopher://x?token=s3cret".into(),
            )],
            vec![],
            "--alert-webhook: gopher://x is not an http:// or https:// URL",
        ),
        (
            vec![],
            vec![
                "--alert-webhook".into(),
                "http://127.0.0.1:9/a".into(),
                "--alert-webhook-secret-file".into(),
                empty.display().to_string(),
            ],
            "--alert-webhook-secret-file: ",
        ),
        (
            vec![],
            vec![
                "--alert-webhook-secret-file".into(),
                dir.path().join("missing").display().to_string(),
            ],
            "--alert-webhook-secret-file: cannot read",
        ),
        (
            vec![],
            vec![
                "--alert-webhook".into(),
                "http://127.0.0.1:9/a".into(),
                "--alert-webhook-tries".into(),
                "0".into(),
            ],
            "--alert-webhook-tries must be from 1 to 20",
        ),
        (
            vec![],
            vec!["--job-metrics-interval".into(), "0s".into()],
            "--job-metrics-interval must be above zero",
        ),
    ];
    for (env, args, expected) in cases {
        let mut command = Binary::Scheduler.command();
        command
            .args([
                "--nats-url",
                "nats://127.0.0.1:1",
                "--database-url",
                &format!("sqlite://{}", dir.path().join("chime.db").display()),
            ])
            .args(&args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        let output = tokio::process::Command::from(command)
            .output()
            .await
            .expect("the scheduler runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} {env:?}: started");
        assert!(stderr.contains(expected), "{args:?} {env:?}: {stderr}");
        assert!(
            !stderr.contains("s3cret") && !stderr.contains(":pw@"),
            "{stderr}"
        );
    }
}
