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
