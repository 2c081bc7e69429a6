//! The guarantees, shown with real processes: built `chime-scheduler` and
//! `chime-worker` binaries, a real nats-server, PostgreSQL and SQLite, and a
//! chaos task that kills them.
//!
//! Each scenario checks, for every due instant of a mixed load (cron, every
//! and at jobs across two groups): it ran to a recorded final state; no
//! attempt was run twice (every run appends its firing id to a file); and it
//! prints the counts (instants, kills, re-queues, raw re-publishes that
//! JetStream's dedup absorbed).

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::schedule::{Schedule, ScheduleSpec};
use chime_common::{Firing, FiringState};
use chime_tests::*;
use chime_tests::{init_tracing, ChimeProcess, NatsServer, PgDatabase, Proxy, SqliteDatabase};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A chaos cast: schedulers and workers that can be killed and replaced.
struct Cast {
    nats_url: String,
    database_url: String,
    runs_file: PathBuf,
    schedulers: Vec<ChimeProcess>,
    workers: Vec<(String, ChimeProcess)>,
    started: usize,
}

impl Cast {
    fn new(nats_url: String, database_url: String, runs_file: PathBuf) -> Cast {
        Cast {
            nats_url,
            database_url,
            runs_file,
            schedulers: Vec::new(),
            workers: Vec::new(),
            started: 0,
        }
    }

    async fn scheduler(&mut self) -> ChimeProcess {
        self.started += 1;
        start_scheduler(
            &self.nats_url,
            &self.database_url,
            &format!("scheduler-{}", self.started),
        )
        .await
    }

    async fn worker(&mut self, group: &str) -> ChimeProcess {
        self.started += 1;
        start_worker(
            &self.nats_url,
            group,
            8,
            &format!("worker-{}", self.started),
        )
        .await
    }
}

/// The shell payload every job runs: record the firing id, then work a little.
fn payload(runs: &Path) -> Value {
    json!({"argv": ["sh", "-c", format!("echo \"$CHIME_FIRING_ID\" >> {}; sleep 0.3", runs.display())]})
}

/// The mixed load: every-second jobs, two-second jobs, a cron job, one-shots.
fn load(runs: &Path, start_ms: i64, seconds: i64) -> Vec<Value> {
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

/// Every instant each job is due in [from, until).
fn due_instants(
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

async fn all_firings(
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

/// Counts raw publishes per message id, as a core subscriber sees them
/// (JetStream's dedup drops a second copy from the stream, not from the wire).
fn watch_publishes(nats: async_nats::Client) -> Arc<Mutex<HashMap<String, usize>>> {
    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let sink = seen.clone();
    tokio::spawn(async move {
        let Ok(mut sub) = nats.subscribe("chime.fire.>").await else {
            return;
        };
        while let Some(message) = sub.next().await {
            if let Some(id) = message.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                *sink.lock().unwrap().entry(id.to_string()).or_insert(0) += 1;
            }
        }
    });
    seen
}

struct Verdict {
    instants: usize,
    requeued: usize,
    republished: usize,
}

/// Waits until every due instant's last attempt is final, then checks the guarantees.
async fn verify(
    client: &Client,
    jobs: &[Value],
    due: &[(String, i64)],
    runs_file: &Path,
    seen: &Arc<Mutex<HashMap<String, usize>>>,
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
    // No attempt ran twice.
    let runs = std::fs::read_to_string(runs_file).unwrap_or_default();
    let mut ran: HashMap<&str, usize> = HashMap::new();
    for line in runs.lines().filter(|l| !l.is_empty()) {
        *ran.entry(line).or_insert(0) += 1;
    }
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "attempts that ran twice: {twice:?}");
    // Nothing succeeded without running, and every run belongs to a recorded attempt.
    let ids: HashSet<String> = firings.iter().map(|f| f.id.to_string()).collect();
    for f in firings.iter().filter(|f| f.state == FiringState::Succeeded) {
        assert!(
            ran.contains_key(f.id.to_string().as_str()),
            "{} succeeded without a run",
            f.id
        );
    }
    for id in ran.keys() {
        assert!(ids.contains(*id), "run {id} has no history row");
    }
    let republished = seen.lock().unwrap().values().filter(|n| **n > 1).count();
    Verdict {
        instants: wanted.len(),
        requeued: firings
            .iter()
            .filter(|f| f.state == FiringState::Lost)
            .count(),
        republished,
    }
}

async fn put_all(client: &Client, jobs: &[Value]) -> chrono::DateTime<chrono::Utc> {
    let at = chrono::Utc::now();
    for job in jobs {
        client.put_job(job).await.expect("put");
    }
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_postgres_every_instant_final_no_attempt_twice() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url().to_string(), runs.clone());
    for _ in 0..3 {
        let s = cast.scheduler().await;
        cast.schedulers.push(s);
    }
    for group in ["alpha", "beta", "alpha"] {
        let w = cast.worker(group).await;
        cast.workers.push((group.to_string(), w));
    }
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let seconds = 60;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&cast.runs_file, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;

    let (mut scheduler_kills, mut worker_kills) = (0, 0);
    let chaos_start = tokio::time::Instant::now();
    let mut tick = 0u64;
    while chaos_start.elapsed() < Duration::from_secs(seconds as u64) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        tick += 5;
        if tick.is_multiple_of(10) {
            let i = (rand_index(tick) % cast.schedulers.len() as u64) as usize;
            cast.schedulers[i].kill9();
            scheduler_kills += 1;
            let s = cast.scheduler().await;
            cast.schedulers[i] = s;
        }
        if tick.is_multiple_of(15) {
            let i = (rand_index(tick * 7) % cast.workers.len() as u64) as usize;
            cast.workers[i].1.kill9();
            worker_kills += 1;
            let group = cast.workers[i].0.clone();
            let w = cast.worker(&group).await;
            cast.workers[i].1 = w;
        }
    }
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    println!(
        "chaos on PostgreSQL: {} instants, {} scheduler kills, {} worker kills, {} attempts re-queued (lost), {} raw re-publishes absorbed by dedup",
        verdict.instants, scheduler_kills, worker_kills, verdict.requeued, verdict.republished
    );
    assert!(scheduler_kills >= 5 && worker_kills >= 3);
    for s in &mut cast.schedulers {
        s.terminate(Duration::from_secs(20)).await;
    }
    for (_, w) in &mut cast.workers {
        w.terminate(Duration::from_secs(20)).await;
    }
}

