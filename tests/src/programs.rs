//! The built scheduler and worker, started the way the end-to-end suites
//! run them and returned once they say they are ready.

use std::time::Duration;

/// Starts a built `chime-scheduler` as `replica_id` (metrics on a free port)
/// and waits until it is ready.
pub async fn start_scheduler(
    nats_url: &str,
    database_url: &str,
    replica_id: &str,
) -> crate::ChimeProcess {
    start_scheduler_with(nats_url, database_url, replica_id, &[]).await
}

/// Like [`start_scheduler`], with `extra` arguments appended
/// (`--stream-replicas 3` on a cluster, shorter timings).
pub async fn start_scheduler_with(
    nats_url: &str,
    database_url: &str,
    replica_id: &str,
    extra: &[String],
) -> crate::ChimeProcess {
    let mut command = crate::Binary::Scheduler.command();
    command.args([
        "--nats-url",
        nats_url,
        "--database-url",
        database_url,
        "--metrics-addr",
        "127.0.0.1:0",
        "--replica-id",
        replica_id,
    ]);
    command.args(extra);
    let mut process = crate::ChimeProcess::spawn(command);
    process
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
        .await;
    process
}

/// Starts a built `chime-worker` of `group` with the shell handler enabled
/// and a 2 s drain grace, and waits until it is ready.
pub async fn start_worker(
    nats_url: &str,
    group: &str,
    threads: u32,
    worker_id: &str,
) -> crate::ChimeProcess {
    let threads = threads.to_string();
    let mut command = crate::Binary::Worker.command();
    command.args([
        "--nats-url",
        nats_url,
        "--group",
        group,
        "--threads",
        &threads,
        "--allow-shell",
        "--metrics-addr",
        "127.0.0.1:0",
        "--worker-id",
        worker_id,
        "--drain-grace",
        "2s",
    ]);
    let mut process = crate::ChimeProcess::spawn(command);
    process
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;
    process
}

/// Runs the built `chimectl --json` with `args` against `nats_url`; returns
/// its exit status, stdout as JSON (null when it printed none) and stderr.
pub async fn chimectl_json(
    nats_url: &str,
    args: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
    let mut command = crate::Binary::Ctl.command();
    command.args(["--nats-url", nats_url, "--json"]).args(args);
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .expect("chimectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), json, stderr)
}

/// `chimectl --json ARGS` against `nats`, run to the end and parsed; a
/// failure fails the test with chimectl's error.
pub fn chimectl_ok(nats: &impl NatsUrl, args: &[&str]) -> serde_json::Value {
    let out = crate::Binary::Ctl
        .command()
        .args(["--nats-url", &nats.client_url(), "--json"])
        .args(args)
        .output()
        .expect("chimectl runs");
    assert!(
        out.status.success(),
        "chimectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("chimectl prints JSON")
}

/// The firings of `job` as `chimectl history` lists them.
pub fn history_json(nats: &impl NatsUrl, job: &str) -> Vec<serde_json::Value> {
    let reply = chimectl_ok(nats, &["history", job]);
    reply["firings"]
        .as_array()
        .or_else(|| reply.as_array())
        .cloned()
        .unwrap_or_default()
}

/// A NATS server or cluster the programs can be pointed at.
pub trait NatsUrl {
    /// What `--nats-url` takes to reach it (every node of a cluster).
    fn client_url(&self) -> String;
}

impl NatsUrl for crate::NatsServer {
    fn client_url(&self) -> String {
        self.url()
    }
}

impl NatsUrl for crate::NatsCluster {
    fn client_url(&self) -> String {
        self.urls()
    }
}
