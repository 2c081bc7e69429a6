//! Every NATS authentication method, with the real programs against real
//! nats-servers that require it: the scheduler, the
//! worker and chimectl connect with user and password (flags, environment,
//! inside the URL), a token (flag, inside the URL) and an nkey seed file;
//! no secret reaches a log line or an error message; a `tls://` URL refuses
//! a server without TLS.

use chime_tests::{Binary, ChimeProcess, NatsOptions, NatsServer, ProbeAuth, SqliteDatabase};
use std::process::Command;
use std::time::Duration;

const PASSWORD: &str = "pw-Sekret-7c1e";
const TOKEN: &str = "tok-Sekret-93ab";
const PROBE_PASSWORD: &str = "probe-Sekret-51f0";

/// One way to authenticate: the server's configuration and what each
/// program is given.
struct Method {
    name: &'static str,
    config: String,
    probe: ProbeAuth,
    /// `--nats-url` with `{port}` for the server's port.
    url: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// Strings that must appear in no output.
    secrets: Vec<String>,
}

fn user_password_config() -> String {
    format!(r#"authorization {{ users = [ {{ user: chime, password: "{PASSWORD}" }} ] }}"#)
}

fn methods(seed_file: &str, seed: &str, public_key: &str) -> Vec<Method> {
    let probe = ProbeAuth::UserPassword("chime".into(), PASSWORD.into());
    vec![
        Method {
            name: "user and password flags",
            config: user_password_config(),
            probe: probe.clone(),
            url: "nats://127.0.0.1:{port}",
            args: vec![
                "--nats-user".into(),
                "chime".into(),
                "--nats-password".into(),
                PASSWORD.into(),
            ],
            env: vec![],
            secrets: vec![PASSWORD.into()],
        },
        Method {
            name: "user and password in the environment",
            config: user_password_config(),
            probe: probe.clone(),
            url: "nats://127.0.0.1:{port}",
            args: vec![],
            env: vec![
                ("CHIME_NATS_USER", "chime".into()),
                ("CHIME_NATS_PASSWORD", PASSWORD.into()),
            ],
            secrets: vec![PASSWORD.into()],
        },
        Method {
            name: "user and password inside the URL",
            config: user_password_config(),
            probe,
            url: "nats://chime:pw-Sekret-7c1e@127.0.0.1:{port}",
            args: vec![],
            env: vec![],
            secrets: vec![PASSWORD.into()],
        },
        Method {
            name: "token flag",
            config: format!(r#"authorization {{ token: "{TOKEN}" }}"#),
            probe: ProbeAuth::Token(TOKEN.into()),
            url: "nats://127.0.0.1:{port}",
            args: vec!["--nats-token".into(), TOKEN.into()],
            env: vec![],
            secrets: vec![TOKEN.into()],
        },
        Method {
            name: "token inside the URL",
            config: format!(r#"authorization {{ token: "{TOKEN}" }}"#),
            probe: ProbeAuth::Token(TOKEN.into()),
            url: "nats://tok-Sekret-93ab@127.0.0.1:{port}",
            args: vec![],
            env: vec![],
            secrets: vec![TOKEN.into()],
        },
        Method {
            name: "nkey seed file",
            config: format!(
                r#"authorization {{ users = [ {{ nkey: "{public_key}" }}, {{ user: probe, password: "{PROBE_PASSWORD}" }} ] }}"#
            ),
            probe: ProbeAuth::UserPassword("probe".into(), PROBE_PASSWORD.into()),
            url: "nats://127.0.0.1:{port}",
            args: vec!["--nats-nkey".into(), seed_file.into()],
            env: vec![],
            secrets: vec![seed.into()],
        },
    ]
}

fn configure(command: &mut Command, method: &Method, url: &str) {
    command.args(["--nats-url", url]).args(&method.args);
    for (name, value) in &method.env {
        command.env(name, value);
    }
    command.env("RUST_LOG", "debug");
}

fn assert_no_secret(method: &Method, what: &str, text: &str) {
    for secret in &method.secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{}: a secret reached {what}:\n{text}",
            method.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_program_connects_with_every_method_and_logs_no_secret() {
    chime_tests::init_tracing();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key = nkeys::KeyPair::new_user();
    let seed = key.seed().expect("a user key has a seed");
    let seed_file = dir.path().join("chime.nk");
    std::fs::write(&seed_file, format!("{seed}\n")).expect("seed file");
    for method in methods(&seed_file.display().to_string(), &seed, &key.public_key()) {
        let nats = NatsServer::start_with(NatsOptions {
            config: Some(method.config.clone()),
            probe_auth: Some(method.probe.clone()),
            ..Default::default()
        })
        .await;
        let url = method.url.replace("{port}", &nats.port().to_string());
        let db = SqliteDatabase::create();

        let mut command = Binary::Scheduler.command();
        command.args(["--database-url", &db.url(), "--metrics-addr", "127.0.0.1:0"]);
        configure(&mut command, &method, &url);
        let mut scheduler = ChimeProcess::spawn(command);
        scheduler
            .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
            .await;

        let mut command = Binary::Worker.command();
        command.args(["--metrics-addr", "127.0.0.1:0", "--threads", "1"]);
        configure(&mut command, &method, &url);
        let mut worker = ChimeProcess::spawn(command);
        worker
            .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
            .await;

        let mut command = Binary::Ctl.command();
        command.arg("workers");
        configure(&mut command, &method, &url);
        let out = command.output().expect("chimectl runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: chimectl: {stderr}", method.name);
        assert!(stdout.contains("default"), "{}: {stdout}", method.name);

        assert_no_secret(&method, "chimectl's output", &format!("{stdout}{stderr}"));
        assert_no_secret(&method, "the scheduler's log", &scheduler.log());
        assert_no_secret(&method, "the worker's log", &worker.log());
        worker.terminate(Duration::from_secs(10)).await;
        scheduler.terminate(Duration::from_secs(15)).await;
    }
}

#[tokio::test]
async fn a_refused_credential_is_named_without_the_secret() {
    let nats = NatsServer::start_with(NatsOptions {
        config: Some(user_password_config()),
        probe_auth: Some(ProbeAuth::UserPassword("chime".into(), PASSWORD.into())),
        ..Default::default()
    })
    .await;
    let wrong = "wrong-Sekret-0d4f";
    let url = format!("nats://chime:{wrong}@127.0.0.1:{}", nats.port());
    let out = Binary::Ctl
        .command()
        .args(["--nats-url", &url, "list"])
        .output()
        .expect("chimectl runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("chime:***@127.0.0.1"), "{stderr}");
    assert!(stderr.to_lowercase().contains("author"), "{stderr}");
    assert!(!stderr.contains(wrong), "{stderr}");

    let db = SqliteDatabase::create();
    let mut command = Binary::Scheduler.command();
    command.args([
        "--nats-url",
        &url,
        "--database-url",
        &db.url(),
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    command.env("RUST_LOG", "debug");
    let mut scheduler = ChimeProcess::spawn(command);
    let status = scheduler.wait(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = scheduler.log();
    assert!(log.contains("chime:***@127.0.0.1"), "{log}");
    assert!(!log.contains(wrong), "{log}");
}

#[tokio::test]
async fn a_tls_url_requires_tls() {
    let nats = NatsServer::start().await;
    let url = format!("tls://127.0.0.1:{}", nats.port());
    let out = Binary::Ctl
        .command()
        .args(["--nats-url", &url, "list"])
        .output()
        .expect("chimectl runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "connected without TLS: {stderr}");
    assert!(stderr.to_lowercase().contains("tls"), "{stderr}");
}
