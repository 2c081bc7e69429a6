//! The guarantees check shared by the chaos suites: a mixed load whose
//! every run leaves a trace, and a verdict that waits until every due
//! instant of it is final and then checks that no attempt ran twice.
//!
//! A suite puts [`load`] with [`put_all`], breaks things, computes the
//! instants due so far with [`due_instants`] and calls [`verify`]; it may
//! do so after each fault, as the load keeps running.
//!
//! ```ignore
//! let jobs = load(&runs, start_ms, seconds);
//! let put_at = put_all(&client, &jobs).await;
//! // … kill something …
//! let due = due_instants(&jobs, put_at, start_ms, chrono::Utc::now().timestamp_millis());
//! let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(60)).await;
//! ```

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::schedule::{Schedule, ScheduleSpec};
use chime_common::{Firing, FiringState};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{rfc3339, start_scheduler_with, start_worker, ChimeProcess};

/// A chaos cast: schedulers and workers that can be killed and replaced.
pub struct Cast {
    pub nats_url: String,
    pub database_url: String,
    pub runs_file: PathBuf,
    pub schedulers: Vec<ChimeProcess>,
    pub workers: Vec<(String, ChimeProcess)>,
    /// Appended to every scheduler's arguments (`--stream-replicas 3`).
    pub scheduler_args: Vec<String>,
    started: usize,
}

impl Cast {
    /// A cast on `nats_url` (several comma-separated for a cluster) and
    /// `database_url`, whose runs append to `runs_file`.
    pub fn new(nats_url: String, database_url: String, runs_file: PathBuf) -> Cast {
        Cast {
            nats_url,
            database_url,
            runs_file,
            schedulers: Vec::new(),
            workers: Vec::new(),
            scheduler_args: Vec::new(),
            started: 0,
        }
    }

    /// Starts a scheduler with a new replica id; the caller places it.
    pub async fn scheduler(&mut self) -> ChimeProcess {
        self.started += 1;
        start_scheduler_with(
            &self.nats_url,
            &self.database_url,
            &format!("scheduler-{}", self.started),
            &self.scheduler_args,
        )
        .await
    }

    /// Starts a worker of `group` with eight threads; the caller places it.
    pub async fn worker(&mut self, group: &str) -> ChimeProcess {
        self.started += 1;
        start_worker(
            &self.nats_url,
            group,
            8,
            &format!("worker-{}", self.started),
        )
        .await
    }

    /// Starts `schedulers` schedulers and one worker per entry of
    /// `worker_groups`, and places them in the cast.
    pub async fn staff(&mut self, schedulers: usize, worker_groups: &[&str]) {
        for _ in 0..schedulers {
            let s = self.scheduler().await;
            self.schedulers.push(s);
        }
        for group in worker_groups {
            let w = self.worker(group).await;
            self.workers.push((group.to_string(), w));
        }
    }

    /// Ends every scheduler and worker with SIGTERM, each within `timeout`.
    pub async fn terminate_all(&mut self, timeout: Duration) {
        for s in &mut self.schedulers {
            s.terminate(timeout).await;
        }
        for (_, w) in &mut self.workers {
            w.terminate(timeout).await;
        }
    }
}

/// The shell payload every job runs: record the firing id, then work a little.
pub fn payload(runs: &Path) -> Value {
    json!({"argv": ["sh", "-c", format!("echo \"$CHIME_FIRING_ID\" >> {}; sleep 0.3", runs.display())]})
}