/// A cheap deterministic "random" index, so a failing run can be repeated.
fn rand_index(seed: u64) -> u64 {
    seed.wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_on_sqlite_with_one_scheduler() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url(), runs.clone());
    let s = cast.scheduler().await;
    cast.schedulers.push(s);
    for group in ["alpha", "beta"] {
        let w = cast.worker(group).await;
        cast.workers.push((group.to_string(), w));
    }
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let seconds = 30;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    let (mut scheduler_kills, mut worker_kills) = (0, 0);
    for tick in [8u64, 16, 24] {
        // 200 ms past the second, when the load's runs are in flight.
        tokio::time::sleep(Duration::from_millis(
            (start_ms + tick as i64 * 1000 + 200 - chrono::Utc::now().timestamp_millis()).max(0)
                as u64,
        ))
        .await;
        let i = (tick as usize / 8) % cast.workers.len();
        cast.workers[i].1.kill9();
        worker_kills += 1;
        let group = cast.workers[i].0.clone();
        let w = cast.worker(&group).await;
        cast.workers[i].1 = w;
        if tick == 16 {
            cast.schedulers[0].kill9();
            scheduler_kills += 1;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let s = cast.scheduler().await;
            cast.schedulers[0] = s;
        }
    }
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    println!(
        "chaos on SQLite: {} instants, {} scheduler kills, {} worker kills, {} attempts re-queued (lost), {} raw re-publishes absorbed by dedup",
        verdict.instants, scheduler_kills, worker_kills, verdict.requeued, verdict.republished
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_mid_run_loses_nothing() {
    init_tracing();
    let mut nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url().to_string(), runs.clone());
    let s = cast.scheduler().await;
    cast.schedulers.push(s);
    for group in ["alpha", "beta"] {
        let w = cast.worker(group).await;
        cast.workers.push((group.to_string(), w));
    }
    let seconds = 24;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = {
        let client = Client::new(nats.connect().await);
        put_all(&client, &jobs).await
    };
    tokio::time::sleep(Duration::from_millis(
        (start_ms + 8_000 - chrono::Utc::now().timestamp_millis()).max(0) as u64,
    ))
    .await;
    nats.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    nats.restart().await;
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection);
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    let firings = all_firings(&client, &jobs).await.expect("firings");
    let succeeded = firings
        .iter()
        .filter(|f| f.state == FiringState::Succeeded)
        .count();
    println!(
        "NATS restart: {} instants, {} succeeded attempts, {} re-queued",
        verdict.instants, succeeded, verdict.requeued
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_does_not_need_a_scheduler_restart() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let upstream: std::net::SocketAddr = "127.0.0.1:5432".parse().expect("addr");
    let proxy = Proxy::start(upstream).await;
    let proxied = db
        .url()
        .replace("127.0.0.1:5432", &proxy.addr().to_string())
        .replace("localhost:5432", &proxy.addr().to_string());
    assert_ne!(
        proxied,
        db.url(),
        "the test database URL goes through 127.0.0.1:5432"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), proxied, runs.clone());
    let s = cast.scheduler().await;
    cast.schedulers.push(s);
    for group in ["alpha", "beta"] {
        let w = cast.worker(group).await;
        cast.workers.push((group.to_string(), w));
    }
    let client = Client::new(nats.connect().await);
    let seconds = 20;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    tokio::time::sleep(Duration::from_millis(
        (start_ms + 6_000 - chrono::Utc::now().timestamp_millis()).max(0) as u64,
    ))
    .await;
    proxy.cut();
    let during = client
        .put_job(&json!({"id": "during-outage", "schedule": {"every": "1h"}, "handler": "shell"}))
        .await;
    assert_eq!(
        during.expect_err("the store is down").code,
        chime_common::ErrorCode::Unavailable
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.unblock();
    // The same process serves again.
    eventually(Duration::from_secs(20), "the scheduler serves puts again", || {
        let client = client.clone();
        async move { client.put_job(&json!({"id": "after-outage", "schedule": {"every": "1h"}, "handler": "shell"})).await.is_ok() }
    })
    .await;
    let due = due_instants(&jobs, put_at, start_ms, start_ms + seconds * 1000);
    let seen = Arc::default();
    let verdict = verify(&client, &jobs, &due, &runs, &seen, Duration::from_secs(90)).await;
    assert!(
        cast.schedulers[0].try_status().is_none(),
        "the scheduler was never restarted"
    );
    println!(
        "PostgreSQL outage of 4 s: {} instants all final, {} re-queued",
        verdict.instants, verdict.requeued
    );
}
