//! What the scheduler and the worker write when they start normally, as
//! an operator reads it: plain text when the log is not a terminal (no
//! colour codes, whether or not `NO_COLOR` is set), colours on a terminal
//! unless `NO_COLOR` says otherwise, no debug notation such as `Some(…)`
//! in the start-up lines, and no warning: a warning in a normal start is a
//! false alarm that teaches people to ignore warnings.

use chime_tests::{init_tracing, Binary, ChimeProcess, NatsServer, SqliteDatabase};
use std::time::Duration;

/// Whether a log line is at `level` (the text format's level column).
fn at_level(line: &str, level: &str) -> bool {
    line.split_whitespace().nth(1) == Some(level)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_start_logs_plain_lines_and_no_warning() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let mut scheduler = Binary::Scheduler.command();
    scheduler.args(["--nats-url", &nats.url(), "--database-url", &db.url()]);
    scheduler.args(["--metrics-addr", "127.0.0.1:0", "--replica-id", "r1"]);
    // Set, but empty: "not set" (no-color.org); the harness would set it.
    scheduler.env("NO_COLOR", "");
    let mut scheduler = ChimeProcess::spawn(scheduler);
    scheduler
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
        .await;
    // A group no job uses yet: its consumers are made when the worker shows up.
    let mut worker = Binary::Worker.command();
    worker.args([
        "--nats-url",
        &nats.url(),
        "--group",
        "fresh",
        "--worker-id",
        "w1",
    ]);
    worker
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("NO_COLOR", "");
    let mut worker = ChimeProcess::spawn(worker);
    worker
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;

    for (name, log) in [("scheduler", scheduler.log()), ("worker", worker.log())] {
        assert!(
            !log.contains('\u{1b}'),
            "{name} logs colour codes to a file:\n{log}"
        );
        for line in log.lines() {
            assert!(
                !at_level(line, "WARN") && !at_level(line, "ERROR"),
                "{name} warns in a normal start: {line}"
            );
            assert!(!line.contains("Some("), "{name}: {line}");
        }
    }
    let ready = |log: String, what: &str| {
        log.lines()
            .find(|l| l.contains(what))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no {what} line"))
    };
    let line = ready(scheduler.log(), "chime-scheduler ready");
    assert!(
        line.contains(" http=off") && !line.contains("metrics=127.0.0.1:0 "),
        "{line}"
    );
    let line = ready(worker.log(), "chime-worker ready");
    assert!(line.contains("worker_id=w1 group=fresh"), "{line}");
    assert!(
        !line.contains("metrics=127.0.0.1:0 ") && line.contains("metrics=127.0.0.1:"),
        "{line}"
    );
    worker.terminate(Duration::from_secs(10)).await;
    scheduler.terminate(Duration::from_secs(10)).await;
}

/// The worker's log on a terminal (`script` gives it one) while it waits
/// for a NATS server that is not there.
fn on_a_terminal(no_color: Option<&str>) -> Option<String> {
    let worker = Binary::Worker.path();
    let line = format!(
        "{} --nats-url nats://127.0.0.1:1 --nats-connect-wait 1s --metrics-addr off",
        worker.display()
    );
    let mut command = std::process::Command::new("script");
    command
        .args(["-qec", &line, "/dev/null"])
        .env_remove("NO_COLOR");
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let output = command.output().ok()?;
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn colours_are_for_terminals_and_no_color_turns_them_off() {
    let Some(coloured) = on_a_terminal(None) else {
        eprintln!("no `script` here to give the worker a terminal; nothing to check");
        return;
    };
    assert!(coloured.contains("NATS is not reachable yet"), "{coloured}");
    assert!(
        coloured.contains('\u{1b}'),
        "a terminal gets colours: {coloured:?}"
    );
    let plain = on_a_terminal(Some("1")).expect("script ran before");
    assert!(plain.contains("NATS is not reachable yet"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "NO_COLOR=1: {plain:?}");
}
