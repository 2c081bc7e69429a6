//! A worker's firings from start to report against a real nats-server:
//! failures of every kind, refusals, a missing scheduler, cancel requests,
//! shutdown, heartbeats, and a NATS crash in the middle of it all.

use async_nats::HeaderMap;
use chime_common::headers;
use chime_common::protocol::{CancelRequest, Interruption, Outcome, StartRefusal, WorkerInfo};
use chime_common::Band;
use chime_tests::eventually;
use chime_tests::worker_env::*;
use chime_worker::{FiringContext, HandlerError, SHUTDOWN_REASON};
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The heartbeat of worker `id`, whatever its group (keys are `<group>.<id>`).
async fn heartbeat_of(env: &Env, id: &str) -> Option<WorkerInfo> {
    let kv = env.topology.workers().await.expect("workers bucket");
    let mut keys = kv.keys().await.expect("kv keys");
    while let Some(key) = futures::StreamExt::next(&mut keys).await {
        let key = key.expect("a key");
        if chime_common::protocol::parse_heartbeat_key(&key).1 == id {
            let value = kv.get(&key).await.expect("kv get")?;
            return Some(serde_json::from_slice(&value).expect("WorkerInfo JSON"));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_timed_out_and_unknown_handlers_report_and_worker_keeps_working() {
    let env = Env::start().await;
    let responder = env.responder().await;
    // A panic is caught only once the default hook has printed its
    // backtrace, which took more than 2 s on a loaded CI machine: the
    // failing firings get a deadline far beyond that, and the hanging one,
    // started after them, a short one.
    responder.set_run_for(Duration::from_secs(30));
    let mut events = env.events().await;
    let worker = env
        .worker("mixed", 2)
        .await
        .handler_fn("panic", |_ctx: FiringContext| async {
            panic!("the handler blew up")
        })
        .handler_fn("hang", |_ctx: FiringContext| async {
            // Ignores its token: the worker must drop it.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(None)
        })
        .handler_fn("fail", |_ctx: FiringContext| async {
            Err(HandlerError::new("it went wrong").with_output("some output"))
        })
        .handler_fn("echo", |ctx: FiringContext| async move {
            Ok(Some(ctx.firing.payload.to_string()))
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();

    // A message that is not a firing: terminated and counted, nothing else.
    let mut garbage = HeaderMap::new();
    garbage.insert(headers::FIRING_ID, "not a firing id");
    env.jetstream
        .publish_with_headers(
            env.subjects.fire("mixed", Band::Normal),
            garbage,
            "{}".into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let panic = env
        .publish(&TestFiring::new("mixed", "panics", "panic"))
        .await;
    let unknown = env
        .publish(&TestFiring::new("mixed", "unknown", "no-such-handler"))
        .await;
    let fail = env
        .publish(&TestFiring::new("mixed", "fails", "fail"))
        .await;
    env.ring("mixed").await;

    let e = events.of(&panic, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Failed);
    assert_eq!(
        e.error.as_deref(),
        Some("handler panicked: the handler blew up")
    );
    let e = events.of(&unknown, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Failed);
    assert_eq!(
        e.error.as_deref(),
        Some("no handler named no-such-handler on this worker")
    );
    let e = events.of(&fail, Duration::from_secs(10)).await;
    assert_eq!(
        (e.outcome, e.error.as_deref()),
        (Outcome::Failed, Some("it went wrong"))
    );
    assert_eq!(e.output.as_deref(), Some("some output"));

    responder.set_run_for(Duration::from_secs(2));
    let hang = env
        .publish(&TestFiring::new("mixed", "hangs", "hang"))
        .await;
    env.ring("mixed").await;
    let e = events.of(&hang, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::TimedOut);
    assert!(
        e.error.as_deref().unwrap().starts_with("timed out"),
        "{e:?}"
    );
    let ran_for = (e.finished_at - e.started_at).to_std().unwrap();
    assert!(
        ran_for < Duration::from_secs(5),
        "cut off at the deadline, ran {ran_for:?}"
    );

    // Still working, with every thread back.
    responder.set_run_for(Duration::from_secs(30));
    let after = env
        .publish(&TestFiring::new("mixed", "after", "echo").payload(json!({"still": "alive"})))
        .await;
    env.ring("mixed").await;
    let e = events.of(&after, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Succeeded);
    assert_eq!(e.output.as_deref(), Some(r#"{"still":"alive"}"#));

    let metrics = worker.metrics();
    assert_eq!(metrics.bad_messages.get(), 1);
    assert_eq!(
        metrics
            .firings
            .with_label_values(&["panic", "failed"])
            .get(),
        1
    );
    assert_eq!(
        metrics
            .firings
            .with_label_values(&["unknown", "failed"])
            .get(),
        1
    );
    assert_eq!(
        metrics
            .firings
            .with_label_values(&["hang", "timed_out"])
            .get(),
        1
    );
    assert_eq!(
        metrics
            .firings
            .with_label_values(&["echo", "succeeded"])
            .get(),
        1
    );
    assert_eq!(worker.in_flight(), 0);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_starts_are_acked_and_never_run() {
    let env = Env::start().await;
    let responder = Responder::start(
        env.nats.connect().await,
        &env.subjects,
        ResponderMode::Refuse(StartRefusal::Skipped),
    )
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let worker = env
        .worker("refused", 2)
        .await
        .handler_fn("count", move |_ctx: FiringContext| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    for i in 0..3 {
        env.publish(&TestFiring::new("refused", &format!("r{i}"), "count"))
            .await;
    }
    env.ring("refused").await;
    eventually(Duration::from_secs(10), "three start requests", || async {
        responder.request_count() >= 3
    })
    .await;
    // Acked: gone from the work queue, never redelivered (ack wait is 5 s here).
    eventually(Duration::from_secs(5), "the stream is empty", || async {
        let mut stream = env.jetstream.get_stream("CHIME_FIRE").await.unwrap();
        stream.info().await.unwrap().state.messages == 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(responder.request_count(), 3, "no redelivery");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        worker
            .metrics()
            .start_refusals
            .with_label_values(&["skipped"])
            .get(),
        3
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_the_scheduler_keeps_rejecting_is_asked_a_bounded_number_of_times() {
    let env = Env::start().await;
    let responder = Responder::start(
        env.nats.connect().await,
        &env.subjects,
        ResponderMode::Error("internal"),
    )
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let worker = env
        .worker("rejected", 1)
        .await
        .nak_delay(Duration::from_millis(20))
        .handler_fn("count", move |_ctx: FiringContext| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    env.publish(&TestFiring::new("rejected", "poison", "count"))
        .await;
    env.ring("rejected").await;
    // 20 ms doubling per delivery: the eighth comes about 2.5 s later.
    eventually(
        Duration::from_secs(30),
        "the message is dropped",
        || async {
            let mut stream = env.jetstream.get_stream("CHIME_FIRE").await.unwrap();
            stream.info().await.unwrap().state.messages == 0
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        responder.request_count(),
        8,
        "asked once per delivery, then dropped"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        worker
            .metrics()
            .start_refusals
            .with_label_values(&["rejected"])
            .get(),
        8
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_keeps_failing_is_restarted_and_makes_the_worker_unhealthy() {
    let env = Env::start().await;
    let client = env.nats.connect().await;
    let worker = env
        .worker("closed", 1)
        .await
        .nats(client.clone())
        .handler_fn("noop", |_ctx: FiringContext| async { Ok(None) })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    assert!(worker.status().failing().is_empty());
    // A connection closed for good: the cancel listener's subscription ends
    // and it cannot subscribe again.
    client.drain().await.expect("drain");
    eventually(
        Duration::from_secs(30),
        "the cancel listener restarted and reported as failing",
        || async {
            worker
                .metrics()
                .service_restarts
                .with_label_values(&["cancel_listener"])
                .get()
                >= 1
                && worker
                    .status()
                    .failing()
                    .iter()
                    .any(|(service, _)| service == "cancel_listener")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_scheduler_nothing_runs_and_the_firing_waits_for_one() {
    let env = Env::start().await;
    let mut events = env.events().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let worker = env
        .worker("lonely", 2)
        .await
        .handler_fn("count", move |_ctx: FiringContext| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let id = env
        .publish(&TestFiring::new("lonely", "waits", "count"))
        .await;
    env.ring("lonely").await;
    eventually(
        Duration::from_secs(10),
        "a start without an answer",
        || async {
            worker
                .metrics()
                .start_refusals
                .with_label_values(&["scheduler_unavailable"])
                .get()
                >= 2
        },
    )
    .await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "never runs without an accepted start"
    );
    assert_eq!(worker.in_flight(), 0, "a NAKed firing is not held");

    let _responder = env.responder().await;
    let e = events.of(&id, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Succeeded);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_firing() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let worker = env
        .worker("cancel", 2)
        .await
        .worker_id("cancel-me")
        .handler_fn("wait", move |ctx: FiringContext| {
            let started = s.clone();
            async move {
                started.notify_one();
                ctx.cancel.cancelled().await;
                Err(HandlerError::new("noticed the cancel").with_output("partial work"))
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let id = env
        .publish(&TestFiring::new("cancel", "long", "wait"))
        .await;
    env.ring("cancel").await;
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .expect("the run starts");

    let request = CancelRequest {
        firing_id: id.clone(),
        reason: "replaced by a newer firing".into(),
    };
    let reply = env
        .client
        .request(
            env.subjects.cancel("cancel-me"),
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .expect("the worker answers a cancel request");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&reply.payload).unwrap(),
        json!({"running": true})
    );

    let e = events.of(&id, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Cancelled);
    assert_eq!(e.error.as_deref(), Some("replaced by a newer firing"));
    assert_eq!(e.output.as_deref(), Some("partial work"));

    // A cancel for a firing that does not run here changes nothing.
    let reply = env
        .client
        .request(
            env.subjects.cancel("cancel-me"),
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&reply.payload).unwrap(),
        json!({"running": false})
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_then_cancels() {
    let env = Env::start().await;
    let responder = env.responder().await;
    let mut events = env.events().await;
    let running = Arc::new(AtomicUsize::new(0));
    let r1 = running.clone();
    let r2 = running.clone();
    let worker = env
        .worker("drain", 2)
        .await
        .worker_id("drainer")
        .drain_grace(Duration::from_secs(1))
        .handler_fn("quick", move |_ctx: FiringContext| {
            let running = r1.clone();
            async move {
                running.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok(Some("done".into()))
            }
        })
        .handler_fn("stuck", move |_ctx: FiringContext| {
            let running = r2.clone();
            async move {
                running.fetch_add(1, Ordering::SeqCst);
                // Ignores its token: dropped after the stop grace.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    assert!(heartbeat_of(&env, "drainer").await.is_some(), "registered");
    let quick = env
        .publish(&TestFiring::new("drain", "quick", "quick"))
        .await;
    let stuck = env
        .publish(&TestFiring::new("drain", "stuck", "stuck"))
        .await;
    env.ring("drain").await;
    eventually(Duration::from_secs(10), "both run", || async {
        running.load(Ordering::SeqCst) == 2
    })
    .await;

    let begun = Instant::now();
    let report = worker.shutdown().await;
    let took = begun.elapsed();
    assert!(!report.drained);
    assert_eq!(report.interrupted, 1);
    assert_eq!(report.unsent_events, 0);
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "shutdown took {took:?}"
    );

    let e = events.of(&quick, Duration::from_secs(5)).await;
    assert_eq!(
        (e.outcome, e.output.as_deref()),
        (Outcome::Succeeded, Some("done"))
    );
    let e = events.of(&stuck, Duration::from_secs(5)).await;
    assert_eq!(
        (e.outcome, e.error.as_deref(), e.interrupted),
        (
            Outcome::Failed,
            Some(SHUTDOWN_REASON),
            Some(Interruption::Shutdown)
        ),
        "a run that outlives the drain is interrupted, never cancelled"
    );
    assert!(
        heartbeat_of(&env, "drainer").await.is_none(),
        "heartbeat key deleted"
    );

    // Nothing is fetched any more.
    let requests = responder.request_count();
    env.publish(&TestFiring::new("drain", "late", "quick"))
        .await;
    env.ring("drain").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(responder.request_count(), requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_reports_capacity_and_in_flight() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let worker = env
        .worker("beat", 3)
        .await
        .worker_id("beater")
        .handler_fn("sleep", |_ctx: FiringContext| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok(None)
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let info = heartbeat_of(&env, "beater")
        .await
        .expect("first beat at start");
    assert_eq!(
        (
            info.id.as_str(),
            info.group.as_str(),
            info.threads,
            info.in_flight
        ),
        ("beater", "beat", 3, 0)
    );
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    env.publish(&TestFiring::new("beat", "s1", "sleep")).await;
    env.publish(&TestFiring::new("beat", "s2", "sleep")).await;
    env.ring("beat").await;
    eventually(
        Duration::from_secs(5),
        "in_flight 2 in the heartbeat",
        || async {
            heartbeat_of(&env, "beater")
                .await
                .is_some_and(|i| i.in_flight == 2)
        },
    )
    .await;
    worker.shutdown().await;
    assert!(heartbeat_of(&env, "beater").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restart_during_a_run_loses_nothing() {
    let mut env = Env::start().await;
    let _responder = env.responder().await;
    let running = Arc::new(AtomicUsize::new(0));
    let r = running.clone();
    let worker = env
        .worker("crash", 4)
        .await
        .handler_fn("work", move |_ctx: FiringContext| {
            let running = r.clone();
            async move {
                running.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(Some("worked".into()))
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let mut ids = HashSet::new();
    for i in 0..12 {
        ids.insert(
            env.publish(&TestFiring::new("crash", &format!("w{i}"), "work"))
                .await,
        );
    }
    env.ring("crash").await;
    eventually(Duration::from_secs(10), "4 running, 8 queued", || async {
        running.load(Ordering::SeqCst) == 4
    })
    .await;

    // Down longer than a publish-ack timeout (5 s): the runs that end meanwhile
    // must keep their finished events and retry them.
    env.nats.kill();
    tokio::time::sleep(Duration::from_secs(7)).await;
    env.nats.restart().await;

    let mut events = env.events().await;
    events.wait_for(12, Duration::from_secs(90)).await;
    // Anything late or doubled would show up now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    events.poll(Duration::from_millis(500)).await;
    let counts = events.counts();
    let finished: HashSet<_> = counts.keys().cloned().collect();
    assert_eq!(finished, ids, "every firing finished");
    assert!(
        counts.values().all(|n| *n == 1),
        "exactly one event each: {counts:?}"
    );
    assert!(
        events.seen.iter().all(|e| e.outcome == Outcome::Succeeded),
        "{:#?}",
        events.seen
    );
    let report = worker.shutdown().await;
    assert_eq!(report.unsent_events, 0);
}
