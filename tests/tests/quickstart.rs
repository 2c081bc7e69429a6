//! The newcomer's first command: `./deploy/local/run.sh` starts NATS, a
//! scheduler on SQLite, a worker and example jobs, shows them firing, and
//! leaves nothing running when it stops.

use chime_tests::{free_port, Binary};
use std::path::Path;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_shows_jobs_firing_and_cleans_up() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/run.sh");
    let bin_dir = Binary::Scheduler
        .path()
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let port = free_port();
    let run = tokio::process::Command::new("bash")
        .arg(&script)
        .env("CHIME_RUN_FOR", "10")
        .env("CHIME_BIN_DIR", &bin_dir)
        .env("CHIME_LOCAL_NATS_PORT", port.to_string())
        .env("CHIME_NATS_SERVER", chime_tests::nats_server_binary())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the quickstart stops by itself")
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "run.sh failed:\n{stdout}\n{stderr}"
    );
    let succeeded = |job: &str| {
        stdout
            .lines()
            .any(|l| l.starts_with(job) && l.contains("succeeded"))
    };
    assert!(succeeded("heartbeat"), "the every-2s job fired:\n{stdout}");
    assert!(succeeded("once"), "the one-shot job fired:\n{stdout}");
    assert!(stdout.contains("stopped; nothing left running"), "{stdout}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "NATS on port {port} is gone after the script"
    );
}
