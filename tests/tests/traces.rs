//! Traces end to end (docs/OPERATIONS.md, "Traces"): the built scheduler
//! and worker export their spans of a firing over OTLP to a real receiver
//! started by the test ([`OtlpReceiver`]); a shell job sees the firing's
//! `TRACEPARENT`; a trigger or a one-shot submission that carries a trace
//! keeps it, a scheduled firing gets one of its own; a malformed
//! `traceparent` is refused; without an endpoint nothing is sent, and a
//! collector that never answers slows no firing.

use async_nats::HeaderMap;
use chime_common::api::TriggerRequest;
use chime_common::client::Client;
use chime_common::traceparent::{FiringTrace, TraceParent};
use chime_common::{ErrorCode, FiringId, FiringState};
use chime_tests::{
    backend_tests, firings_of, until_ok, Binary, ChimeProcess, NatsServer, OtlpReceiver,
    ReceivedSpan, SqliteDatabase, TestDatabase,
};
use chrono::{SubsecRound, Utc};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A trace a caller sends, its trace id and its span.
const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const GIVEN_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const GIVEN_SPAN: &str = "00f067aa0ba902b7";

/// Every span the scheduler and the worker record of a triggered run.
const RUN_SPANS: [&str; 6] = [
    "trigger",
    "staged",
    "published",
    "started",
    "handler",
    "finished",
];

const WAIT: Duration = Duration::from_secs(30);

/// The OpenTelemetry variables of a program: spans to `endpoint` (`None`:
/// no endpoint variable at all, everything else set), sent in batches
/// every `batch_delay`.
fn otel(command: &mut Command, endpoint: Option<&str>, batch_delay: Duration) {
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_TRACES_SAMPLER",
    ] {
        command.env_remove(name);
    }
    command.env(
        "OTEL_BSP_SCHEDULE_DELAY",
        batch_delay.as_millis().to_string(),
    );
    if let Some(endpoint) = endpoint {
        command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
}

/// A built scheduler and worker (shell allowed) on one NATS server.
struct Chime {
    nats: NatsServer,
    scheduler: ChimeProcess,
    worker: ChimeProcess,
    client: Client,
}

impl Chime {
    async fn start(database_url: &str, endpoint: Option<&str>, batch_delay: Duration) -> Chime {
        let nats = NatsServer::start().await;
        let mut command = Binary::Scheduler.command();
        command.args([
            "--nats-url",
            &nats.url(),
            "--database-url",
            database_url,
            "--metrics-addr",
            "127.0.0.1:0",
            "--replica-id",
            "traced",
        ]);
        otel(&mut command, endpoint, batch_delay);
        let mut scheduler = ChimeProcess::spawn(command);
        scheduler
            .wait_for_log_line("chime-scheduler ready", WAIT)
            .await;
        let mut command = Binary::Worker.command();
        command.args([
            "--nats-url",
            &nats.url(),
            "--allow-shell",
            "--threads",
            "4",
            "--metrics-addr",
            "127.0.0.1:0",
            "--worker-id",
            "traced-worker",
            "--drain-grace",
            "2s",
        ]);
        otel(&mut command, endpoint, batch_delay);
        let mut worker = ChimeProcess::spawn(command);
        worker.wait_for_log_line("chime-worker ready", WAIT).await;
        let client = Client::new(nats.connect().await);
        Chime {
            nats,
            scheduler,
            worker,
            client,
        }
    }

    /// Puts a shell job `id` with `schedule` that writes its `TRACEPARENT` to `file`.
    async fn put_job(&self, id: &str, schedule: Value, file: &Path) {
        self.client
            .put_job(&json!({
                "id": id,
                "schedule": schedule,
                "handler": "shell",
                "payload": {"argv": ["sh", "-c", "printf %s \"$TRACEPARENT\" > \"$0\"", file]},
            }))
            .await
            .expect("put");
    }

    /// Waits until every firing of `job` ended `succeeded` (at least `count`).
    async fn succeeded(&self, job: &str, count: usize) -> Vec<chime_common::Firing> {
        until_ok(WAIT, "the runs to succeed", || async {
            let firings = firings_of(&self.client, job).await;
            let done = firings
                .iter()
                .filter(|f| f.state == FiringState::Succeeded)
                .count();
            if done >= count && done == firings.len() {
                Ok(firings)
            } else {
                Err(format!("{firings:?}"))
            }
        })
        .await
    }

