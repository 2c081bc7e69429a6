//! A program connected to a nats-server older than 2.11, or to one without
//! JetStream, exits non-zero with a message that names the server's
//! version: Debian bookworm's own nats-server (2.9) on one side, the
//! harness's nats-server with JetStream left off on the other. Both the
//! scheduler and the worker binaries are run as a user runs them.

use chime_tests::{free_port, nats_server_binary, Binary};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Debian's packaged nats-server, older than Chime supports.
fn debian_nats_server() -> PathBuf {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect(
            "Debian's nats-server package (2.9) is needed for this test: \
             apt-get install nats-server (deploy/local/test.sh installs it)",
        )
}

/// A nats-server child process, killed when dropped.
struct Server {
    child: Child,
    url: String,
    _storage: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `binary` on a free port, with JetStream when `jetstream`, and
/// waits until it accepts connections.
fn start(binary: &Path, jetstream: bool) -> Server {
    let storage = tempfile::tempdir().expect("a storage directory");
    let port = free_port();
    let mut command = Command::new(binary);
    command
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if jetstream {
        command.arg("-js").arg("-sd").arg(storage.path());
    }
    let child = command.spawn().expect("nats-server starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nats-server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Server {
        child,
        url: format!("nats://127.0.0.1:{port}"),
        _storage: storage,
    }
}

/// Runs `binary` against `url` and returns what it printed once it exited
/// on its own (a minute at most).
fn run(binary: Binary, url: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("a working directory");
    let mut child = Command::new(binary.path())
        .current_dir(dir.path())
        .env("CHIME_NATS_URL", url)
        .env("CHIME_NATS_CONNECT_WAIT", "5s")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("its output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("its output");
            panic!(
                "{} did not exit against {url}: {}",
                binary.name(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scheduler_args() -> Vec<&'static str> {
    vec![
        "--metrics-addr",
        "127.0.0.1:0",
        "--database-url",
        "sqlite://chime.db",
    ]
}

fn worker_args() -> Vec<&'static str> {
    vec!["--metrics-addr", "127.0.0.1:0"]
}

/// Asserts `output` is a non-zero exit whose message contains `says`.
fn refused(output: &Output, says: &str) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "exited 0: {text}");
    assert!(
        text.contains(says),
        "the message does not say {says:?}: {text}"
    );
}

#[test]
fn the_scheduler_and_the_worker_refuse_debians_nats_server_naming_its_version() {
    let server = start(&debian_nats_server(), true);
    let version = String::from_utf8(
        Command::new(debian_nats_server())
            .arg("--version")
            .output()
            .expect("nats-server --version")
            .stdout,
    )
    .expect("utf-8");
    // "nats-server: v2.9.10" names "2.9.10" in the refusal.
    let version = version
        .trim()
        .trim_start_matches("nats-server: v")
        .to_string();
    assert!(version.starts_with("2."), "{version}");
    let says = format!("is nats-server {version}; Chime needs 2.11 or newer");
    refused(
        &run(Binary::Scheduler, &server.url, &scheduler_args()),
        &says,
    );
    refused(&run(Binary::Worker, &server.url, &worker_args()), &says);
}

#[test]
fn the_scheduler_and_the_worker_refuse_a_nats_server_without_jetstream() {
    let server = start(nats_server_binary(), false);
    let says = "with JetStream off";
    refused(
        &run(Binary::Scheduler, &server.url, &scheduler_args()),
        says,
    );
    refused(&run(Binary::Worker, &server.url, &worker_args()), says);
}