/// The mixed load over `seconds` from `start_ms`: every-second jobs in
/// group `alpha`, two-second jobs of high priority in `beta`, a cron job
/// and one-shots spread over the run; every job retries.
pub fn load(runs: &Path, start_ms: i64, seconds: i64) -> Vec<Value> {
    let mut jobs = Vec::new();
    let retry = json!({"max_attempts": 3, "initial": "200ms", "max": "2s", "multiplier": 2.0});
    for i in 0..8 {
        jobs.push(json!({"id": format!("every1-{i}"), "group": "alpha", "handler": "shell", "payload": payload(runs),
            "schedule": {"every": "1s", "start_at": rfc3339(start_ms + i * 50), "count": seconds}, "retry": retry, "timeout": "20s"}));
    }
    for i in 0..4 {
        jobs.push(json!({"id": format!("every2-{i}"), "group": "beta", "handler": "shell", "payload": payload(runs), "priority": 8,
            "schedule": {"every": "2s", "start_at": rfc3339(start_ms + 500 + i * 100), "count": seconds / 2}, "retry": retry, "timeout": "20s"}));
    }
    jobs.push(json!({"id": "cron-5s", "group": "beta", "handler": "shell", "payload": payload(runs),
        "schedule": {"cron": "*/5 * * * * *", "tz": "Europe/Berlin"}, "retry": retry, "timeout": "20s"}));
    for i in 0..6 {
        jobs.push(json!({"id": format!("once-{i}"), "group": "alpha", "handler": "shell", "payload": payload(runs),
            "schedule": {"at": rfc3339(start_ms + 1_000 + i * seconds * 1000 / 6 + 333)}, "retry": retry, "timeout": "20s"}));
    }
    jobs
}

/// Puts every job; returns when they were put (schedules compile from it).
pub async fn put_all(client: &Client, jobs: &[Value]) -> chrono::DateTime<chrono::Utc> {
    let at = chrono::Utc::now();
    // Sixteen in flight, as a deploy applying a directory would: hundreds
    // put one by one on a loaded machine can outlast the lead a test gives
    // its first instant.
    let puts: Vec<_> = futures::stream::iter(jobs)
        .map(|job| client.put_job(job))
        .buffer_unordered(16)
        .collect()
        .await;
    for put in puts {
        put.expect("put");
    }
    at
}

/// Every instant each job is due in [from, until).
pub fn due_instants(
    jobs: &[Value],
    put_at: chrono::DateTime<chrono::Utc>,
    from_ms: i64,
    until_ms: i64,
) -> Vec<(String, i64)> {
    let mut due = Vec::new();
    for job in jobs {
        let spec = ScheduleSpec::from_json(&job["schedule"], "schedule").expect("valid schedule");
        let schedule = Schedule::compile(&spec, put_at).expect("compiles");
        for t in schedule.iter_after(chime_common::duration::from_millis(from_ms - 1)) {
            if t.timestamp_millis() >= until_ms {
                break;
            }
            due.push((
                job["id"].as_str().expect("id").to_string(),
                t.timestamp_millis(),
            ));
        }
    }
    due
}

/// Every firing of `jobs` in history, page by page.
pub async fn all_firings(
    client: &Client,
    jobs: &[Value],
) -> Result<Vec<Firing>, chime_common::ApiError> {
    let mut out = Vec::new();
    for job in jobs {
        let mut after = None;
        loop {
            let page = client
                .list_firings(&ListFiringsRequest {
                    job_id: job["id"].as_str().map(String::from),
                    limit: Some(1000),
                    after: after.clone(),
                    ..Default::default()
                })
                .await?;
            out.extend(page.firings);
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(out)
}

/// Raw publishes per message id, as a core subscriber sees them.
pub type Publishes = Arc<Mutex<HashMap<String, usize>>>;

/// Counts raw publishes per message id (JetStream's dedup drops a second
/// copy from the stream, not from the wire).
pub fn watch_publishes(nats: async_nats::Client) -> Publishes {
    let seen: Publishes = Arc::default();
    let sink = seen.clone();
    tokio::spawn(async move {
        let Ok(mut sub) = nats.subscribe("chime.fire.>").await else {
            return;
        };
        while let Some(message) = sub.next().await {
            if let Some(id) = message.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                *sink
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(id.to_string())
                    .or_insert(0) += 1;
            }
        }
    });
    seen
}

/// What [`verify`] found, for the suite to print.
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    /// Due instants checked.
    pub instants: usize,
    /// Attempts that ran (lines in the runs file).
    pub runs: usize,
    /// Attempts ended `lost` (their worker died) and re-queued.
    pub requeued: usize,
    /// Firing ids published more than once on the wire.
    pub republished: usize,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} instants final, {} runs, {} attempts re-queued (lost), {} raw re-publishes absorbed by dedup",
            self.instants, self.runs, self.requeued, self.republished
        )
    }
}

