//! The shipped authorization model (deploy/nats/chime-auth.conf), on a real
//! nats-server: the scheduler, a worker and chimectl run a job with their
//! own users, and each role is held to its subjects. A read-only client
//! lists but cannot put or delete; a submitter can only submit; a worker
//! cannot pull another group's firings, publish firings, report as another
//! worker or read other users' inboxes; no client can publish on
//! `chime.fire.>`, nor make the scheduler publish there for it by naming
//! that subject as a request's reply.

use async_nats::{ConnectOptions, Event};
use chime_tests::{Binary, ChimeProcess, NatsOptions, NatsServer, ProbeAuth, SqliteDatabase};
use futures::StreamExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tokio::sync::mpsc;

/// The role passwords the shipped file reads from variables.
const ROLES: [(&str, &str, &str); 7] = [
    (
        "chime-scheduler",
        "CHIME_NATS_SCHEDULER_PASSWORD",
        "pw-scheduler",
    ),
    (
        "chime-scheduler-replies",
        "CHIME_NATS_SCHEDULER_REPLIES_PASSWORD",
        "pw-scheduler-replies",
    ),
    ("chime-admin", "CHIME_NATS_ADMIN_PASSWORD", "pw-admin"),
    ("chime-viewer", "CHIME_NATS_VIEWER_PASSWORD", "pw-viewer"),
    (
        "chime-submitter",
        "CHIME_NATS_SUBMITTER_PASSWORD",
        "pw-submitter",
    ),
    (
        "worker-default-1",
        "CHIME_NATS_WORKER_DEFAULT_1_PASSWORD",
        "pw-worker-1",
    ),
    (
        "chime-workers-default",
        "CHIME_NATS_WORKERS_DEFAULT_PASSWORD",
        "pw-workers-default",
    ),
];

fn password(user: &str) -> &'static str {
    ROLES
        .iter()
        .find(|(name, _, _)| *name == user)
        .map(|(_, _, password)| *password)
        .unwrap_or_else(|| panic!("no role {user}"))
}

fn auth_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/nats/chime-auth.conf")
}

/// A server configuration: the passwords, then the shipped file's text
/// (nats-server resolves `include` relative to the including file, which
/// the harness writes in a temporary directory).
fn server_config() -> String {
    let mut config = String::new();
    for (_, variable, value) in ROLES {
        config.push_str(&format!("{variable}: \"{value}\"\n"));
    }
    let shipped = std::fs::read_to_string(auth_file()).expect("deploy/nats/chime-auth.conf");
    config.push_str(&shipped);
    config
}

/// Sets a program's NATS user and password. No inbox prefix: a program
/// connecting as a user takes `_INBOX.<user>`, the inboxes the shipped
/// permissions give that user, by itself.
fn as_user(command: &mut Command, nats: &NatsServer, user: &str) {
    command
        .env("CHIME_NATS_URL", nats.url())
        .env("CHIME_NATS_USER", user)
        .env("CHIME_NATS_PASSWORD", password(user))
        .env_remove("CHIME_NATS_INBOX_PREFIX");
}

/// A raw client of `user` whose server errors (permission violations) arrive on the receiver.
async fn client(
    nats: &NatsServer,
    user: &str,
) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = ConnectOptions::new()
        .user_and_password(user.into(), password(user).into())
        .custom_inbox_prefix(format!("_INBOX.{user}"))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let Event::ServerError(error) = event {
                    let _ = tx.send(error.to_string());
                }
            }
        })
        .connect(nats.url())
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"));
    (client, rx)
}

/// Waits for the server to report a permission violation naming `subject`.
async fn assert_violation(errors: &mut mpsc::UnboundedReceiver<String>, who: &str, subject: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let error = tokio::time::timeout_at(deadline, errors.recv())
            .await
            .unwrap_or_else(|_| panic!("{who}: no permission violation for {subject}"))
            .expect("the event channel stays open");
        let lower = error.to_lowercase();
        if lower.contains("permissions violation") && error.contains(subject) {
            return;
        }
    }
}

