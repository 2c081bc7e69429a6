//! Poison isolation and transient store errors.
//!
//! A message Chime cannot apply is retried a bounded number of times, then
//! moved with its error to `chime.dead.<kind>`, counted and alerted, and it
//! never holds back the messages batched with it. A store that is merely busy
//! or down is retried without limit and never rejects or dead-letters
//! anything. Real nats-server, real PostgreSQL and SQLite; the failures are
//! real database errors (a trigger that refuses one firing's update, a row
//! lock held past `lock_timeout`, a terminated connection).

use async_nats::jetstream;
use chime_common::error::ErrorReply;
use chime_common::protocol::{Alert, AlertKind, Finished, Outcome, StartReply, StartRequest};
use chime_common::{ErrorCode, FiringId, FiringState, Subjects};
use chime_runtime::connection::confirm_subscriptions;
use chime_scheduler::ops::dead_letter::{DELIVERIES_HEADER, SUBJECT_HEADER};
use chime_scheduler::recovery::expiry_monitor::{ExpiryMonitor, ExpiryMonitorConfig};
use chime_scheduler::store::{FiringFilter, Store, StoreError};
use chime_scheduler::workers::finishes::FinishesConfig;
use chime_scheduler::workers::starts::StartsConfig;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{
    backend_tests, eventually, init_tracing, never_firing_job, started, triggered, DatabaseKind,
    NatsServer, PgDatabase, StandaloneReports, TestDatabase,
};
use chrono::Utc;
use futures::StreamExt;
use serde_json::json;
use sqlx::{AnyConnection, Connection, Executor};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A dead letter as it sits in the CHIME_DEAD stream.
#[derive(Debug)]
struct Stored {
    subject: String,
    body: Vec<u8>,
    error: ErrorReply,
    original_subject: String,
    deliveries: u64,
}

/// Every dead letter stored so far, in order.
async fn dead_letters(js: &jetstream::Context) -> Vec<Stored> {
    let mut stream = js.get_stream("CHIME_DEAD").await.expect("dead stream");
    let state = stream.info().await.expect("dead stream info").state.clone();
    let mut out = Vec::new();
    if state.messages == 0 {
        return out;
    }
    for seq in state.first_sequence..=state.last_sequence {
        let message = stream.get_raw_message(seq).await.expect("dead letter");
        let header = |name: &str| {
            message
                .headers
                .get(name)
                .map(|v| v.to_string())
                .unwrap_or_else(|| panic!("dead letter {seq} lacks {name}"))
        };
        out.push(Stored {
            subject: message.subject.to_string(),
            body: message.payload.to_vec(),
            error: serde_json::from_str(&header("Chime-Error")).expect("Chime-Error is JSON"),
            original_subject: header(SUBJECT_HEADER),
            deliveries: header(DELIVERIES_HEADER).parse().expect("a delivery count"),
        });
    }
    out
}

