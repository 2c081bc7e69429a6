//! One scheduler per SQLite file: a second scheduler started on the file a
//! running one holds exits non-zero and names the holder, before it opens
//! the database; once the holder is killed -9, the next one starts. A
//! second scheduler on PostgreSQL with the first one's metrics address is
//! told which setting to change.

use chime_tests::{free_port, Binary, ChimeProcess, NatsServer, PgDatabase};
use std::time::Duration;

fn scheduler(nats: &str, database: &str, replica: &str, metrics: &str) -> ChimeProcess {
    let mut command = Binary::Scheduler.command();
    command
        .args(["--nats-url", nats, "--database-url", database])
        .args(["--metrics-addr", metrics, "--replica-id", replica]);
    ChimeProcess::spawn(command)
}

fn metrics_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_scheduler_on_an_sqlite_file_exits_naming_the_one_that_holds_it() {
    let nats = NatsServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/chime.db?mode=rwc", dir.path().display());

    let mut first = scheduler(&nats.url(), &database, "first", &metrics_addr());
    first
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(60))
        .await;

    let mut second = scheduler(&nats.url(), &database, "second", &metrics_addr());
    let status = second.wait(Duration::from_secs(60)).await;
    assert!(
        !status.success(),
        "a second scheduler ran: {}",
        second.log()
    );
    let log = second.log();
    assert!(
        log.contains("is held by another scheduler (replica first, pid"),
        "the refusal does not name the holder: {log}"
    );
    assert!(!log.contains("chime-scheduler ready"), "{log}");

    // kill -9 leaves no stale lock behind: the kernel drops it with the process.
    first.kill9();
    let mut third = scheduler(&nats.url(), &database, "third", &metrics_addr());
    third
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(60))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_metrics_address_is_named_with_the_setting_to_change() {
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let shared = metrics_addr();

    let mut first = scheduler(&nats.url(), db.url(), "first", &shared);
    first
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(60))
        .await;
    let mut second = scheduler(&nats.url(), db.url(), "second", &shared);
    let status = second.wait(Duration::from_secs(60)).await;
    assert!(!status.success(), "{}", second.log());
    let log = second.log();
    assert!(
        log.contains(&format!("cannot serve metrics on {shared}"))
            && log.contains("--metrics-addr / CHIME_METRICS_ADDR"),
        "the refusal does not say which setting to change: {log}"
    );
}