/// `chimectl ARGS` as `user`; its stdout, or its stderr when it fails.
fn chimectl(nats: &NatsServer, user: &str, args: &[&str]) -> Result<String, String> {
    let mut command = Binary::Ctl.command();
    as_user(&mut command, nats, user);
    command.args(["--json", "--timeout", "3s"]).args(args);
    let out = command.output().expect("chimectl runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn job_file(dir: &std::path::Path, id: &str, argv: &[&str]) -> String {
    let spec = serde_json::json!({
        "id": id,
        "schedule": {"every": "1s"},
        "handler": "shell",
        "payload": {"argv": argv},
    });
    let path = dir.join(format!("{id}.json"));
    std::fs::write(&path, spec.to_string()).expect("job file");
    path.display().to_string()
}

/// A nats-server with the shipped users.
async fn shipped_server() -> NatsServer {
    NatsServer::start_with(NatsOptions {
        config: Some(server_config()),
        probe_auth: Some(ProbeAuth::UserPassword(
            "chime-scheduler".into(),
            password("chime-scheduler").into(),
        )),
        ..Default::default()
    })
    .await
}

/// A scheduler as `chime-scheduler`, answering as `chime-scheduler-replies`.
async fn scheduler(nats: &NatsServer, db: &SqliteDatabase) -> ChimeProcess {
    let mut command = Binary::Scheduler.command();
    command.args(["--database-url", &db.url(), "--metrics-addr", "127.0.0.1:0"]);
    as_user(&mut command, nats, "chime-scheduler");
    command
        .env("CHIME_NATS_REPLY_USER", "chime-scheduler-replies")
        .env(
            "CHIME_NATS_REPLY_PASSWORD",
            password("chime-scheduler-replies"),
        );
    let mut scheduler = ChimeProcess::spawn(command);
    scheduler
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
        .await;
    scheduler
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_its_work_and_nothing_else() {
    chime_tests::init_tracing();
    let nats = shipped_server().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut scheduler = scheduler(&nats, &db).await;

    // The admin puts a job firing every second.
    let marker = dir.path().join("ran");
    let touch = format!("echo ran >> {}", marker.display());
    let file = job_file(dir.path(), "tick", &["sh", "-c", &touch]);
    chimectl(&nats, "chime-admin", &["put", &file]).expect("the admin puts a job");
    // The audit trail names the user whose inbox the answer went to.
    let (admin, _) = client(&nats, "chime-admin").await;
    let audit = admin
        .request("chime.api.v1.audit.list", r#"{"target":"tick"}"#.into())
        .await
        .expect("the admin reads the audit trail");
    let audit: serde_json::Value = serde_json::from_slice(&audit.payload).expect("JSON");
    assert_eq!(audit["entries"][0]["actor"], "nats:chime-admin", "{audit}");
    // And `chimectl audit` shows it, to a viewer too.
    let trail = chimectl(&nats, "chime-viewer", &["audit", "--target", "tick"])
        .expect("the viewer reads the audit trail");
    let trail: serde_json::Value = serde_json::from_str(&trail).expect("JSON");
    assert_eq!(trail["entries"][0]["actor"], "nats:chime-admin", "{trail}");
    assert_eq!(trail["entries"][0]["verb"], "jobs.put", "{trail}");

    // Two workers of group default run it with their own users, one after
    // the other (so each surely gets firings): one with its own user and
    // fixed id, one with the group's user, as a scaled Deployment runs them.
    let mut workers = Vec::new();
    for (user, id) in [
        ("worker-default-1", "worker-default-1"),
        ("chime-workers-default", "scaled-7f9c"),
    ] {
        let mut command = Binary::Worker.command();
        command.args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--threads",
            "2",
            "--allow-shell",
            "--worker-id",
            id,
        ]);
        as_user(&mut command, &nats, user);
        let mut worker = ChimeProcess::spawn(command);
        worker
            .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
            .await;
        worker
            .wait_for_log_line("outcome=\"succeeded\"", Duration::from_secs(20))
            .await;
        worker.terminate(Duration::from_secs(10)).await;
        workers.push(worker);
    }
    let history = chimectl(
        &nats,
        "chime-viewer",
        &["history", "tick", "--limit", "200"],
    )
    .expect("the viewer reads history");
    for id in ["worker-default-1", "scaled-7f9c"] {
        assert!(history.contains(&format!("\"{id}\"")), "{id}: {history}");
    }
    // The viewer reads a firing's output.
    let firings: serde_json::Value = serde_json::from_str(&history).expect("JSON");
    let succeeded = firings["firings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["state"] == "succeeded"))
        .unwrap_or_else(|| panic!("a succeeded firing in {history}"));
    let logs = chimectl(
        &nats,
        "chime-viewer",
        &["logs", succeeded["id"].as_str().expect("an id")],
    )
    .expect("the viewer reads a firing's output");
    let logs: serde_json::Value = serde_json::from_str(&logs).expect("JSON");
    assert_eq!(logs["firing"]["id"], succeeded["id"], "{logs}");

    // A read-only client lists but cannot put or delete.
    let listed = chimectl(&nats, "chime-viewer", &["list"]).expect("the viewer lists");
    assert!(listed.contains("\"tick\""), "{listed}");
    // A viewer sees a payload's digest, never its content.
    let (viewer, _) = client(&nats, "chime-viewer").await;
    let got = viewer
        .request("chime.api.v1.jobs.get", r#"{"id":"tick"}"#.into())
        .await
        .expect("the viewer reads the job");
    let got = String::from_utf8_lossy(&got.payload).into_owned();
    assert!(got.contains("\"redacted\":\"sha256:"), "{got}");
    assert!(!got.contains("echo ran"), "{got}");
    let full = chimectl(&nats, "chime-admin", &["get", "tick"]).expect("the admin reads it");
    assert!(full.contains("echo ran"), "{full}");
    let (viewer, mut viewer_errors) = client(&nats, "chime-viewer").await;
    let spec = std::fs::read(&file).expect("job file");
    let put = viewer.request("chime.api.v1.jobs.put", spec.clone().into());
    assert!(
        tokio::time::timeout(Duration::from_secs(3), put)
            .await
            .map(|reply| reply.is_err())
            .unwrap_or(true),
        "the viewer's put got a reply"
    );
    assert_violation(&mut viewer_errors, "viewer", "chime.api.v1.jobs.put").await;
    viewer
        .publish("chime.api.v1.jobs.delete", r#"{"id":"tick"}"#.into())
        .await
        .expect("publish");
    assert_violation(&mut viewer_errors, "viewer", "chime.api.v1.jobs.delete").await;
    let error = chimectl(&nats, "chime-viewer", &["delete", "tick"]).expect_err("viewer delete");
    assert!(!error.is_empty());
    chimectl(&nats, "chime-admin", &["get", "tick"]).expect("the job is still there");

    // A submitter submits, and does nothing else.
    let (submitter, mut submitter_errors) = client(&nats, "chime-submitter").await;
    let js = async_nats::jetstream::new(submitter.clone());
    let submitted = job_file(dir.path(), "submitted", &["true"]);
    js.publish(
        "chime.submit",
        std::fs::read(&submitted).expect("spec").into(),
    )
    .await
    .expect("the submission is sent")
    .await
    .expect("JetStream stores the submission");
    chime_tests::eventually(
        Duration::from_secs(10),
        "the submitted job exists",
        || async { chimectl(&nats, "chime-admin", &["get", "submitted"]).is_ok() },
    )
    .await;
    submitter
        .publish("chime.api.v1.jobs.list", "{}".into())
        .await
        .expect("publish");
    assert_violation(&mut submitter_errors, "submitter", "chime.api.v1.jobs.list").await;

    // No client, the admin included, publishes firings.
    for user in [
        "chime-admin",
        "chime-viewer",
        "chime-submitter",
        "worker-default-1",
    ] {
        let (client, mut errors) = client(&nats, user).await;
        client
            .publish("chime.fire.default.normal", "{}".into())
            .await
            .expect("publish");
        assert_violation(&mut errors, user, "chime.fire.default.normal").await;
    }

    // A worker of group default cannot pull group b's firings, report as
    // another worker or another group, or read others' inboxes.
    let (worker, mut worker_errors) = client(&nats, "worker-default-1").await;
    for subject in [
        "$JS.API.CONSUMER.MSG.NEXT.CHIME_FIRE.fire_g_b_normal",
        "chime.worker.v1.start.default.worker-default-2",
        "chime.worker.v1.start.b.worker-default-1",
        "chime.events.finished.default.worker-default-2",
        "chime.worker.v1.start",
        "chime.events.finished",
        "$KV.chime-workers.worker-default-2",
        "$KV.chime-workers.default.worker-default-2",
        "$JS.API.STREAM.DELETE.CHIME_FIRE",
    ] {
        worker.publish(subject, "{}".into()).await.expect("publish");
        assert_violation(&mut worker_errors, "worker", subject).await;
    }
    let _sniffer = worker.subscribe("_INBOX.>").await.expect("subscribe");
    assert_violation(&mut worker_errors, "worker", "_INBOX.>").await;
    let (scaled, mut scaled_errors) = client(&nats, "chime-workers-default").await;
    for subject in [
        "$JS.API.CONSUMER.MSG.NEXT.CHIME_FIRE.fire_g_b_high",
        "chime.worker.v1.start.b.scaled-7f9c",
        "chime.events.finished.b.scaled-7f9c",
        // Another group's heartbeats, and the older keys without a group.
        "$KV.chime-workers.b.scaled-7f9c",
        "$KV.chime-workers.worker-default-1",
    ] {
        scaled.publish(subject, "{}".into()).await.expect("publish");
        assert_violation(&mut scaled_errors, "the group's worker user", subject).await;
    }

    for worker in &workers {
        let log = worker.log();
        assert!(
            !log.to_lowercase().contains("permissions violation"),
            "a worker needed a subject its user lacks:\n{log}"
        );
    }
    scheduler.terminate(Duration::from_secs(15)).await;
    let log = scheduler.log();
    assert!(
        !log.to_lowercase().contains("permissions violation"),
        "the scheduler needed a subject its user lacks:\n{log}"
    );
}

/// Subjects a request may name as its reply hoping the scheduler publishes
/// there with its own rights: a firing subject of a group without workers
/// (fills the firing stream), a future slice claim (stalls that slice), a
/// worker's heartbeat (keeps a dead worker alive) and a JetStream API call.
const BORROWED: [&str; 5] = [
    "chime.fire.zz.normal",
    "chime.fire.default.high",
    "$KV.chime-slices.slice.4102444800000.0",
    "$KV.chime-workers.ghost-worker",
    "$JS.API.STREAM.PURGE.KV_chime-workers",
];

/// As each role, requests that name a subject outside the requester's
/// inbox as their reply are dropped unanswered: nothing reaches those
/// subjects, and the scheduler logs each refusal. The reply user itself
/// may publish to inboxes only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_makes_the_scheduler_publish_outside_an_inbox() {
    chime_tests::init_tracing();
    let nats = shipped_server().await;
    let db = SqliteDatabase::create();
    let mut scheduler = scheduler(&nats, &db).await;

    // The scheduler's own user may read everything: it watches the targets.
    let (watcher, _) = client(&nats, "chime-scheduler").await;
    let mut sniffers = Vec::new();
    for subject in BORROWED {
        sniffers.push(watcher.subscribe(subject).await.expect("subscribe"));
    }
    watcher.flush().await.expect("flush");

    // Each role sends what its user may send, naming a borrowed reply.
    let requests = [
        ("chime-viewer", "chime.api.v1.jobs.list", "{}"),
        ("chime-admin", "chime.api.v1.jobs.get", r#"{"id":"x"}"#),
        (
            "worker-default-1",
            "chime.worker.v1.start.default.worker-default-1",
            r#"{"firing_id":"x@1#1","worker_id":"worker-default-1","group":"default","handler":"shell","payload_sha256":"00"}"#,
        ),
        (
            "chime-workers-default",
            "chime.worker.v1.start.default.scaled-1",
            "{}",
        ),
    ];
    let mut sent = 0;
    for (user, subject, body) in requests {
        let (requester, _) = client(&nats, user).await;
        for reply in BORROWED {
            requester
                .publish_with_reply(subject, reply, body.into())
                .await
                .expect("publish");
            sent += 1;
        }
        requester.flush().await.expect("flush");
    }
    chime_tests::eventually(
        Duration::from_secs(10),
        "the scheduler dropped every request with a borrowed reply",
        || async {
            scheduler
                .log()
                .matches("reply subject is not an inbox")
                .count()
                >= sent
        },
    )
    .await;
    // The same requests with a real inbox are answered: the drops above
    // were the reply check, not a deaf scheduler.
    let (viewer, _) = client(&nats, "chime-viewer").await;
    let answer = viewer
        .request("chime.api.v1.jobs.list", "{}".into())
        .await
        .expect("the viewer's list is answered");
    assert!(
        String::from_utf8_lossy(&answer.payload).contains("jobs"),
        "{answer:?}"
    );
    watcher.flush().await.expect("flush");
    for (subject, sniffer) in BORROWED.iter().zip(&mut sniffers) {
        let leaked = tokio::time::timeout(Duration::from_millis(200), sniffer.next()).await;
        assert!(
            leaked.is_err(),
            "the scheduler published on {subject}: {leaked:?}"
        );
    }

    // Its reply user cannot publish anywhere but an inbox.
    let (replies, mut reply_errors) = client(&nats, "chime-scheduler-replies").await;
    for subject in BORROWED {
        replies
            .publish(subject, "{}".into())
            .await
            .expect("publish");
        assert_violation(&mut reply_errors, "the reply user", subject).await;
    }

    scheduler.terminate(Duration::from_secs(15)).await;
    let log = scheduler.log();
    assert!(
        !log.to_lowercase().contains("permissions violation"),
        "the scheduler needed a subject its users lack:\n{log}"
    );
}