/// The value of one labelled series in a Prometheus text exposition.
fn series(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A plain connection to the test database, beside the store's pools.
async fn connection(db: &TestDatabase) -> AnyConnection {
    sqlx::any::install_default_drivers();
    AnyConnection::connect(&db.url())
        .await
        .expect("a connection to the test database")
}

/// Makes the database refuse every change to one firing row: a real,
/// non-retryable database error (PostgreSQL `P0001`, SQLite
/// `SQLITE_CONSTRAINT_TRIGGER`) whenever the store touches it.
async fn poison(db: &TestDatabase, firing: &FiringId) {
    refuse(db, "firings", "UPDATE", &format!("OLD.id = '{firing}'")).await;
}

/// Creates a trigger that fails every `operation` on `table` whose row
/// matches `condition` with "refused by the test".
async fn refuse(db: &TestDatabase, table: &str, operation: &str, condition: &str) {
    let mut conn = connection(db).await;
    let name = format!("refuse_{}", table);
    match db.kind() {
        DatabaseKind::Postgres => {
            conn.execute(
                "CREATE OR REPLACE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
            )
            .await
            .expect("create function");
            conn.execute(
                format!(
                    "CREATE TRIGGER {name} BEFORE {operation} ON {table} FOR EACH ROW \
                     WHEN ({condition}) EXECUTE FUNCTION refuse_poison()"
                )
                .as_str(),
            )
            .await
            .expect("create trigger");
        }
        DatabaseKind::Sqlite => {
            conn.execute(
                format!(
                    "CREATE TRIGGER {name} BEFORE {operation} ON {table} WHEN {condition} \
                     BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
                .as_str(),
            )
            .await
            .expect("create trigger");
        }
    }
    conn.close().await.expect("close");
}

/// A store on `db` and an expiry monitor over it and `nats` (streams and
/// buckets made), with no replica applying anything: what a test puts in
/// the events stream stays there.
async fn expiry_monitor(
    nats: &NatsServer,
    db: &TestDatabase,
) -> (Store, ExpiryMonitor, jetstream::Context) {
    let standalone = StandaloneReports::connect(nats, &db.url()).await;
    let store = standalone.store.clone();
    let metrics = chime_scheduler::ops::metrics::Metrics::new();
    let monitor = ExpiryMonitor::new(
        ExpiryMonitorConfig::default(),
        store.clone(),
        standalone.topology.workers().await.expect("workers bucket"),
        standalone.nats(),
        standalone.alerts(&metrics),
        Default::default(),
        metrics,
    );
    (store, monitor, standalone.jetstream)
}

async fn firing_state(store: &Store, id: &FiringId) -> Option<FiringState> {
    let page = store
        .list_firings(&FiringFilter {
            job_id: Some(id.job_id.clone()),
            ..Default::default()
        })
        .await
        .expect("firings");
    page.items
        .into_iter()
        .find(|f| &f.id == id)
        .map(|f| f.state)
}

/// Collects `dead_letter` alerts from a core subscription to `chime.alerts`.
async fn dead_letter_alerts(alerts: &mut async_nats::Subscriber, want: usize) -> Vec<Alert> {
    let mut found = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while found.len() < want {
        let message = tokio::time::timeout_at(deadline, alerts.next())
            .await
            .expect("dead_letter alerts in time")
            .expect("alert subscription open");
        let alert: Alert = serde_json::from_slice(&message.payload).expect("an alert");
        if alert.kind == AlertKind::DeadLetter {
            found.push(alert);
        }
    }
    found
}

backend_tests! {
    /// One finished event the store refuses, in one batch with good ones and
    /// a malformed one: the good ones are applied on that first delivery, the
    /// malformed one is dead-lettered at once, the refused one is redelivered
    /// until its `max_deliveries`-th delivery and then dead-lettered with its
    /// body and error, counted and alerted. Nothing is left unacked.
    async fn a_finished_event_that_cannot_be_applied_is_dead_lettered_and_holds_back_nothing(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let standalone = StandaloneReports::connect(&nats, &db.url()).await;
        let store = standalone.store.clone();
        let (client, js, subjects) = (standalone.client.clone(), standalone.jetstream.clone(), standalone.subjects.clone());
        let firings = started(&store, &["good-1", "good-2", "poison", "good-3", "good-4"], "w1", Utc::now()).await;
        let poisoned = firings[2].clone();
        poison(&db, &poisoned).await;

        let mut bodies = Vec::new();
        for (i, id) in firings.iter().enumerate() {
            let event = Finished {
                firing_id: id.clone(),
                worker_id: "w1".into(),
                outcome: Outcome::Succeeded,
                error: None,
                interrupted: None,
                output: Some(format!("run {i}")),
                started_at: Utc::now(),
                finished_at: Utc::now(),
            };
            bodies.push(serde_json::to_vec(&event).expect("json"));
        }
        bodies.insert(3, b"{\"firing_id\": 42, not json".to_vec());
        for body in &bodies {
            js.publish(subjects.finished(), body.clone().into()).await.expect("publish").await.expect("ack");
        }
        let mut alerts = client.subscribe(subjects.alerts()).await.expect("subscribe");
        confirm_subscriptions(&async_nats::jetstream::new(client.clone()))
            .await
            .expect("subscriptions confirmed");

        let max_deliveries = 3;
        let reports = standalone.finishes(FinishesConfig {
            max_deliveries,
            retry_after: Duration::from_millis(300),
            ..Default::default()
        });
        let consumer = standalone.finished_consumer().await;

        // First delivery: all six events in one batch, as `Finishes::consume` would pull them.
        let mut batch = Vec::new();
        while batch.len() < bodies.len() {
            let mut pulled = consumer
                .fetch()
                .max_messages(bodies.len() - batch.len())
                .expires(Duration::from_secs(2))
                .messages()
                .await
                .expect("pull");
            while let Some(message) = pulled.next().await {
                batch.push(Ok(message.expect("a message")));
            }
        }
        reports.apply_batch(batch).await.expect("no pull error");
        for id in firings.iter().filter(|id| **id != poisoned) {
            assert_eq!(firing_state(&store, id).await, Some(FiringState::Succeeded), "{id}");
        }
        assert_eq!(firing_state(&store, &poisoned).await, Some(FiringState::Executing));
        let letters = dead_letters(&js).await;
        assert_eq!(letters.len(), 1, "only the malformed event is dead at once: {letters:?}");
        let malformed = &letters[0];
        assert_eq!(malformed.subject, "chime.dead.finished");
        assert_eq!(malformed.body, bodies[3]);
        assert_eq!(malformed.deliveries, 1);
        assert_eq!(malformed.error.error.code, ErrorCode::InvalidArgument);
        assert_eq!(malformed.original_subject, "chime.events.finished");

        // Later deliveries of the refused event, through the service's own loop.
        let shutdown = CancellationToken::new();
        let consuming = tokio::spawn(reports.clone().consume(consumer, shutdown.clone()));
        eventually(Duration::from_secs(30), "the refused event dead-lettered", || async {
            dead_letters(&js).await.len() == 2
        })
        .await;
        let letters = dead_letters(&js).await;
        let refused = &letters[1];
        assert_eq!(refused.subject, "chime.dead.finished");
        assert_eq!(refused.body, bodies[2], "the dead letter carries the original body");
        assert_eq!(refused.deliveries, u64::from(max_deliveries));
        assert!(refused.error.error.message.contains("refused by the test"), "{:?}", refused.error);
        assert_eq!(firing_state(&store, &poisoned).await, Some(FiringState::Executing));

        let text = reports.metrics.render();
        assert_eq!(series(&text, r#"chime_dead_letters_total{kind="finished"}"#), 2.0, "{text}");
        assert_eq!(series(&text, r#"chime_alerts_total{kind="dead_letter"}"#), 2.0);
        let alerts = dead_letter_alerts(&mut alerts, 2).await;
        assert!(
            alerts.iter().any(|a| a.firing_id.as_ref() == Some(&poisoned) && a.job_id == "poison"),
            "{alerts:?}"
        );
        assert!(alerts.iter().any(|a| a.job_id.is_empty() && a.firing_id.is_none()), "{alerts:?}");

        // Nothing is redelivered again.
        eventually(Duration::from_secs(10), "every event acked", || async {
            let consumer: jetstream::consumer::PullConsumer = js
                .get_stream("CHIME_EVENTS")
                .await
                .expect("events stream")
                .get_consumer("chime-lifecycle")
                .await
                .expect("consumer");
            let info = consumer.cached_info();
            info.num_pending == 0 && info.num_ack_pending == 0
        })
        .await;
        shutdown.cancel();
        consuming
        .await
        .expect("the consumer stops")
        .expect("the consumer ends without a pull error");
    }

    /// A batch of start requests with one the store refuses and one that is
    /// not a start request: the others are accepted; the two get an error
    /// reply and are dead-lettered.
    async fn a_start_request_that_cannot_be_decided_is_dead_lettered_and_the_others_are_accepted(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let standalone = StandaloneReports::connect(&nats, &db.url()).await;
        let store = standalone.store.clone();
        let (client, js, subjects) = (standalone.client.clone(), standalone.jetstream.clone(), standalone.subjects.clone());
        let firings = triggered(&store, &["good-1", "good-2", "poison", "good-3"]).await;
        let poisoned = firings[2].clone();
        poison(&db, &poisoned).await;
        let reports = standalone.starts(StartsConfig::default());

        // The reports answers exactly this batch, as `Starts::serve` would.
        let mut inbox = client.subscribe(subjects.worker_start()).await.expect("subscribe");
        confirm_subscriptions(&async_nats::jetstream::new(client.clone()))
            .await
            .expect("subscriptions confirmed");
        let mut bodies: Vec<Vec<u8>> = firings
            .iter()
            .map(|id| {
                let request = StartRequest { firing_id: id.clone(), worker_id: "w1".into(), group: "default".into(), handler: None, payload_sha256: None };
                serde_json::to_vec(&request).expect("json")
            })
            .collect();
        bodies.push(b"not a start request".to_vec());
        let asked: Vec<_> = bodies
            .iter()
            .map(|body| {
                let (client, subject, body) = (client.clone(), subjects.worker_start(), body.clone().into());
                tokio::spawn(async move { client.request(subject, body).await.expect("a reply") })
            })
            .collect();
        let mut batch = Vec::new();
        while batch.len() < bodies.len() {
            batch.push(
                tokio::time::timeout(Duration::from_secs(10), inbox.next())
                    .await
                    .expect("the requests arrive")
                    .expect("subscription open"),
            );
        }
        reports.answer(batch).await;

        let mut replies = Vec::new();
        for reply in asked {
            replies.push(reply.await.expect("request task").payload.to_vec());
        }
        let by_body = |body: &Vec<u8>| &replies[bodies.iter().position(|b| b == body).expect("asked")];
        for (id, body) in firings.iter().zip(&bodies) {
            let reply = by_body(body);
            if *id == poisoned {
                let error: ErrorReply = serde_json::from_slice(reply).expect("an error reply");
                assert_eq!(error.error.code, ErrorCode::Internal, "{error:?}");
            } else {
                let reply: StartReply = serde_json::from_slice(reply).expect("a start reply");
                assert!(reply.accepted, "{id}: {reply:?}");
            }
        }
        let malformed: ErrorReply = serde_json::from_slice(by_body(&bodies[4])).expect("an error reply");
        assert_eq!(malformed.error.code, ErrorCode::InvalidArgument);

        let letters = dead_letters(&js).await;
        assert_eq!(letters.len(), 2, "{letters:?}");
        assert!(letters.iter().all(|l| l.subject == "chime.dead.start" && l.deliveries == 1));
        assert!(letters.iter().all(|l| l.original_subject == "chime.worker.v1.start"));
        let mut dead: Vec<&Vec<u8>> = letters.iter().map(|l| &l.body).collect();
        dead.sort();
        let mut expected = vec![&bodies[2], &bodies[4]];
        expected.sort();
        assert_eq!(dead, expected);
        assert_eq!(
            series(&reports.metrics.render(), r#"chime_dead_letters_total{kind="start"}"#),
            2.0
        );
    }
}

/// What a malformed message's error says: the field named where serde
/// could tell (`None` for a body that is not JSON, or not an object), and a
/// message that begins with `prefix`, never with punctuation.
fn assert_names(error: &chime_common::ApiError, field: Option<&str>, prefix: &str) {
    assert_eq!(error.code, ErrorCode::InvalidArgument, "{error:?}");
    assert_eq!(error.field.as_deref(), field, "{error:?}");
    assert!(error.message.starts_with(prefix), "{error:?}");
    if let Some(field) = field {
        assert!(error.message.contains(field), "{error:?}");
    }
}

/// Start requests and finished events that are not what they claim to be:
/// the start's error reply and each dead letter name the field at fault
/// (missing, of the wrong type, not a firing id, an unknown outcome), or
/// none for a body that is not JSON or not an object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_start_requests_and_finished_events_name_the_field_at_fault() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = TestDatabase::create(DatabaseKind::Sqlite).await;
    let standalone = StandaloneReports::connect(&nats, &db.url()).await;
    let (client, js, subjects) = (
        standalone.client.clone(),
        standalone.jetstream.clone(),
        standalone.subjects.clone(),
    );

    let starts: Vec<(&str, Option<&str>)> = vec![
        (
            r#"{"worker_id": "w1", "group": "default"}"#,
            Some("firing_id"),
        ),
        (
            r#"{"firing_id": "no-attempt", "worker_id": "w1", "group": "default"}"#,
            Some("firing_id"),
        ),
        (
            r#"{"firing_id": "job@1000#1", "worker_id": 7, "group": "default"}"#,
            Some("worker_id"),
        ),
        ("not a start request", None),
        ("[1, 2]", None),
    ];
    let mut inbox = client
        .subscribe(subjects.worker_start())
        .await
        .expect("subscribe");
    confirm_subscriptions(&jetstream::new(client.clone()))
        .await
        .expect("subscriptions confirmed");
    let asked: Vec<_> = starts
        .iter()
        .map(|(body, _)| {
            let (client, subject) = (client.clone(), subjects.worker_start());
            let body = body.as_bytes().to_vec().into();
            tokio::spawn(async move { client.request(subject, body).await.expect("a reply") })
        })
        .collect();
    let mut batch = Vec::new();
    while batch.len() < starts.len() {
        batch.push(
            tokio::time::timeout(Duration::from_secs(10), inbox.next())
                .await
                .expect("the requests arrive")
                .expect("subscription open"),
        );
    }
    standalone
        .starts(StartsConfig::default())
        .answer(batch)
        .await;
    for ((body, field), reply) in starts.iter().zip(asked) {
        let reply = reply.await.expect("request task");
        let error: ErrorReply = serde_json::from_slice(&reply.payload)
            .unwrap_or_else(|e| panic!("{body}: not an error reply: {e}"));
        assert_names(&error.error, *field, "not a start request: ");
    }

    let events: Vec<(&str, Option<&str>)> = vec![
        (r#"{"firing_id": 42, "worker_id": "w1"}"#, Some("firing_id")),
        (
            r#"{"firing_id": "job@1000#1", "worker_id": "w1", "outcome": "exploded", "finished_at": "2026-03-28T01:30:04.870Z"}"#,
            Some("outcome"),
        ),
        (
            r#"{"firing_id": "job@1000#1", "worker_id": "w1", "outcome": "succeeded", "finished_at": "yesterday"}"#,
            Some("finished_at"),
        ),
        ("{not json", None),
        (r#""a string""#, None),
    ];
    for (body, _) in &events {
        js.publish(subjects.finished(), body.as_bytes().to_vec().into())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let consumer = standalone.finished_consumer().await;
    let mut batch = Vec::new();
    while batch.len() < events.len() {
        let mut pulled = consumer
            .fetch()
            .max_messages(events.len() - batch.len())
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .expect("pull");
        while let Some(message) = pulled.next().await {
            batch.push(Ok(message.expect("a message")));
        }
    }
    standalone
        .finishes(FinishesConfig::default())
        .apply_batch(batch)
        .await
        .expect("no pull error");
    let letters = dead_letters(&js).await;
    let finished: Vec<&Stored> = letters
        .iter()
        .filter(|l| l.subject == "chime.dead.finished")
        .collect();
    assert_eq!(finished.len(), events.len(), "{letters:?}");
    for (body, field) in &events {
        let letter = finished
            .iter()
            .find(|l| l.body == body.as_bytes())
            .unwrap_or_else(|| panic!("{body} dead-lettered"));
        assert_names(&letter.error.error, *field, "not a finished event: ");
    }
}

backend_tests! {
    /// An executing firing the store refuses to re-queue does not keep the
    /// expiry monitor from re-queuing the rows after it.
    async fn a_firing_that_cannot_be_requeued_holds_back_no_other(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let (store, monitor, _) = expiry_monitor(&nats, &db).await;
        // Same start, same timeout: the scan meets them in firing-id order, poison first.
        let start = Utc::now();
        let firings = started(&store, &["a-poison", "b-good"], "gone", start).await;
        poison(&db, &firings[0]).await;

        let outcome = monitor
            .run_once(start + chrono::Duration::hours(2))
            .await
            .expect("the scan goes on past the refused row");
        assert_eq!(outcome.failed, [firings[0].clone()]);
        assert_eq!(outcome.lost, [firings[1].clone()]);
        assert_eq!(firing_state(&store, &firings[1]).await, Some(FiringState::Lost));
        assert_eq!(firing_state(&store, &firings[0]).await, Some(FiringState::Executing));
    }
}

backend_tests! {
    /// A worker that stops reports its runs, then deletes its heartbeat
    /// key. While its finished events still wait in the events stream (the
    /// replica that applies them is slow, or restarting), the expiry monitor
    /// does not judge its firings lost; once they are gone, it does.
    async fn a_vanished_worker_whose_reports_wait_is_not_judged_lost(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let (store, monitor, js) = expiry_monitor(&nats, &db).await;
        let start = Utc::now();
        let firings = started(&store, &["a-left"], "left", start).await;
        let event = Finished {
            firing_id: firings[0].clone(),
            worker_id: "left".into(),
            outcome: Outcome::Succeeded,
            error: None,
            interrupted: None,
            output: None,
            started_at: start,
            finished_at: start,
        };
        let subjects = Subjects::default();
        js.publish(subjects.finished_as("default", "left"), serde_json::to_vec(&event).expect("json").into())
            .await.expect("publish").await.expect("stored");
        let later = start + chrono::Duration::seconds(30);
        let outcome = monitor.run_once(later).await.expect("scan");
        assert!(outcome.lost.is_empty(), "{outcome:?}");
        assert_eq!(outcome.deferred, [firings[0].clone()]);
        assert_eq!(firing_state(&store, &firings[0]).await, Some(FiringState::Executing));

        // The event is applied elsewhere (here: removed unapplied): the
        // firing is judged by its heartbeat again.
        js.get_stream(subjects.events_stream()).await.expect("events stream").purge().await.expect("purge");
        let outcome = monitor.run_once(later).await.expect("scan");
        assert_eq!(outcome.lost, [firings[0].clone()]);
    }
}

backend_tests! {
    /// A valid submission the store keeps failing on for a reason that is
    /// neither the spec's fault nor an outage is retried `max_deliveries`
    /// times, then dead-lettered, not rejected and not retried forever.
    async fn a_submission_the_store_keeps_failing_is_dead_lettered(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let client = nats.connect().await;
        let js = jetstream::new(client.clone());
        let max_deliveries = 3;
        let mut config = SchedulerConfig::new(nats.url(), db.url());
        config.submit.max_deliveries = max_deliveries;
        config.submit.retry_after = Duration::from_millis(100);
        let replica = Replica::start(config).await.expect("replica");
        refuse(&db, "jobs", "INSERT", "NEW.id = 'refused'").await;
        let mut alerts = client.subscribe("chime.alerts").await.expect("subscribe");
        confirm_subscriptions(&async_nats::jetstream::new(client.clone()))
            .await
            .expect("subscriptions confirmed");

        let body = serde_json::to_vec(&json!({"id": "refused", "handler": "noop", "schedule": {"every": "1h"}})).expect("json");
        js.publish("chime.submit", body.clone().into()).await.expect("publish").await.expect("ack");
        eventually(Duration::from_secs(30), "the submission dead-lettered (or rejected)", || async {
            !dead_letters(&js).await.is_empty()
                || series(&replica.metrics.render(), "chime_submit_rejected_total") > 0.0
        })
        .await;
        let letters = dead_letters(&js).await;
        assert_eq!(letters.len(), 1, "{letters:?}");
        assert_eq!(letters[0].subject, "chime.dead.submit");
        assert_eq!(letters[0].original_subject, "chime.submit");
        assert_eq!(letters[0].body, body);
        assert_eq!(letters[0].deliveries, u64::from(max_deliveries));
        assert_eq!(letters[0].error.error.code, ErrorCode::Internal);
        let text = replica.metrics.render();
        assert_eq!(series(&text, r#"chime_dead_letters_total{kind="submit"}"#), 1.0);
        assert_eq!(series(&text, "chime_submit_rejected_total"), 0.0);
        let alerts = dead_letter_alerts(&mut alerts, 1).await;
        assert_eq!(alerts[0].job_id, "refused");
        assert!(replica.store.get_job("refused").await.expect("get").is_none());
        replica.shutdown().await;
    }
}

backend_tests! {
    /// A firing the store refuses to mark `published` (a reason of its own,
    /// not an outage) stays `staged` alone: the others of its batch and every
    /// later batch are marked. Before, the publisher retried the same batch
    /// forever and marked nothing after it.
    async fn a_firing_that_cannot_be_marked_published_holds_back_nothing(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
            .await
            .expect("replica");
        let store = replica.store.clone();
        let first = triggered(&store, &["poison", "good-1"]).await;
        poison(&db, &first[0]).await;
        // No worker: every published firing is marked a second after its ack.
        eventually(Duration::from_secs(30), "good-1 marked published", || async {
            firing_state(&store, &first[1]).await == Some(FiringState::Published)
        })
        .await;
        let later = triggered(&store, &["good-2"]).await;
        eventually(Duration::from_secs(30), "a later batch marked too", || async {
            firing_state(&store, &later[0]).await == Some(FiringState::Published)
        })
        .await;
        assert_eq!(firing_state(&store, &first[0]).await, Some(FiringState::Staged));
        replica.shutdown().await;
    }
}

/// The URL of a PostgreSQL test database whose sessions give up waiting
/// for a lock after `lock_timeout`.
fn with_lock_timeout(url: &str, lock_timeout: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20lock_timeout%3D{lock_timeout}")
}

/// A valid submission that meets a busy store (the job's row locked past
/// `lock_timeout`) is retried, not rejected, and stored once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_meets_a_busy_store_is_retried_not_rejected() {
    init_tracing();
    let nats = NatsServer::start().await;
    let client = nats.connect().await;
    let js = jetstream::new(client.clone());
    let db = PgDatabase::create().await;
    let url = with_lock_timeout(db.url(), "200");
    let mut config = SchedulerConfig::new(nats.url(), url.clone());
    config.submit.retry_after = Duration::from_millis(200);
    let replica = Replica::start(config).await.expect("replica");
    let store = replica.store.clone();
    store
        .put_job(&never_firing_job("busy"), Utc::now())
        .await
        .expect("first version");

    sqlx::any::install_default_drivers();
    let mut holder = AnyConnection::connect(db.url()).await.expect("connection");
    let mut locked = holder.begin().await.expect("begin");
    locked
        .execute("SELECT id FROM jobs WHERE id = 'busy' FOR UPDATE")
        .await
        .expect("lock the job's row");

    // A replacement names the version it replaces (submissions create,
    // or replace only so).
    let second = json!({"id": "busy", "handler": "second",
        "schedule": {"at": "2099-01-01T00:00:00Z"}, "if_version": 1});
    js.publish(
        "chime.submit",
        serde_json::to_vec(&second).expect("json").into(),
    )
    .await
    .expect("publish")
    .await
    .expect("ack");
    let handled = || {
        let text = replica.metrics.render();
        series(&text, r#"chime_store_errors_total{op="submit"}"#) >= 2.0
            || series(&text, "chime_submit_rejected_total") > 0.0
    };
    eventually(
        Duration::from_secs(30),
        "the submission met the busy store twice (or was rejected)",
        || async { handled() },
    )
    .await;
    let text = replica.metrics.render();
    assert_eq!(
        series(&text, "chime_submit_rejected_total"),
        0.0,
        "a busy store rejected a valid spec"
    );
    assert_eq!(
        series(&text, r#"chime_dead_letters_total{kind="submit"}"#),
        0.0
    );
    let rejected = js
        .get_stream("CHIME_SUBMIT")
        .await
        .expect("submit stream")
        .info()
        .await
        .expect("info")
        .state
        .messages;
    assert_eq!(rejected, 1, "only the submission itself is in the stream");

    locked.rollback().await.expect("release the lock");
    eventually(Duration::from_secs(15), "the submission stored", || async {
        store
            .get_job("busy")
            .await
            .expect("get")
            .is_some_and(|job| job.spec.handler == "second")
    })
    .await;
    assert_eq!(
        series(&replica.metrics.render(), "chime_submit_applied_total"),
        1.0
    );
    replica.shutdown().await;
}

/// A finished event that meets a busy store (its firing's row locked past
/// `lock_timeout`) is redelivered past `max_deliveries`, never dead-lettered,
/// and applied once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_event_that_meets_a_busy_store_is_never_dead_lettered() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let standalone = StandaloneReports::connect(&nats, &with_lock_timeout(db.url(), "100")).await;
    let store = standalone.store.clone();
    let js = standalone.jetstream.clone();
    let firing = started(&store, &["busy"], "w1", Utc::now()).await.remove(0);

    sqlx::any::install_default_drivers();
    let mut holder = AnyConnection::connect(db.url()).await.expect("connection");
    let mut locked = holder.begin().await.expect("begin");
    locked
        .execute(format!("SELECT id FROM firings WHERE id = '{firing}' FOR UPDATE").as_str())
        .await
        .expect("lock the firing's row");

    standalone.publish_succeeded(&firing, "w1").await;
    let max_deliveries = 2;
    let reports = standalone.finishes(FinishesConfig {
        max_deliveries,
        retry_after: Duration::from_millis(100),
        ..Default::default()
    });
    let consumer = standalone.finished_consumer().await;
    let shutdown = CancellationToken::new();
    let consuming = tokio::spawn(reports.clone().consume(consumer, shutdown.clone()));
    let failures = || {
        series(
            &reports.metrics.render(),
            r#"chime_store_errors_total{op="finish"}"#,
        )
    };
    eventually(
        Duration::from_secs(60),
        "the event delivered past max_deliveries (or dead-lettered)",
        || async { failures() > f64::from(max_deliveries) || !dead_letters(&js).await.is_empty() },
    )
    .await;
    assert!(
        dead_letters(&js).await.is_empty(),
        "a busy store dead-lettered an event"
    );
    assert_eq!(
        firing_state(&store, &firing).await,
        Some(FiringState::Executing)
    );

    locked.rollback().await.expect("release the lock");
    eventually(Duration::from_secs(15), "the event applied", || async {
        firing_state(&store, &firing).await == Some(FiringState::Succeeded)
    })
    .await;
    assert!(dead_letters(&js).await.is_empty());
    shutdown.cancel();
    consuming
        .await
        .expect("the consumer stops")
        .expect("the consumer ends without a pull error");
}

/// A real lock wait that timed out (55P03) is `Busy`: retryable.
#[tokio::test]
async fn a_lock_timeout_is_busy() {
    let db = PgDatabase::create().await;
    sqlx::any::install_default_drivers();
    let mut holder = AnyConnection::connect(db.url()).await.expect("connection");
    holder
        .execute("CREATE TABLE contended (id INT)")
        .await
        .expect("table");
    let mut locked = holder.begin().await.expect("begin");
    locked
        .execute("LOCK TABLE contended IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let mut waiter = AnyConnection::connect(&with_lock_timeout(db.url(), "100"))
        .await
        .expect("connection");
    let error = waiter
        .execute("SELECT * FROM contended")
        .await
        .expect_err("the lock wait times out");
    let error = StoreError::from(error);
    assert!(matches!(error, StoreError::Busy(_)), "{error:?}");
    assert!(error.is_retryable());
    locked.rollback().await.expect("rollback");
}

/// A connection the server terminated (57P01, or the socket closing under
/// it) is `Unavailable`: retryable.
#[tokio::test]
async fn a_terminated_connection_is_unavailable() {
    let db = PgDatabase::create().await;
    sqlx::any::install_default_drivers();
    let mut victim = AnyConnection::connect(db.url()).await.expect("connection");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut victim)
        .await
        .expect("pid");
    let mut admin = AnyConnection::connect(db.url()).await.expect("connection");
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .expect("terminate");
    assert!(terminated);
    let error = victim
        .execute("SELECT 1")
        .await
        .expect_err("the connection is gone");
    let error = StoreError::from(error);
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(error.is_retryable());
}

/// A server out of connections for a role (53300) is `Unavailable`: retryable.
#[tokio::test]
async fn too_many_connections_is_unavailable() {
    let db = PgDatabase::create().await;
    sqlx::any::install_default_drivers();
    let mut admin = AnyConnection::connect(db.url()).await.expect("connection");
    let role = format!("chime_poison_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute(format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 0").as_str())
        .await
        .expect("create role");
    let url = db.url().replacen("postgres@", &format!("{role}@"), 1);
    assert_ne!(url, db.url(), "the test URL names user postgres");
    let refused = AnyConnection::connect(&url).await;
    admin
        .execute(format!("DROP ROLE {role}").as_str())
        .await
        .expect("drop role");
    let error = StoreError::from(refused.expect_err("the role may not connect"));
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(error.is_retryable());
}

/// SQLite busy (another connection holds the write lock past the busy
/// timeout) is `Busy`: retryable.
#[tokio::test]
async fn sqlite_busy_is_busy() {
    let db = TestDatabase::create(DatabaseKind::Sqlite).await;
    let url = db.url();
    sqlx::any::install_default_drivers();
    let mut holder = AnyConnection::connect(&url).await.expect("connection");
    holder
        .execute("CREATE TABLE contended (id INT)")
        .await
        .expect("table");
    holder.execute("BEGIN IMMEDIATE").await.expect("write lock");
    let mut waiter = AnyConnection::connect(&url).await.expect("connection");
    waiter
        .execute("PRAGMA busy_timeout = 100")
        .await
        .expect("busy timeout");
    let error = waiter
        .execute("BEGIN IMMEDIATE")
        .await
        .expect_err("the write lock is held");
    let error = StoreError::from(error);
    assert!(matches!(error, StoreError::Busy(_)), "{error:?}");
    assert!(error.is_retryable());
    holder.execute("ROLLBACK").await.expect("rollback");
}

/// A session the server ended for idling (57P05, `idle_session_timeout`)
/// is `Unavailable`: retryable.
#[tokio::test]
async fn an_idle_session_timeout_is_unavailable() {
    let db = PgDatabase::create().await;
    sqlx::any::install_default_drivers();
    let mut idle = AnyConnection::connect(db.url()).await.expect("connection");
    idle.execute("SET idle_session_timeout = 100")
        .await
        .expect("set idle_session_timeout");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let error = idle
        .execute("SELECT 1")
        .await
        .expect_err("the server ended the session");
    let error = StoreError::from(error);
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(error.is_retryable());
}
