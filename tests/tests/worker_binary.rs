//! The `chime-worker` binary as users run it: flags and their environment
//! twins, start-up validation, waiting for NATS and for a scheduler to create
//! the NATS objects, the ready line, /metrics, /healthz and /readyz, and a
//! clean exit on SIGTERM.

use chime_common::protocol::{Outcome, WorkerInfo};
use chime_common::Subjects;
use chime_runtime::topology::Topology;
use chime_tests::worker_env::*;
use chime_tests::{eventually, free_port, Binary, ChimeProcess};
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path` on `addr`; returns (status code, body).
async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the metrics address");
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).await.unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_rejects_bad_flags_naming_them() {
    for (args, flag) in [
        (vec!["--threads", "0"], "--threads"),
        (vec!["--group", "no spaces"], "--group"),
        (vec!["--worker-id", "a.b"], "--worker-id"),
        (vec!["--heartbeat-interval", "1m"], "--heartbeat-interval"),
        (vec!["--nats-tls-ca", "/no/such/ca.pem"], "--nats-tls-ca"),
        (vec!["--nats-tls-cert", "/etc/hostname"], "--nats-tls-key"),
        (
            vec![
                "--nats-tls-cert",
                "/no/cert.pem",
                "--nats-tls-key",
                "/no/key.pem",
            ],
            "--nats-tls-cert",
        ),
        (vec!["--nats-connect-wait", "soon"], "--nats-connect-wait"),
        (vec!["--handlers", "shell,ftp"], "--handlers"),
    ] {
        let mut command = Binary::Worker.command();
        command.args(&args);
        let mut worker = ChimeProcess::spawn(command);
        let status = worker.wait(Duration::from_secs(10)).await;
        assert_eq!(status.code(), Some(2), "{args:?}");
        assert!(worker.log().contains(flag), "{args:?}: {}", worker.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_waits_for_a_nats_server_that_is_not_up_yet() {
    let mut nats = chime_tests::NatsServer::start().await;
    nats.stop().await;
    let mut command = Binary::Worker.command();
    command.args(["--nats-url", &nats.url(), "--metrics-addr", "off"]);
    let mut worker = ChimeProcess::spawn(command);
    worker
        .wait_for_log_line("NATS is not reachable yet", Duration::from_secs(10))
        .await;
    assert!(worker.try_status().is_none(), "{}", worker.log());
    nats.restart().await;
    let jetstream = async_nats::jetstream::new(nats.connect().await);
    let topology = Topology::new(jetstream.clone(), Subjects::default(), test_topology());
    topology.ensure().await.expect("topology");
    chime_tests::create_group_consumers(
        &jetstream,
        &topology.subjects,
        &topology.config,
        "default",
    )
    .await;
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(15))
        .await;
    assert!(worker.terminate(Duration::from_secs(15)).await.success());

    // With nothing to wait for, it gives up after the wait, naming the server.
    nats.stop().await;
    let mut command = Binary::Worker.command();
    command.args([
        "--nats-url",
        &nats.url(),
        "--metrics-addr",
        "off",
        "--nats-connect-wait",
        "1s",
    ]);
    let mut worker = ChimeProcess::spawn(command);
    let status = worker.wait(Duration::from_secs(15)).await;
    assert!(!status.success());
    assert!(
        worker
            .log()
            .contains(&format!("cannot connect to NATS at {}", nats.url())),
        "{}",
        worker.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_runs_firings_serves_metrics_and_stops_on_sigterm() {
    let env = Env::start().await;
    env.create_group_consumers("bin").await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut command = Binary::Worker.command();
    command
        .args([
            "--nats-url",
            &env.nats.url(),
            "--metrics-addr",
            &metrics_addr,
            "--threads",
            "2",
        ])
        // Environment twins of flags.
        .env("CHIME_GROUP", "bin")
        .env("CHIME_WORKER_ID", "bin-worker")
        .env("CHIME_ALLOW_SHELL", "true")
        .env("CHIME_DRAIN_GRACE", "5s");
    let mut worker = ChimeProcess::spawn(command);
    let ready = worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;
    assert!(
        ready.contains("bin-worker") && ready.contains("bin"),
        "{ready}"
    );

    let id = env
        .publish(
            &TestFiring::new("bin", "hello", "shell")
                .payload(json!({"argv": ["echo", "hello from the binary"]})),
        )
        .await;
    env.ring("bin").await;
    let event = events.of(&id, Duration::from_secs(15)).await;
    assert_eq!(event.worker_id, "bin-worker");
    assert_eq!(
        (event.outcome, event.output.as_deref()),
        (Outcome::Succeeded, Some("hello from the binary\n"))
    );

    let (status, body) = http_get(&metrics_addr, "/healthz").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_get(&metrics_addr, "/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let (status, body) = http_get(&metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        body.contains(
            r#"chime_worker_firings_total{handler="shell",outcome="succeeded",group="bin"} 1"#
        ),
        "{body}"
    );
    assert!(
        body.contains(r#"chime_worker_threads{group="bin"} 2"#),
        "{body}"
    );

    let kv = env.topology.workers().await.unwrap();
    assert!(kv.get("bin.bin-worker").await.unwrap().is_some());
    let status = worker.terminate(Duration::from_secs(15)).await;
    assert!(status.success(), "{status}\n{}", worker.log());
    assert!(
        kv.get("bin.bin-worker").await.unwrap().is_none(),
        "heartbeat key deleted on SIGTERM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_runs_only_allowed_handlers_and_passes_only_the_named_environment() {
    let env = Env::start().await;
    env.create_group_consumers("policy").await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let mut command = Binary::Worker.command();
    command
        .args(["--nats-url", &env.nats.url(), "--metrics-addr", "off"])
        .args(["--group", "policy", "--allow-shell", "--handlers", "shell"])
        .args(["--shell-env", "PATH,CHIME_TEST_VISIBLE"])
        .env("CHIME_TEST_VISIBLE", "visible")
        .env("CHIME_TEST_HIDDEN", "hidden-s3cret")
        .env("CHIME_NATS_PASSWORD_FILE_HINT", "hidden-too");
    let mut worker = ChimeProcess::spawn(command);
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;

    let shell = env
        .publish(&TestFiring::new("policy", "env", "shell").payload(json!({"argv": ["env"]})))
        .await;
    let http = env
        .publish(
            &TestFiring::new("policy", "web", "http")
                .payload(json!({"url": "http://127.0.0.1:1/"})),
        )
        .await;
    env.ring("policy").await;
    let event = events.of(&shell, Duration::from_secs(15)).await;
    assert_eq!(event.outcome, Outcome::Succeeded, "{event:?}");
    let output = event.output.unwrap_or_default();
    assert!(output.contains("CHIME_TEST_VISIBLE=visible"), "{output}");
    assert!(!output.contains("hidden"), "{output}");
    let event = events.of(&http, Duration::from_secs(15)).await;
    assert_eq!(event.outcome, Outcome::Failed);
    assert!(
        event
            .error
            .as_deref()
            .unwrap_or("")
            .contains("handler not allowed"),
        "{event:?}"
    );
    worker.terminate(Duration::from_secs(15)).await;
}

/// A shell job runs as the worker's user, yet cannot read the worker's NATS
/// credentials from the worker's process: not from `/proc/<pid>/environ`,
/// not from its own environment. The worker runs as `nobody` here, as
/// workers should, since root may read any process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_job_cannot_read_the_workers_credentials() {
    const SECRET: &str = "nats-pa55word-0f9e";
    let env = Env::start().await;
    env.create_group_consumers("secrets").await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let port = env.nats.url().rsplit(':').next().unwrap().to_string();
    let mut command = std::process::Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(Binary::Worker.path())
        .args([
            "--metrics-addr",
            "off",
            "--group",
            "secrets",
            "--allow-shell",
        ])
        // A server without authorization accepts any credentials.
        .env(
            "CHIME_NATS_URL",
            format!("nats://chime:{SECRET}@127.0.0.1:{port}"),
        )
        .current_dir("/");
    let mut worker = ChimeProcess::spawn(command);
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;
    let probe = "cat /proc/$PPID/environ; env; id -u";
    let shell = env
        .publish(
            &TestFiring::new("secrets", "snoop", "shell")
                .payload(json!({"argv": ["sh", "-c", probe]})),
        )
        .await;
    env.ring("secrets").await;
    let event = events.of(&shell, Duration::from_secs(15)).await;
    let seen = format!(
        "{}\n{}",
        event.output.clone().unwrap_or_default(),
        event.error.clone().unwrap_or_default()
    );
    assert!(seen.contains("65534"), "the job ran as nobody: {seen}");
    assert!(
        seen.contains("Permission denied"),
        "the worker's environment was readable: {seen}"
    );
    assert!(!seen.contains(SECRET), "the job read the secret: {seen}");
    worker.terminate(Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_creates_nothing_and_waits_for_a_scheduler_to() {
    chime_tests::init_tracing();
    let nats = chime_tests::NatsServer::start().await;
    let jetstream = async_nats::jetstream::new(nats.connect().await);
    let subjects = Subjects::default();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut command = Binary::Worker.command();
    command.args([
        "--nats-url",
        &nats.url(),
        "--metrics-addr",
        &metrics_addr,
        "--group",
        "late",
        "--worker-id",
        "late-worker",
    ]);
    let mut worker = ChimeProcess::spawn(command);
    worker
        .wait_for_log_line(
            "waiting for a scheduler to create bucket chime-workers",
            Duration::from_secs(15),
        )
        .await;
    let (status, body) = http_get(&metrics_addr, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            "starting: waiting for a scheduler to create bucket chime-workers\n"
        )
    );
    let (status, _) = http_get(&metrics_addr, "/healthz").await;
    assert_eq!(status, 200, "alive while waiting");

    // What a scheduler creates first: streams and buckets, not yet the group's consumers.
    let topology = Topology::new(jetstream.clone(), subjects.clone(), test_topology());
    topology.ensure().await.expect("topology");
    // The worker registers before its consumers exist, so a scheduler learns its group.
    let kv = topology.workers().await.unwrap();
    eventually(
        Duration::from_secs(15),
        "the worker's first heartbeat",
        || async {
            match kv.get("late.late-worker").await {
                Ok(Some(value)) => serde_json::from_slice::<WorkerInfo>(&value)
                    .is_ok_and(|info| info.group == "late"),
                _ => false,
            }
        },
    )
    .await;
    worker
        .wait_for_log_line(
            "waiting for a scheduler to create consumer fire_g_late_high",
            Duration::from_secs(15),
        )
        .await;
    let (status, body) = http_get(&metrics_addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("consumer fire_g_late_high"), "{body}");
    let mut fire = jetstream.get_stream(subjects.fire_stream()).await.unwrap();
    assert_eq!(
        fire.info().await.unwrap().state.consumer_count,
        0,
        "the worker created no consumer"
    );

    chime_tests::create_group_consumers(&jetstream, &subjects, &topology.config, "late").await;
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(15))
        .await;
    let (status, body) = http_get(&metrics_addr, "/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    assert!(worker.terminate(Duration::from_secs(15)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_stops_on_sigterm_while_it_waits() {
    let nats = chime_tests::NatsServer::start().await;
    let mut command = Binary::Worker.command();
    command.args(["--nats-url", &nats.url(), "--metrics-addr", "off"]);
    let mut worker = ChimeProcess::spawn(command);
    worker
        .wait_for_log_line("waiting for a scheduler to create", Duration::from_secs(15))
        .await;
    assert!(worker.terminate(Duration::from_secs(10)).await.success());
    let streams =
        futures::StreamExt::count(async_nats::jetstream::new(nats.connect().await).stream_names())
            .await;
    assert_eq!(streams, 0, "the worker created no stream");
}

/// libfaketime, which shifts a process's wall clock (`FAKETIME`).
fn libfaketime() -> &'static str {
    const CANDIDATES: [&str; 2] = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    ];
    CANDIDATES
        .into_iter()
        .find(|path| std::path::Path::new(path).is_file())
        .expect(
            "this test needs libfaketime: `apt-get install faketime` (./deploy/local/test.sh installs it)",
        )
}

/// The value of the series starting with `series` in a Prometheus text exposition.
fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chime_worker_measures_its_clock_offset_from_jetstream_timestamps() {
    let env = Env::start().await;
    env.create_group_consumers("skewed").await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let mut command = Binary::Worker.command();
    command
        .args([
            "--nats-url",
            &env.nats.url(),
            "--metrics-addr",
            &metrics_addr,
            "--group",
            "skewed",
            "--allow-shell",
        ])
        // The worker's wall clock runs 10 s ahead; its monotonic clock is left alone.
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", "+10s")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    let mut worker = ChimeProcess::spawn(command);
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;
    let id = env
        .publish(&TestFiring::new("skewed", "tick", "shell").payload(json!({"argv": ["true"]})))
        .await;
    env.ring("skewed").await;
    events.of(&id, Duration::from_secs(15)).await;
    let (_, body) = http_get(&metrics_addr, "/metrics").await;
    let offset = metric_value(&body, r#"chime_clock_offset_seconds{group="skewed"}"#)
        .unwrap_or_else(|| panic!("no clock offset in\n{body}"));
    assert!(
        (9.5..12.0).contains(&offset),
        "a clock 10 s ahead measures {offset} s"
    );
    assert!(worker.terminate(Duration::from_secs(15)).await.success());
}
