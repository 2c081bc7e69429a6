//! Concurrency limits end to end: a job's
//! `max_concurrent` with a bounded queue, a group's `max_concurrent` across
//! two workers, a group's `max_per_second`, and the limits holding while a
//! replica is killed. Real NATS, both databases, the built scheduler and
//! worker running `shell` jobs that write when each run starts and ends.

use chime_common::client::Client;
use chime_common::{Firing, FiringState};
use chime_tests::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A shell payload that appends `start <ms> <firing>` and `end <ms>
/// <firing>` lines to `log` around `sleep seconds`.
fn logged_run(log: &Path, seconds: &str) -> Value {
    let log = log.display();
    json!({"argv": ["/bin/sh", "-c", format!(
        "echo \"start $(date +%s%3N) $CHIME_FIRING_ID\" >> {log}; sleep {seconds}; \
         echo \"end $(date +%s%3N) $CHIME_FIRING_ID\" >> {log}"
    )]})
}

/// The runs `log` recorded, by firing id: (start ms, end ms if it ended).
fn runs(log: &Path) -> BTreeMap<String, (i64, Option<i64>)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = BTreeMap::new();
    let mut ends = std::collections::HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [kind, ms, id] = parts[..] {
            let ms: i64 = ms.parse().expect("a millisecond timestamp");
            match kind {
                "start" => {
                    assert!(
                        starts.insert(id.to_string(), ms).is_none(),
                        "{id} ran twice"
                    );
                }
                "end" => {
                    ends.insert(id.to_string(), ms);
                }
                _ => panic!("unexpected line {line:?}"),
            }
        }
    }
    starts
        .into_iter()
        .map(|(id, start)| {
            let end = ends.get(&id).copied();
            (id, (start, end))
        })
        .collect()
}