    /// Stops both programs as SIGTERM does.
    async fn stop(&mut self) {
        self.worker.terminate(WAIT).await;
        self.scheduler.terminate(WAIT).await;
    }
}

/// The `TRACEPARENT` a job wrote to `file`, once it did.
async fn traceparent_in(file: &Path) -> TraceParent {
    let text = until_ok(WAIT, "the job's TRACEPARENT", || async {
        match std::fs::read_to_string(file) {
            Ok(text) if !text.is_empty() => Ok(text),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    text.parse()
        .unwrap_or_else(|e| panic!("TRACEPARENT {text:?} is not valid: {e}"))
}

/// The one span named `name` among `spans`.
fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let named: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "one {name} span: {spans:#?}");
    named[0]
}

/// Waits until `receiver` holds spans named `names` in trace `trace_id`.
async fn spans_of(receiver: &OtlpReceiver, trace_id: &str, names: &[&str]) -> Vec<ReceivedSpan> {
    until_ok(WAIT, "the run's spans", || async {
        let spans = receiver.trace(trace_id);
        let missing: Vec<&&str> = names
            .iter()
            .filter(|name| !spans.iter().any(|s| s.name == **name))
            .collect();
        if missing.is_empty() {
            Ok(spans)
        } else {
            Err(format!(
                "missing {missing:?}; the receiver has {:#?}",
                receiver.spans()
            ))
        }
    })
    .await
}

backend_tests! {
    /// (a) A trace given to `jobs.trigger` is the job's `TRACEPARENT`, and
    /// every span of the run, the scheduler's and the worker's, is in it,
    /// one tree under the caller's span.
    async fn a_trigger_s_trace_reaches_the_job_and_every_span(db: TestDatabase) {
        let receiver = OtlpReceiver::start().await;
        let mut chime =
            Chime::start(&db.url(), Some(&receiver.endpoint()), Duration::from_millis(100)).await;
        let dir = tempfile::tempdir().expect("a directory");
        let file = dir.path().join("traceparent");
        chime.put_job("traced", json!({"every": "1h"}), &file).await;
        let firing_id = chime
            .client
            .trigger(&TriggerRequest {
                id: "traced".into(),
                payload: None,
                traceparent: Some(GIVEN.into()),
            })
            .await
            .expect("trigger");

        let seen = traceparent_in(&file).await;
        assert_eq!(seen.trace_id_hex(), GIVEN_TRACE);
        let spans = spans_of(&receiver, GIVEN_TRACE, &RUN_SPANS).await;
        let span = |name| one(&spans, name);
        for name in RUN_SPANS {
            let expected = if name == "handler" { "chime-worker" } else { "chime-scheduler" };
            assert_eq!(span(name).service, expected, "{name}");
            assert_eq!(span(name).attribute("chime.firing.id"), Some(firing_id.as_str()), "{name}");
            assert_eq!(span(name).attribute("chime.job.id"), Some("traced"), "{name}");
            assert_eq!(span(name).attribute("chime.firing.attempt"), Some("1"), "{name}");
            assert!(!span(name).error, "{name}");
            assert!(span(name).start_unix_nano <= span(name).end_unix_nano, "{name}");
        }
        for name in ["published", "started", "handler", "finished"] {
            assert_eq!(span(name).attribute("chime.group"), Some("default"), "{name}");
        }
        assert_eq!(span("handler").attribute("chime.outcome"), Some("succeeded"));
        assert_eq!(span("finished").attribute("chime.outcome"), Some("succeeded"));
        assert_eq!(span("started").attribute("chime.worker.id"), Some("traced-worker"));
        // One tree: the caller's span, the request, then the firing's steps.
        assert_eq!(span("trigger").parent_span_id, GIVEN_SPAN);
        assert_eq!(span("staged").parent_span_id, span("trigger").span_id);
        assert_eq!(span("published").parent_span_id, span("staged").span_id);
        for name in ["started", "handler", "finished"] {
            assert_eq!(span(name).parent_span_id, span("published").span_id, "{name}");
        }
        assert_eq!(
            hex(&seen.parent_id),
            span("handler").span_id,
            "the job's own spans are children of the handler span"
        );
        assert!(receiver.refused().is_empty(), "{:?}", receiver.refused());
        assert!(chime.scheduler.log().contains("exporting spans over OTLP"));
        assert!(chime.worker.log().contains("exporting spans over OTLP"));
        chime.stop().await;
        drop(chime.nats);
    }
}

/// (b) A scheduled firing, given no trace, gets a valid one of its own,
/// derived from its instant, and its spans share it; with a batch delay
/// longer than the test, they are sent when the programs exit gracefully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_firing_has_a_trace_of_its_own_sent_at_exit() {
    let receiver = OtlpReceiver::start().await;
    let db = SqliteDatabase::create();
    let mut chime = Chime::start(
        &db.url(),
        Some(&receiver.endpoint()),
        Duration::from_secs(600),
    )
    .await;
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("traceparent");
    let at = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(3);
    chime
        .put_job("scheduled", json!({"at": at.to_rfc3339()}), &file)
        .await;

    let seen = traceparent_in(&file).await;
    let id = FiringId::new("scheduled", at.timestamp_millis(), 1);
    let derived = FiringTrace::of(&id, None);
    assert_eq!(seen.trace_id, derived.trace_id, "the instant's trace");
    assert!(seen.sampled());
    let firings = chime.succeeded("scheduled", 1).await;
    assert_eq!(firings[0].id, id);
    assert_eq!(
        receiver.requests(),
        0,
        "nothing sent before the batch delay or the exit"
    );

    chime.stop().await;
    let trace = hex(&derived.trace_id);
    let names = ["staged", "published", "started", "handler", "finished"];
    let spans = spans_of(&receiver, &trace, &names).await;
    assert!(spans.iter().all(|s| s.name != "trigger"), "{spans:#?}");
    assert_eq!(one(&spans, "staged").parent_span_id, "", "the root");
    assert_eq!(hex(&seen.parent_id), one(&spans, "handler").span_id);
    let all = receiver.spans();
    let id_text = id.to_string();
    let of_firing: Vec<&ReceivedSpan> = all
        .iter()
        .filter(|s| s.attribute("chime.firing.id") == Some(id_text.as_str()))
        .collect();
    assert!(of_firing.len() >= names.len(), "{of_firing:#?}");
    assert!(
        of_firing.iter().all(|s| s.trace_id == trace),
        "one trace: {of_firing:#?}"
    );
}

