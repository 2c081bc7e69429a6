//! Helpers shared by the scheduler and end-to-end suites: reading what was
//! really published, and waiting for conditions.

#![allow(dead_code)]

use async_nats::jetstream;
use std::collections::HashMap;
use std::time::Duration;

/// One firing message as it sits in the CHIME_FIRE stream.
#[derive(Debug, Clone)]
pub struct Published {
    pub firing_id: String,
    pub job_id: String,
    pub scheduled_ms: i64,
    pub attempt: u32,
    pub priority: u8,
    pub subject: String,
    /// When JetStream stored it.
    pub stored_ms: i64,
}

/// Every message currently in `stream`, in stream order.
pub async fn read_fire_stream(js: &jetstream::Context, stream: &str) -> Vec<Published> {
    let mut stream = js.get_stream(stream).await.expect("fire stream exists");
    let info = stream.info().await.expect("stream info").state.clone();
    let mut out = Vec::new();
    if info.messages == 0 {
        return out;
    }
    for seq in info.first_sequence..=info.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        let header = |name: &str| {
            message
                .headers
                .get(name)
                .map(|v| v.to_string())
                .unwrap_or_else(|| panic!("firing message {seq} lacks {name}"))
        };
        let firing_id = header("Chime-Firing-Id");
        let parsed: chime_common::FiringId = firing_id.parse().expect("a valid firing id");
        out.push(Published {
            job_id: header("Chime-Job-Id"),
            scheduled_ms: parsed.scheduled_ms,
            attempt: parsed.attempt,
            priority: header("Chime-Priority").parse().expect("priority"),
            subject: message.subject.to_string(),
            stored_ms: (message.time.unix_timestamp_nanos() / 1_000_000) as i64,
            firing_id,
        });
    }
    out
}

/// Counts messages per (job, scheduled instant, attempt).
pub fn count_by_instant(published: &[Published]) -> HashMap<(String, i64, u32), usize> {
    let mut counts = HashMap::new();
    for p in published {
        *counts
            .entry((p.job_id.clone(), p.scheduled_ms, p.attempt))
            .or_insert(0) += 1;
    }
    counts
}

#[allow(unused_imports)]
pub use chime_tests::eventually;

/// The next whole second at least `ahead` from now, in UTC ms.
pub fn aligned_start(ahead: Duration) -> i64 {
    let at = chrono::Utc::now().timestamp_millis() + ahead.as_millis() as i64;
    (at / 1000 + 1) * 1000
}

/// RFC 3339 of UTC ms.
pub fn rfc3339(ms: i64) -> String {
    chime_common::duration::format_time(chime_common::duration::from_millis(ms))
}

/// Sum of a counter in a Prometheus text exposition.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Starts a built `chime-scheduler` as `replica_id` (metrics on a free port)
/// and waits until it is ready.
pub async fn start_scheduler(
    nats_url: &str,
    database_url: &str,
    replica_id: &str,
) -> chime_tests::ChimeProcess {
    let mut command = chime_tests::Binary::Scheduler.command();
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
    let mut process = chime_tests::ChimeProcess::spawn(command);
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
) -> chime_tests::ChimeProcess {
    let threads = threads.to_string();
    let mut command = chime_tests::Binary::Worker.command();
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
    let mut process = chime_tests::ChimeProcess::spawn(command);
    process
        .wait_for_log_line("chime-worker ready", Duration::from_secs(30))
        .await;
    process
}