/// The most runs of `log` that were running at one moment (an end at the
/// same millisecond as a start counts first).
fn most_at_once(runs: &BTreeMap<String, (i64, Option<i64>)>) -> usize {
    let mut events: Vec<(i64, i32)> = Vec::new();
    for (start, end) in runs.values() {
        events.push((*start, 1));
        events.push((end.unwrap_or(i64::MAX), -1));
    }
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// The most of `starts` (ms, sorted) inside any window of `window_ms`.
fn most_in_window(starts: &[i64], window_ms: i64) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, t) in starts.iter().enumerate() {
        while starts[first] <= t - window_ms {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

/// Waits until every firing of `jobs` is final and there are `expected`
/// instants in all; returns them.
async fn all_final(client: &Client, jobs: &[&str], expected: usize) -> Vec<Firing> {
    let what = format!("every firing of {jobs:?} final");
    until_ok(Duration::from_secs(90), &what, || async {
        let mut all = Vec::new();
        for job in jobs {
            all.extend(firings_of(client, job).await);
        }
        if all.len() >= expected && all.iter().all(|f| f.state.is_final()) {
            Ok(all)
        } else {
            Err(format!("{all:?}"))
        }
    })
    .await
}

backend_tests! {
    /// `max_concurrent: 3` with `overlap: queue` and `queue_limit: 2`: a 2 s
    /// job every 500 ms never runs more than 3 at once, never holds more
    /// than 2, and skips the rest naming the full queue.
    async fn a_job_runs_at_most_max_concurrent_and_bounds_its_queue(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let mut scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
        let _worker = start_worker(&nats.url(), "default", 8, "w1").await;
        let client = Client::new(nats.connect().await);
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("runs.log");
        let start = aligned_start(Duration::from_secs(2));
        client
            .put_job(&json!({
                "id": "q", "handler": "shell", "payload": logged_run(&log, "2"),
                "schedule": {"every": "500ms", "start_at": rfc3339(start), "count": 16},
                "overlap": "queue", "max_concurrent": 3, "queue_limit": 2,
            }))
            .await
            .expect("put");

        // The queue's length, watched until every instant was decided.
        let most_held = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        eventually(Duration::from_secs(60), "the 16 instants decided", || {
            let client = client.clone();
            let most_held = most_held.clone();
            async move {
                let group = client.get_group("default").await.expect("groups.get");
                most_held.fetch_max(group.held, std::sync::atomic::Ordering::Relaxed);
                let all = firings_of(&client, "q").await;
                all.len() == 16
                    && all.iter().all(|f| f.state.is_final() || f.state == FiringState::Executing)
            }
        })
        .await;
        let most_held = most_held.load(std::sync::atomic::Ordering::Relaxed);
        let all = all_final(&client, &["q"], 16).await;
        let ran = runs(&log);
        println!("ran {} of 16, at most {} at once, at most {most_held} held", ran.len(), most_at_once(&ran));
        assert_eq!(most_at_once(&ran), 3, "three at once, never more");
        assert!(most_held <= 2, "the queue held {most_held}");
        let skipped: Vec<&Firing> = all.iter().filter(|f| f.state == FiringState::Skipped).collect();
        assert!(!skipped.is_empty(), "a 2 s job every 500 ms overflows the queue");
        for f in &skipped {
            assert_eq!(f.error.as_deref(), Some("overlap: the queue is full (queue_limit 2)"));
        }
        let succeeded = all.iter().filter(|f| f.state == FiringState::Succeeded).count();
        assert_eq!(succeeded + skipped.len(), 16, "nothing else: {all:?}");
        assert_eq!(succeeded, ran.len());
        scheduler.terminate(Duration::from_secs(10)).await;
    }

    /// A group limit of 5 holds across two workers of 8 threads, for three
    /// jobs that together would run 9 at once; every instant still runs.
    async fn a_group_limit_holds_across_workers_and_loses_nothing(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let mut scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
        let _w1 = start_worker(&nats.url(), "db", 8, "w1").await;
        let _w2 = start_worker(&nats.url(), "db", 8, "w2").await;
        let client = Client::new(nats.connect().await);
        let (code, reply, stderr) = chimectl_json(
            &nats.url(),
            &["group", "put", "db", "--max-concurrent", "5"],
        )
        .await;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(reply["group"]["max_concurrent"], 5);
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("runs.log");
        let start = aligned_start(Duration::from_secs(2));
        for id in ["a", "b", "c"] {
            client
                .put_job(&json!({
                    "id": id, "group": "db", "handler": "shell",
                    "payload": logged_run(&log, "1.5"),
                    "schedule": {"every": "500ms", "start_at": rfc3339(start), "count": 8},
                }))
                .await
                .expect("put");
        }
        let all = all_final(&client, &["a", "b", "c"], 24).await;
        let ran = runs(&log);
        println!("ran {} of 24, at most {} at once", ran.len(), most_at_once(&ran));
        assert!(all.iter().all(|f| f.state == FiringState::Succeeded), "{all:?}");
        assert_eq!(ran.len(), 24);
        assert_eq!(most_at_once(&ran), 5, "five at once, never more");
        let (_, listed, _) = chimectl_json(&nats.url(), &["group", "list"]).await;
        assert_eq!(listed["groups"][0]["name"], "db", "{listed}");
        assert_eq!(listed["groups"][0]["held"], 0, "{listed}");
        scheduler.terminate(Duration::from_secs(10)).await;
    }

    /// `max_per_second: 10`: 45 quick firings due over 3 s start no more
    /// than 10 in any window of the store's 1.05 s by the scheduler's start
    /// times, and all of them run, each once and after its start. By the
    /// handlers' own start times no one-second window holds more than 10
    /// while the handlers' delays after their starts differ by at most the
    /// 50 ms margin (docs/API.md); under load they may differ by more, and
    /// then the handlers' count says nothing about the limit.
    async fn a_group_rate_limit_holds_in_every_second(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let mut scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
        let _worker = start_worker(&nats.url(), "api", 16, "w1").await;
        let client = Client::new(nats.connect().await);
        client
            .put_group(&json!({"name": "api", "max_per_second": 10}))
            .await
            .expect("groups.put");
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("runs.log");
        let start = aligned_start(Duration::from_secs(2));
        for id in ["a", "b", "c"] {
            client
                .put_job(&json!({
                    "id": id, "group": "api", "handler": "shell",
                    "payload": logged_run(&log, "0"),
                    "schedule": {"every": "200ms", "start_at": rfc3339(start), "count": 15},
                }))
                .await
                .expect("put");
        }
        let all = all_final(&client, &["a", "b", "c"], 45).await;
        assert!(all.iter().all(|f| f.state == FiringState::Succeeded), "{all:?}");
        let ran = runs(&log);
        assert_eq!(ran.len(), 45);
        let mut decided = Vec::new();
        let mut handled = Vec::new();
        let mut delays = Vec::new();
        for f in &all {
            let at = f.started_at.expect("started").timestamp_millis();
            let (handler_at, _) = ran[&f.id.to_string()];
            assert!(handler_at >= at, "{} ran at {handler_at}, before its start at {at}", f.id);
            decided.push(at);
            handled.push(handler_at);
            delays.push(handler_at - at);
        }
        decided.sort_unstable();
        handled.sort_unstable();
        let delay_spread = delays.iter().max().unwrap() - delays.iter().min().unwrap();
        println!(
            "45 starts over {} ms; most in 1.05 s decided: {}; most in one second by the \
             handlers: {}, their delays after the start differing by up to {delay_spread} ms",
            decided[44] - decided[0],
            most_in_window(&decided, 1050),
            most_in_window(&handled, 1000)
        );
        assert!(most_in_window(&decided, 1050) <= 10);
        if delay_spread <= 50 {
            assert!(most_in_window(&handled, 1000) <= 10);
        }
        assert!(decided[44] - decided[0] >= 4000, "45 starts at 10 a second take over 4 s");
        scheduler.terminate(Duration::from_secs(10)).await;
    }
}

/// Limits hold while the replicas deciding starts are killed: two
/// schedulers on PostgreSQL, a group limit of 2 saturated by four jobs; one
/// replica is killed mid-run and another started. Never more than 2 run,
/// and every instant still runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_while_a_replica_is_killed() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut r1 = start_scheduler(&nats.url(), db.url(), "r1").await;
    let mut r2 = start_scheduler(&nats.url(), db.url(), "r2").await;
    let _worker = start_worker(&nats.url(), "db", 8, "w1").await;
    let client = Client::new(nats.connect().await);
    client
        .put_group(&json!({"name": "db", "max_concurrent": 2}))
        .await
        .expect("groups.put");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("runs.log");
    let start = aligned_start(Duration::from_secs(2));
    let jobs = ["a", "b", "c", "d"];
    for id in jobs {
        client
            .put_job(&json!({
                "id": id, "group": "db", "handler": "shell",
                "payload": logged_run(&log, "0.5"),
                "schedule": {"every": "1s", "start_at": rfc3339(start), "count": 6},
            }))
            .await
            .expect("put");
    }
    eventually(Duration::from_secs(30), "firings held by the limit", || {
        let client = client.clone();
        async move { client.get_group("db").await.expect("groups.get").held > 0 }
    })
    .await;
    r1.kill9();
    let _r3 = start_scheduler(&nats.url(), db.url(), "r3").await;
    let all = all_final(&client, &jobs, 24).await;
    let ran = runs(&log);
    println!(
        "ran {} of 24 across a replica kill, at most {} at once",
        ran.len(),
        most_at_once(&ran)
    );
    assert!(
        all.iter().all(|f| f.state == FiringState::Succeeded),
        "{all:?}"
    );
    assert_eq!(ran.len(), 24);
    assert_eq!(most_at_once(&ran), 2);
    r2.terminate(Duration::from_secs(10)).await;
}

/// A firing a limit holds shows which one in `firings.list` (`held_by`,
/// `held_since`) and in `chimectl history`, not only `published`: the
/// group's `max_concurrent` for one, the job's own for another; once it
/// runs, it says so no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_firing_says_which_limit_holds_it() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let mut scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
    let _worker = start_worker(&nats.url(), "db", 8, "w1").await;
    let client = Client::new(nats.connect().await);
    client
        .put_group(&json!({"name": "db", "max_concurrent": 1}))
        .await
        .expect("groups.put");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("runs.log");
    for id in ["first", "second"] {
        client
            .put_job(&json!({"id": id, "group": "db", "handler": "shell",
                "payload": logged_run(&log, "4"), "schedule": {"every": "24h"}}))
            .await
            .expect("put");
    }
    client.trigger_job("first", None).await.expect("trigger");
    eventually(Duration::from_secs(20), "first runs", || async {
        firings_of(&client, "first")
            .await
            .iter()
            .any(|f| f.state == FiringState::Executing)
    })
    .await;
    client.trigger_job("second", None).await.expect("trigger");
    let held = until_ok(Duration::from_secs(20), "second is held", || async {
        let all = firings_of(&client, "second").await;
        match all.first() {
            Some(f) if f.held_by.is_some() => Ok(f.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(held.state, FiringState::Published);
    assert_eq!(held.held_by, Some(chime_common::HeldBy::GroupMaxConcurrent));
    assert!(held.held_since.is_some(), "{held:?}");
    let listed = chimectl_ok(&nats, &["history", "second"]);
    assert_eq!(
        listed["firings"][0]["held_by"], "group_max_concurrent",
        "{listed}"
    );
    let mut command = Binary::Ctl.command();
    command.args(["--nats-url", &nats.url(), "history", "second"]);
    let output = command.output().expect("chimectl runs");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("held by group_max_concurrent since"),
        "{table}"
    );

    // The job's own limit: a queued second run of one job.
    client
        .put_group(&json!({"name": "db"}))
        .await
        .expect("the group limit removed");
    client
        .put_job(&json!({"id": "queued", "group": "db", "handler": "shell",
            "payload": logged_run(&log, "4"), "schedule": {"every": "24h"},
            "overlap": "queue"}))
        .await
        .expect("put");
    client.trigger_job("queued", None).await.expect("trigger");
    eventually(Duration::from_secs(20), "queued runs", || async {
        firings_of(&client, "queued")
            .await
            .iter()
            .any(|f| f.state == FiringState::Executing)
    })
    .await;
    let waiting = client.trigger_job("queued", None).await.expect("trigger");
    let held = until_ok(
        Duration::from_secs(20),
        "the second run is held",
        || async {
            let all = firings_of(&client, "queued").await;
            match all.iter().find(|f| f.id.to_string() == waiting) {
                Some(f) if f.held_by.is_some() => Ok(f.clone()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(held.held_by, Some(chime_common::HeldBy::JobMaxConcurrent));

    // Once they have run, nothing holds them.
    let all = all_final(&client, &["second", "queued"], 3).await;
    assert!(
        all.iter()
            .all(|f| f.state == FiringState::Succeeded && f.held_by.is_none()),
        "{all:?}"
    );
    scheduler.terminate(Duration::from_secs(10)).await;
}
