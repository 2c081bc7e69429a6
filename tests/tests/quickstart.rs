//! The newcomer's first command: `./deploy/local/run.sh` starts NATS, a
//! scheduler on SQLite with the web console, a worker and example jobs,
//! prints the console's address, which shows them firing, and leaves
//! nothing running when it stops.

use chime_tests::{free_port, Binary};
use std::path::Path;
use std::time::Duration;

/// The open console's token, given to run.sh so the test can use the API.
const TOKEN: &str = "quickstart-test-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_shows_jobs_firing_and_cleans_up() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/run.sh");
    let bin_dir = Binary::Scheduler
        .path()
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let port = free_port();
    let http_port = free_port();
    let run = tokio::process::Command::new("bash")
        .arg(&script)
        .env("CHIME_RUN_FOR", "15")
        .env("CHIME_BIN_DIR", &bin_dir)
        .env("CHIME_LOCAL_NATS_PORT", port.to_string())
        .env("CHIME_LOCAL_HTTP_PORT", http_port.to_string())
        .env("CHIME_HTTP_OPEN_TOKEN", TOKEN)
        .env("CHIME_NATS_SERVER", chime_tests::nats_server_binary())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs");

    // While it runs, the console answers the holder of its token without
    // login, and its API shows the example jobs' firings succeeding.
    let console = format!("http://127.0.0.1:{http_port}");
    let http = reqwest::Client::new();
    chime_tests::eventually(
        Duration::from_secs(60),
        "the console shows firings",
        || async {
            let page = match http.get(format!("{console}/")).send().await {
                Ok(page) => page.text().await.unwrap_or_default(),
                Err(_) => return false,
            };
            let firings = match http
                .get(format!("{console}/api/v1/firings?state=succeeded"))
                .bearer_auth(TOKEN)
                .send()
                .await
            {
                Ok(reply) => reply.text().await.unwrap_or_default(),
                Err(_) => return false,
            };
            page.contains("<title>Chime</title>") && firings.contains("\"job_id\":\"heartbeat\"")
        },
    )
    .await;

    let output = tokio::time::timeout(Duration::from_secs(120), run.wait_with_output())
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
        stdout.contains(&format!("the console: {console}/?token={TOKEN}")),
        "the console's address is printed:\n{stdout}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "NATS on port {port} is gone after the script"
    );
}