/// (c) A malformed `traceparent` is `invalid_argument` naming the field,
/// and triggers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_is_refused_and_triggers_nothing() {
    let db = SqliteDatabase::create();
    let chime = Chime::start(&db.url(), None, Duration::from_millis(100)).await;
    let dir = tempfile::tempdir().expect("a directory");
    chime
        .put_job("traced", json!({"every": "1h"}), &dir.path().join("x"))
        .await;
    let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let zero_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
    let long = "9".repeat(10_000);
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",
        "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        zero_trace,
        zero_parent,
        long.as_str(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\u{e9}",
    ] {
        let error = chime
            .client
            .trigger(&TriggerRequest {
                id: "traced".into(),
                payload: None,
                traceparent: Some(bad.into()),
            })
            .await
            .expect_err(bad);
        assert_eq!(error.code, ErrorCode::InvalidArgument, "{bad:?}: {error:?}");
        assert_eq!(
            error.field.as_deref(),
            Some("traceparent"),
            "{bad:?}: {error:?}"
        );
    }
    let error = chime
        .client
        .call_json(
            chime_common::api::Verb::JobsTrigger,
            &json!({"id": "traced", "traceparent": 7}),
        )
        .await
        .expect_err("a number is no traceparent");
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    assert_eq!(error.field.as_deref(), Some("traceparent"), "{error:?}");
    assert!(
        firings_of(&chime.client, "traced").await.is_empty(),
        "nothing was triggered"
    );
}

/// (d) Without `OTEL_EXPORTER_OTLP_ENDPOINT` nothing is exported: a
/// receiver on the OTLP default address (where an exporter built without
/// the variable would send) sees no request while a firing runs, nor when
/// the programs exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_sent() {
    let receiver = until_ok(WAIT, "the OTLP default port 4318", || async {
        OtlpReceiver::start_on("127.0.0.1:4318".parse().expect("an address"))
            .await
            .ok_or_else(|| "taken".to_string())
    })
    .await;
    let db = SqliteDatabase::create();
    let mut chime = Chime::start(&db.url(), None, Duration::from_millis(50)).await;
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("traceparent");
    chime.put_job("quiet", json!({"every": "1h"}), &file).await;
    chime
        .client
        .trigger(&TriggerRequest {
            id: "quiet".into(),
            payload: None,
            traceparent: Some(GIVEN.into()),
        })
        .await
        .expect("trigger");
    let seen = traceparent_in(&file).await;
    assert_eq!(
        seen.trace_id_hex(),
        GIVEN_TRACE,
        "the trace is passed on still"
    );
    chime.succeeded("quiet", 1).await;
    // Ten batch delays: an exporter would have sent by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    chime.stop().await;
    assert_eq!(receiver.requests(), 0, "{:#?}", receiver.spans());
    assert!(!chime.scheduler.log().contains("exporting spans"));
    assert!(!chime.worker.log().contains("exporting spans"));
}

