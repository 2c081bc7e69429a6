//! Between "started" and "done": retries with backoff, overlap policies,
//! misfire after downtime, lost workers, priority order and scheduler
//! restarts with events in flight. Real NATS, real PostgreSQL, real workers.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::protocol::StartRequest;
use chime_common::{Firing, FiringState};
use chime_scheduler::workers::finishes::FinishesConfig;
use chime_scheduler::workers::starts::StartsConfig;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_tests::{init_tracing, NatsServer, PgDatabase};
use chime_worker::{FiringContext, HandlerError, Worker, WorkerHandle};
use chrono::Utc;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

async fn replica(nats: &NatsServer, database_url: &str) -> Replica {
    Replica::start(SchedulerConfig::new(nats.url(), database_url))
        .await
        .expect("replica starts")
}

async fn history(client: &Client, job: &str) -> Vec<Firing> {
    let mut firings = client
        .list_firings(&ListFiringsRequest {
            job_id: Some(job.into()),
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .expect("firings.list")
        .firings;
    firings.sort_by_key(|f| (f.scheduled_at, f.attempt));
    firings
}

/// A span of one handler run, as the handler saw it.
#[derive(Debug, Clone)]
struct Run {
    job: String,
    start: tokio::time::Instant,
    end: Option<tokio::time::Instant>,
    cancelled: bool,
}

type Runs = Arc<Mutex<Vec<Run>>>;

/// A worker whose `sleep` handler sleeps `payload.ms` (cancellable) and records its runs.
async fn sleeping_worker(
    nats: &NatsServer,
    group: &str,
    threads: usize,
    runs: Runs,
) -> WorkerHandle {
    let client = nats.connect().await;
    Worker::builder()
        .nats(client)
        .group(group)
        .threads(threads)
        .handler_fn("sleep", move |ctx: FiringContext| {
            let runs = runs.clone();
            async move {
                let index = {
                    let mut runs = runs.lock().unwrap();
                    runs.push(Run {
                        job: ctx.firing.job_id.clone(),
                        start: tokio::time::Instant::now(),
                        end: None,
                        cancelled: false,
                    });
                    runs.len() - 1
                };
                let ms = ctx
                    .firing
                    .payload
                    .get("ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(100);
                let cancelled = tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => false,
                    _ = ctx.cancel.cancelled() => true,
                };
                let mut runs = runs.lock().unwrap();
                runs[index].end = Some(tokio::time::Instant::now());
                runs[index].cancelled = cancelled;
                if cancelled {
                    return Err(HandlerError::new("cancelled"));
                }
                Ok(None)
            }
        })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker starts")
}

fn max_concurrent(runs: &[Run], job: &str) -> usize {
    let mut events: Vec<(tokio::time::Instant, i32)> = Vec::new();
    for run in runs.iter().filter(|r| r.job == job) {
        events.push((run.start, 1));
        events.push((run.end.unwrap_or_else(tokio::time::Instant::now), -1));
    }
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max) = (0, 0);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    max as usize
}

fn count(firings: &[Firing], state: FiringState) -> usize {
    firings.iter().filter(|f| f.state == state).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_twice_then_succeeding_ends_succeeded_on_attempt_3_with_backoff_delays() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let replica = replica(&nats, db.url()).await;
    let client = Client::new(nats.connect().await);
    let worker = Worker::builder()
        .nats(nats.connect().await)
        .group("flaky")
        .threads(2)
        .handler_fn("flaky", |ctx: FiringContext| async move {
            if ctx.firing.attempt < 3 {
                Err(HandlerError::new(format!(
                    "attempt {} fails",
                    ctx.firing.attempt
                )))
            } else {
                Ok(Some("third time lucky".to_string()))
            }
        })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker");
    let at = aligned_start(Duration::from_secs(2));
    client
        .put_job(&json!({
            "id": "flaky", "group": "flaky", "handler": "flaky",
            "schedule": {"at": rfc3339(at)},
            "retry": {"max_attempts": 3, "initial": "1s", "max": "10s", "multiplier": 2.0}
        }))
        .await
        .expect("put");
    eventually(Duration::from_secs(30), "attempt 3 succeeded", || {
        let client = client.clone();
        async move {
            history(&client, "flaky")
                .await
                .iter()
                .any(|f| f.attempt == 3 && f.state == FiringState::Succeeded)
        }
    })
    .await;
    let firings = history(&client, "flaky").await;
    println!("{firings:#?}");
    assert_eq!(firings.len(), 3);
    assert_eq!(firings[0].state, FiringState::Failed);
    assert_eq!(firings[0].error.as_deref(), Some("attempt 1 fails"));
    assert_eq!(firings[1].state, FiringState::Failed);
    assert_eq!(firings[2].state, FiringState::Succeeded);
    assert_eq!(firings[2].output.as_deref(), Some("third time lucky"));
    // The delays follow the policy: 1 s then 2 s, ±10 % jitter, from the failure to the next attempt's due time.
    for (k, expected_ms) in [(1usize, 1000i64), (2, 2000)] {
        let failed_at = firings[k - 1].finished_at.expect("finished_at");
        let delay = (firings[k].due_at - failed_at).num_milliseconds();
        assert!(
            (expected_ms * 9 / 10 - 20..=expected_ms * 11 / 10 + 20).contains(&delay),
            "retry {k} waited {delay} ms, policy says {expected_ms} ms ±10%"
        );
        let started = firings[k].started_at.expect("started_at");
        let late = (started - firings[k].due_at).num_milliseconds();
        assert!(late < 1_500, "retry {k} started {late} ms after it was due");
    }
    worker.shutdown().await;
    replica.shutdown().await;
}

async fn overlap_scenario(policy: &str) -> (Vec<Firing>, Vec<Run>) {
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let replica = replica(&nats, db.url()).await;
    let client = Client::new(nats.connect().await);
    let runs: Runs = Arc::default();
    let worker = sleeping_worker(&nats, "overlap", 4, runs.clone()).await;
    let start = aligned_start(Duration::from_secs(2));
    let job = format!("overlap-{policy}");
    client
        .put_job(&json!({
            "id": job, "group": "overlap", "handler": "sleep", "payload": {"ms": 3000},
            "schedule": {"every": "1s", "start_at": rfc3339(start), "count": 7},
            "overlap": policy,
        }))
        .await
        .expect("put");
    eventually(
        Duration::from_secs(40),
        "every firing reached a final state",
        || {
            let client = client.clone();
            let job = job.clone();
            async move {
                let firings = history(&client, &job).await;
                firings.len() >= 7 && firings.iter().all(|f| f.state.is_final())
            }
        },
    )
    .await;
    let firings = history(&client, &job).await;
    let runs = runs.lock().unwrap().clone();
    worker.shutdown().await;
    replica.shutdown().await;
    (firings, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_skips_firings_while_the_previous_one_runs() {
    init_tracing();
    let (firings, runs) = overlap_scenario("forbid").await;
    println!(
        "{:?}",
        firings
            .iter()
            .map(|f| (f.scheduled_at, f.state))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        max_concurrent(&runs, "overlap-forbid"),
        1,
        "never two at once"
    );
    assert!(
        count(&firings, FiringState::Skipped) >= 3,
        "firings during a run are skipped"
    );
    assert!(count(&firings, FiringState::Succeeded) >= 2);
    assert!(firings
        .iter()
        .filter(|f| f.state == FiringState::Skipped)
        .all(|f| f.error.as_deref().unwrap_or("").contains("overlap")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_holds_one_pending_firing_and_runs_it_when_the_previous_ends() {
    init_tracing();
    let (firings, runs) = overlap_scenario("queue").await;
    println!(
        "{:?}",
        firings
            .iter()
            .map(|f| (f.scheduled_at, f.state, f.started_at))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        max_concurrent(&runs, "overlap-queue"),
        1,
        "never two at once"
    );
    let queued_then_ran = firings
        .iter()
        .filter(|f| f.state == FiringState::Succeeded)
        .filter(|f| {
            f.started_at
                .is_some_and(|s| (s - f.scheduled_at).num_milliseconds() > 1_500)
        })
        .count();
    assert!(
        queued_then_ran >= 1,
        "a queued firing ran after the previous one ended"
    );
    assert!(
        count(&firings, FiringState::Skipped) >= 1,
        "at most one is held; the rest are skipped"
    );
    // Back to back: each queued run starts soon after the previous run ends.
    let mut spans: Vec<&Run> = runs.iter().collect();
    spans.sort_by_key(|r| r.start);
    for pair in spans.windows(2) {
        let gap = pair[1].start.duration_since(pair[0].end.expect("ended"));
        assert!(
            gap < Duration::from_millis(2_500),
            "queued firing waited {gap:?} after the previous ended"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_cancels_the_running_firing_and_starts_the_new_one() {
    init_tracing();
    let (firings, runs) = overlap_scenario("replace").await;
    println!(
        "{:?}",
        firings
            .iter()
            .map(|f| (f.scheduled_at, f.state))
            .collect::<Vec<_>>()
    );
    assert!(
        count(&firings, FiringState::Cancelled) >= 4,
        "each newer firing cancels the running one"
    );
    assert_eq!(
        firings.last().map(|f| f.state),
        Some(FiringState::Succeeded),
        "the last one runs to the end"
    );
    assert!(
        runs.iter().filter(|r| r.cancelled).count() >= 4,
        "the handlers saw the cancellation"
    );
    assert!(
        max_concurrent(&runs, "overlap-replace") <= 2,
        "old and new overlap only while the old one stops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_is_drained_highest_priority_first() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let replica = replica(&nats, db.url()).await;
    let client = Client::new(nats.connect().await);
    let at = aligned_start(Duration::from_secs(2));
    for (i, priority) in [1, 9, 5, 0, 7, 4, 9, 2, 6, 8, 3, 5].into_iter().enumerate() {
        client
            .put_job(&json!({
                "id": format!("p{priority}-{i}"), "group": "backlog", "handler": "record",
                "priority": priority, "schedule": {"at": rfc3339(at)},
            }))
            .await
            .expect("put");
    }
    let js = async_nats::jetstream::new(nats.connect().await);
    eventually(Duration::from_secs(15), "the backlog is published", || {
        let js = js.clone();
        async move { read_fire_stream(&js, "CHIME_FIRE").await.len() == 12 }
    })
    .await;
    let order: Arc<Mutex<Vec<u8>>> = Arc::default();
    let seen = order.clone();
    let worker = Worker::builder()
        .nats(nats.connect().await)
        .group("backlog")
        .threads(1)
        .handler_fn("record", move |ctx: FiringContext| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(ctx.firing.priority);
                Ok(None)
            }
        })
        .build()
        .expect("config")
        .start()
        .await
        .expect("worker");
    eventually(Duration::from_secs(15), "the backlog is drained", || {
        let order = order.clone();
        async move { order.lock().unwrap().len() == 12 }
    })
    .await;
    let order = order.lock().unwrap().clone();
    println!("run order by priority: {order:?}");
    let bands: Vec<u8> = order
        .iter()
        .map(|p| match p {
            7.. => 2,
            4..=6 => 1,
            _ => 0,
        })
        .collect();
    assert!(
        bands.windows(2).all(|w| w[0] >= w[1]),
        "bands drain high, then normal, then low: {order:?}"
    );
    worker.shutdown().await;
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_ten_seconds_down_each_misfire_policy_does_what_it_says() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let first = replica(&nats, db.url()).await;
    let client = Client::new(nats.connect().await);
    let start = aligned_start(Duration::from_secs(6));
    for policy in ["skip", "fire_once", "fire_all"] {
        client
            .put_job(&json!({
                "id": format!("misfire-{policy}"), "group": "nobody", "handler": "noop",
                "schedule": {"every": "1s", "start_at": rfc3339(start)},
                "misfire": policy, "misfire_threshold": "2s",
            }))
            .await
            .expect("put");
    }
    // Down before the first instant, for ten seconds.
    first.shutdown().await;
    let down_at = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(
        (start + 10_000 - down_at).max(0) as u64
    ))
    .await;
    let second = replica(&nats, db.url()).await;
    eventually(
        Duration::from_secs(15),
        "the missed instants are recorded and fire_all's catch-ups published",
        || async {
            let skipped = history(&client, "misfire-skip").await;
            let Some(last_missed) = skipped
                .iter()
                .filter(|f| f.state == FiringState::Skipped)
                .map(|f| f.scheduled_at.timestamp_millis())
                .max()
            else {
                return false;
            };
            let all = history(&client, "misfire-fire_all").await;
            let caught_up: Vec<_> = all
                .iter()
                .filter(|f| f.scheduled_at.timestamp_millis() <= last_missed)
                .collect();
            caught_up.len() >= 6 && caught_up.iter().all(|f| f.state == FiringState::Published)
        },
    )
    .await;
    // The three jobs are staged in one pass, so one instant is the last one
    // missed by more than the threshold for all of them; which one depends
    // on when that pass ran, so it is read from the skip policy's record.
    let skip_history = history(&client, "misfire-skip").await;
    let last_missed = skip_history
        .iter()
        .filter(|f| f.state == FiringState::Skipped)
        .map(|f| f.scheduled_at.timestamp_millis())
        .max()
        .expect("the skip policy recorded missed instants");
    let missed = |firings: &[Firing]| -> Vec<Firing> {
        firings
            .iter()
            .filter(|f| f.scheduled_at.timestamp_millis() <= last_missed)
            .cloned()
            .collect()
    };
    let skip = missed(&skip_history);
    let once = missed(&history(&client, "misfire-fire_once").await);
    let all = missed(&history(&client, "misfire-fire_all").await);
    println!(
        "missed: skip {} / fire_once {} / fire_all {}",
        skip.len(),
        once.len(),
        all.len()
    );
    assert!(skip.len() >= 6, "every missed instant is recorded");
    assert!(
        skip.iter().all(|f| f.state == FiringState::Skipped),
        "skip publishes none of them"
    );
    assert_eq!(
        once.iter()
            .filter(|f| f.state != FiringState::Skipped)
            .count(),
        1,
        "fire_once publishes exactly one catch-up run"
    );
    assert_eq!(
        once.len(),
        skip.len(),
        "fire_once records the others as skipped"
    );
    assert!(
        all.len() >= 6 && all.iter().all(|f| f.state == FiringState::Published),
        "fire_all publishes every missed instant"
    );
    let js = async_nats::jetstream::new(nats.connect().await);
    let published = read_fire_stream(&js, "CHIME_FIRE").await;
    assert!(!published
        .iter()
        .any(|p| p.job_id == "misfire-skip" && p.scheduled_ms <= last_missed));
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_firing_is_requeued_and_completes_on_another_worker() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let replica = replica(&nats, db.url()).await;
    let client = Client::new(nats.connect().await);
    let mut first = start_worker(&nats.url(), "crash", 2, "worker-a").await;
    let at = aligned_start(Duration::from_secs(2));
    client
        .put_job(&json!({
            "id": "long", "group": "crash", "handler": "shell",
            "payload": {"argv": ["sh", "-c", "sleep 3; echo done"]},
            "schedule": {"at": rfc3339(at)},
            "retry": {"max_attempts": 2, "initial": "100ms"},
        }))
        .await
        .expect("put");
    eventually(Duration::from_secs(15), "worker-a runs the firing", || {
        let client = client.clone();
        async move {
            history(&client, "long")
                .await
                .iter()
                .any(|f| f.state == FiringState::Executing)
        }
    })
    .await;
    first.kill9();
    let killed = tokio::time::Instant::now();
    let mut second = start_worker(&nats.url(), "crash", 2, "worker-b").await;
    eventually(
        Duration::from_secs(30),
        "the second attempt succeeded",
        || {
            let client = client.clone();
            async move {
                history(&client, "long")
                    .await
                    .iter()
                    .any(|f| f.attempt == 2 && f.state == FiringState::Succeeded)
            }
        },
    )
    .await;
    println!(
        "re-queued and finished {:?} after the kill",
        killed.elapsed()
    );
    let firings = history(&client, "long").await;
    assert_eq!(firings.len(), 2, "{firings:#?}");
    assert_eq!(firings[0].state, FiringState::Lost);
    assert_eq!(firings[0].worker.as_deref(), Some("worker-a"));
    assert!(firings[0]
        .error
        .as_deref()
        .unwrap_or("")
        .contains("worker-a"));
    assert_eq!(firings[1].worker.as_deref(), Some("worker-b"));
    assert_eq!(firings[1].output.as_deref().map(str::trim), Some("done"));
    // Worker TTL 15 s + one expiry scan + start grace: re-queued well within 21 s.
    let requeued_after =
        (firings[1].due_at - firings[0].started_at.expect("started")).num_milliseconds();
    assert!(
        requeued_after < 21_000,
        "re-queued {requeued_after} ms after the first start"
    );
    second.terminate(Duration::from_secs(10)).await;
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_the_scheduler_with_events_in_flight_loses_none_and_applies_none_twice() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut first = start_scheduler(&nats.url(), db.url(), "scheduler-1").await;
    let client = Client::new(nats.connect().await);
    let runs: Runs = Arc::default();
    let worker = sleeping_worker(&nats, "inflight", 8, runs.clone()).await;
    let at = aligned_start(Duration::from_secs(2));
    for i in 0..20 {
        client
            .put_job(&json!({
                "id": format!("inflight-{i}"), "group": "inflight", "handler": "sleep",
                "payload": {"ms": 2000 + 100 * i}, "schedule": {"at": rfc3339(at)},
            }))
            .await
            .expect("put");
    }
    eventually(Duration::from_secs(15), "the first runs started", || {
        let runs = runs.clone();
        async move { runs.lock().unwrap().len() >= 8 }
    })
    .await;
    first.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut second = start_scheduler(&nats.url(), db.url(), "scheduler-2").await;
    eventually(Duration::from_secs(40), "every firing succeeded", || {
        let client = client.clone();
        async move {
            let mut done = 0;
            for i in 0..20 {
                let firings = history(&client, &format!("inflight-{i}")).await;
                done += firings
                    .iter()
                    .filter(|f| f.state == FiringState::Succeeded)
                    .count();
            }
            done == 20
        }
    })
    .await;
    for i in 0..20 {
        let firings = history(&client, &format!("inflight-{i}")).await;
        assert_eq!(firings.len(), 1, "one firing, one attempt: {firings:?}");
    }
    assert_eq!(runs.lock().unwrap().len(), 20, "each ran once");
    worker.shutdown().await;
    second.terminate(Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_publish_alerts_and_repeated_failures_pause_the_job() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let replica = replica(&nats, db.url()).await;
    let client = Client::new(nats.connect().await);
    let worker = Worker::builder()
        .nats(nats.connect().await)
        .group("doomed")
        .threads(2)
        .handler_fn("doomed", |_ctx: FiringContext| async move {
            Err(HandlerError::new("always fails"))
        })
        .build()
        .expect("config")
        .start()
        .await
        .expect("worker");
    let start = aligned_start(Duration::from_secs(2));
    client
        .put_job(&json!({
            "id": "doomed", "group": "doomed", "handler": "doomed",
            "schedule": {"every": "1s", "start_at": rfc3339(start)},
            "alert_after_failures": 2, "pause_after_alert": true,
        }))
        .await
        .expect("put");
    eventually(
        Duration::from_secs(20),
        "the job is paused by its alert",
        || {
            let client = client.clone();
            async move {
                client
                    .get_job("doomed")
                    .await
                    .map(|j| j.state == chime_common::JobState::Paused)
                    .unwrap_or(false)
            }
        },
    )
    .await;
    let js = async_nats::jetstream::new(nats.connect().await);
    let stream = js.get_stream("CHIME_ALERTS").await.expect("alerts stream");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config::default())
        .await
        .expect("consumer");
    let mut alerts = Vec::new();
    let mut batch = consumer
        .fetch()
        .max_messages(20)
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .expect("fetch");
    while let Some(Ok(message)) = futures::StreamExt::next(&mut batch).await {
        alerts.push(
            serde_json::from_slice::<chime_common::protocol::Alert>(&message.payload)
                .expect("alert JSON"),
        );
    }
    use chime_common::protocol::AlertKind;
    let failed = alerts
        .iter()
        .filter(|a| a.kind == AlertKind::FiringFailed)
        .count();
    let repeated: Vec<_> = alerts
        .iter()
        .filter(|a| a.kind == AlertKind::RepeatedFailures)
        .collect();
    assert!(
        failed >= 2,
        "each failed firing raises firing_failed: {alerts:?}"
    );
    assert_eq!(repeated.len(), 1, "{alerts:?}");
    assert_eq!(repeated[0].consecutive_failures, Some(2));
    assert!(repeated[0].paused);
    assert!(alerts
        .iter()
        .all(|a| a.job_id == "doomed" && a.group == "doomed"));
    worker.shutdown().await;
    replica.shutdown().await;
}

/// A trigger, a due retry and a firing released from a queue leave as soon
/// as they are stored (`scheduler/src/firing/immediate.rs`), not when the next
/// slice claim adopts them: with 30 s slices that adoption is up to 30 s
/// away, and each of the three must succeed within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_retries_and_releases_do_not_wait_for_a_slice() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.slicer.slice = Duration::from_secs(30);
    config.slicer.lookahead = Duration::from_secs(30);
    config.slicer.dense_horizon = Duration::from_secs(30);
    // Nor may the overdue rescue publish them.
    config.housekeeping.rescue_after = Duration::from_secs(60);
    let replica = Replica::start(config).await.expect("replica starts");
    let client = Client::new(nats.connect().await);
    let worker = Worker::builder()
        .nats(nats.connect().await)
        .group("now")
        .threads(4)
        .handler_fn("now", |ctx: FiringContext| async move {
            let fails_first = ctx.firing.payload.get("fail_first") == Some(&json!(true));
            if fails_first && ctx.firing.attempt == 1 {
                return Err(HandlerError::new("the first attempt fails"));
            }
            if let Some(ms) = ctx.firing.payload.get("ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(None)
        })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker starts");
    let job = |id: &str, payload: Value, extra: Value| {
        let mut spec = json!({
            "id": id, "group": "now", "handler": "now", "payload": payload,
            "schedule": {"every": "24h", "start_at": "2099-01-01T00:00:00Z"},
        });
        if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra) {
            spec.extend(extra);
        }
        spec
    };
    let succeeded = |client: &Client, job: &'static str, n: usize| {
        let client = client.clone();
        async move {
            eventually(
                Duration::from_secs(5),
                &format!("{n} firing(s) of {job} succeeded"),
                || async { count(&history(&client, job).await, FiringState::Succeeded) >= n },
            )
            .await;
        }
    };
    for (id, payload, extra) in [
        ("triggered", json!({}), json!({})),
        (
            "retried",
            json!({"fail_first": true}),
            json!({"retry": {"max_attempts": 2, "initial": "100ms"}}),
        ),
        ("queued", json!({"ms": 500}), json!({"overlap": "queue"})),
    ] {
        client.put_job(&job(id, payload, extra)).await.expect("put");
    }

    client
        .trigger_job("triggered", None)
        .await
        .expect("trigger");
    succeeded(&client, "triggered", 1).await;

    client.trigger_job("retried", None).await.expect("trigger");
    succeeded(&client, "retried", 1).await;
    let retried = history(&client, "retried").await;
    assert_eq!(
        retried
            .iter()
            .map(|f| (f.attempt, f.state))
            .collect::<Vec<_>>(),
        vec![(1, FiringState::Failed), (2, FiringState::Succeeded)]
    );

    client.trigger_job("queued", None).await.expect("trigger");
    client.trigger_job("queued", None).await.expect("trigger");
    succeeded(&client, "queued", 2).await;

    worker.shutdown().await;
    replica.shutdown().await;
}

backend_tests! {
    /// The start service tells the publisher's marker which firings it
    /// accepted, so their marks are not sent to the store; a refused start
    /// (a second worker asking for the same attempt) changes nothing.
    async fn an_accepted_start_takes_its_firing_off_the_marks_and_a_refused_one_does_not(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let standalone = StandaloneReports::connect(&nats, &db.url()).await;
        let reports = standalone.starts(StartsConfig::default());
        let firings = triggered(&standalone.store, &["a"]).await;
        let request = |worker: &str| StartRequest {
            firing_id: firings[0].clone(),
            worker_id: worker.into(),
            group: "default".into(),
            handler: None,
            payload_sha256: None,
        };
        reports.unstarted.acked(firings[0].clone());
        let decided = reports.decide(&[request("w1"), request("w2")]).await.expect("decided");
        assert_eq!(
            decided.iter().map(|d| d.reply.accepted).collect::<Vec<_>>(),
            [true, false],
            "one start per attempt: {decided:?}"
        );
        assert!(!reports.unstarted.contains(&firings[0]), "the accepted start took it off");

        // Acked again (a republish), then only refused: it stays a candidate.
        reports.unstarted.acked(firings[0].clone());
        let again = reports.decide(&[request("w3")]).await.expect("decided");
        assert!(!again[0].reply.accepted, "{again:?}");
        assert!(reports.unstarted.contains(&firings[0]), "a refused start leaves it");
    }

    /// Finished events that arrive one by one within `finish_linger` of the
    /// first are applied in one store call, as at a steady rate: each event
    /// alone would pay a statement and a commit of its own.
    async fn finished_events_arriving_within_the_linger_are_applied_together(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let standalone = StandaloneReports::connect(&nats, &db.url()).await;
        let firings = started(&standalone.store, &["warm-up", "a", "b", "c"], "w1", Utc::now()).await;
        let reports = standalone.finishes(FinishesConfig {
            linger: Duration::from_secs(2),
            ..Default::default()
        });
        let mut applied = reports.finished.subscribe();
        let shutdown = CancellationToken::new();
        let consuming = tokio::spawn(
            reports.clone().consume(standalone.finished_consumer().await, shutdown.clone()),
        );
        // The first event is applied alone: once it is, the pull is open
        // and each later event reaches the service as it is published.
        standalone.publish_succeeded(&firings[0], "w1").await;
        let first = applied.wait_for(Duration::from_secs(30), "the warm-up event applied", |_| true).await;
        assert_eq!(first, 1);
        for id in &firings[1..] {
            standalone.publish_succeeded(id, "w1").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let together = applied.wait_for(Duration::from_secs(30), "the three events applied", |_| true).await;
        assert_eq!(together, 3, "the three events, 50 ms apart, in one store call");

        shutdown.cancel();
        consuming
            .await
            .expect("the consumer stops")
            .expect("the consumer ends without a pull error");
    }
}