/// Waits until the last attempt of every instant in `due` is final (at most
/// `settle`), then checks the guarantees: each has a history, no attempt
/// ran twice, nothing succeeded without running, every run belongs to a
/// recorded attempt. May be called while the load keeps running.
pub async fn verify(
    client: &Client,
    jobs: &[Value],
    due: &[(String, i64)],
    runs_file: &Path,
    seen: &Publishes,
    settle: Duration,
) -> Verdict {
    let wanted: HashSet<(String, i64)> = due.iter().cloned().collect();
    let deadline = tokio::time::Instant::now() + settle;
    let firings = loop {
        // Right after a NATS restart the API may not answer yet.
        let firings = match all_firings(client, jobs).await {
            Ok(f) => f,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the API never answered: {e}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut last: HashMap<(String, i64), &Firing> = HashMap::new();
        for f in &firings {
            let key = (f.job_id.clone(), f.scheduled_at.timestamp_millis());
            if last.get(&key).is_none_or(|g| g.attempt < f.attempt) {
                last.insert(key, f);
            }
        }
        let pending: Vec<_> = wanted
            .iter()
            .filter(|k| last.get(*k).is_none_or(|f| !f.state.is_final()))
            .collect();
        if pending.is_empty() {
            break firings;
        }
        if tokio::time::Instant::now() >= deadline {
            let mut examples: Vec<String> = pending
                .iter()
                .map(|k| match last.get(*k) {
                    Some(f) => format!("{} {:?}", f.id, f.state),
                    None => format!("{}@{} (no firing row)", k.0, k.1),
                })
                .collect();
            examples.sort();
            panic!("{} instants not final: {examples:?}", pending.len());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Every instant of the load, in history, exactly as many instants as due.
    let instants: HashSet<(String, i64)> = firings
        .iter()
        .map(|f| (f.job_id.clone(), f.scheduled_at.timestamp_millis()))
        .filter(|k| wanted.contains(k))
        .collect();
    assert_eq!(
        instants.len(),
        wanted.len(),
        "every due instant has a history"
    );
    // Read after listing: a run is appended before its attempt can succeed,
    // so every success listed is in the file.
    let runs = std::fs::read_to_string(runs_file).unwrap_or_default();
    let mut ran: HashMap<&str, usize> = HashMap::new();
    for line in runs.lines().filter(|l| !l.is_empty()) {
        *ran.entry(line).or_insert(0) += 1;
    }
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "attempts that ran twice: {twice:?}");
    for f in firings.iter().filter(|f| f.state == FiringState::Succeeded) {
        assert!(
            ran.contains_key(f.id.to_string().as_str()),
            "{} succeeded without a run",
            f.id
        );
    }
    // A run may belong to an attempt staged after the listing (the load
    // keeps going): list once more before calling it unrecorded.
    let mut ids: HashSet<String> = firings.iter().map(|f| f.id.to_string()).collect();
    if ran.keys().any(|id| !ids.contains(*id)) {
        let again = all_firings(client, jobs)
            .await
            .expect("firings listed again");
        ids.extend(again.iter().map(|f| f.id.to_string()));
    }
    for id in ran.keys() {
        assert!(ids.contains(*id), "run {id} has no history row");
    }
    let republished = seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|n| **n > 1)
        .count();
    Verdict {
        instants: wanted.len(),
        runs: ran.len(),
        requeued: firings
            .iter()
            .filter(|f| f.state == FiringState::Lost)
            .count(),
        republished,
    }
}

/// A cheap deterministic "random" index, so a failing run can be repeated.
pub fn rand_index(seed: u64) -> u64 {
    seed.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33
}