/// A collector that accepts connections and never answers costs spans,
/// never a firing: runs start and finish as promptly as without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_slows_no_firing() {
    let black_hole = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", black_hole.local_addr().expect("address"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = black_hole.accept().await {
            held.push(socket);
        }
    });
    let db = SqliteDatabase::create();
    let chime = Chime::start(&db.url(), Some(&endpoint), Duration::from_millis(20)).await;
    let dir = tempfile::tempdir().expect("a directory");
    chime
        .put_job("patient", json!({"every": "1h"}), &dir.path().join("x"))
        .await;
    let runs = 6;
    for _ in 0..runs {
        chime
            .client
            .trigger_job("patient", None)
            .await
            .expect("trigger");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let firings = chime.succeeded("patient", runs).await;
    for firing in &firings {
        let started = firing.started_at.expect("started");
        let finished = firing.finished_at.expect("finished");
        let late = (started - firing.scheduled_at).to_std().unwrap_or_default();
        assert!(
            late < Duration::from_secs(3),
            "started {late:?} late: {firing:?}"
        );
        let took = (finished - started).to_std().unwrap_or_default();
        assert!(took < Duration::from_secs(3), "ran {took:?}: {firing:?}");
    }
}

/// A one-shot job submitted on `chime.submit` with a `traceparent` header
/// keeps its trace; a malformed header is ignored (the job is applied,
/// its firing in a trace of its own); a recurring job's firings never
/// keep a submission's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_one_shot_job_keeps_the_submission_s_trace() {
    let receiver = OtlpReceiver::start().await;
    let db = SqliteDatabase::create();
    let chime = Chime::start(
        &db.url(),
        Some(&receiver.endpoint()),
        Duration::from_millis(100),
    )
    .await;
    let js = async_nats::jetstream::new(chime.nats.connect().await);
    let dir = tempfile::tempdir().expect("a directory");
    let at = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(3);
    let at_text = at.to_rfc3339();
    for (id, schedule, header) in [
        ("kept", json!({"at": at_text}), GIVEN),
        ("malformed", json!({"at": at_text}), "00-not-a-trace"),
        ("recurring", json!({"every": "2s"}), GIVEN),
    ] {
        let file = dir.path().join(id);
        let spec = json!({
            "id": id,
            "schedule": schedule,
            "handler": "shell",
            "payload": {"argv": ["sh", "-c", "printf %s \"$TRACEPARENT\" > \"$0\"", file]},
        });
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", header);
        js.publish_with_headers("chime.submit", headers, spec.to_string().into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
    let kept = traceparent_in(&dir.path().join("kept")).await;
    assert_eq!(kept.trace_id_hex(), GIVEN_TRACE, "the submission's trace");
    let malformed = traceparent_in(&dir.path().join("malformed")).await;
    let instant = FiringId::new("malformed", at.timestamp_millis(), 1);
    assert_eq!(
        malformed.trace_id,
        FiringTrace::of(&instant, None).trace_id,
        "the instant's own trace"
    );
    let recurring = traceparent_in(&dir.path().join("recurring")).await;
    assert_ne!(recurring.trace_id_hex(), GIVEN_TRACE, "a trace per instant");

    let names = [
        "put",
        "staged",
        "published",
        "started",
        "handler",
        "finished",
    ];
    let spans = spans_of(&receiver, GIVEN_TRACE, &names).await;
    let puts: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "put").collect();
    assert_eq!(
        puts.len(),
        2,
        "both submissions that carried it: {spans:#?}"
    );
    assert!(puts.iter().all(|s| s.parent_span_id == GIVEN_SPAN));
    let kept_put = puts
        .iter()
        .find(|s| s.attribute("chime.job.id") == Some("kept"))
        .expect("the one-shot job's put");
    assert_eq!(one(&spans, "staged").parent_span_id, kept_put.span_id);
    assert_eq!(one(&spans, "handler").span_id, hex(&kept.parent_id));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
