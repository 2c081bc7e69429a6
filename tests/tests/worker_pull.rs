//! The worker's fetch loop against a real nats-server: threads bound
//! concurrency, workers share a backlog, the high band drains first, and an
//! idle worker sleeps until the doorbell rings, unless it holds a pull
//! request open on every band.

use chime_common::protocol::Outcome;
use chime_common::Band;
use chime_tests::worker_env::*;
use chime_worker::{FiringContext, WorkerHandle};
use futures::{FutureExt, StreamExt};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A worker of `threads` whose `echo` handler returns the payload, polling
/// every 30 s: only a doorbell or a request held open explains a prompt start.
async fn echo_worker(env: &Env, group: &str, threads: usize) -> WorkerHandle {
    env.worker(group, threads)
        .await
        .poll_interval(Duration::from_secs(30))
        .handler_fn("echo", |ctx: FiringContext| async move {
            Ok(Some(ctx.firing.payload.to_string()))
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_cap_concurrency() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let mut ids = HashSet::new();
    for i in 0..40 {
        ids.insert(
            env.publish(&TestFiring::new("cap", &format!("slow-{i}"), "slow"))
                .await,
        );
    }
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), max.clone());
    let worker = env
        .worker("cap", 4)
        .await
        .handler_fn("slow", move |_ctx: FiringContext| {
            let (running, max) = (r.clone(), m.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let seen = events.wait_for(40, Duration::from_secs(60)).await;
    assert!(
        seen.iter().all(|e| e.outcome == Outcome::Succeeded),
        "{seen:#?}"
    );
    let finished: HashSet<_> = seen.iter().map(|e| e.firing_id.clone()).collect();
    assert_eq!(finished, ids);
    assert_eq!(
        max.load(Ordering::SeqCst),
        4,
        "at most, and at some point exactly, 4 at once"
    );
    assert_eq!(worker.metrics().in_flight.get(), 0);
    assert_eq!(worker.metrics().free_threads.get(), 4);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_a_backlog() {
    let env = Env::start().await;
    let responder = env.responder().await;
    let mut events = env.events().await;
    let sleepy = |builder: chime_worker::WorkerBuilder| {
        builder.handler_fn("sleepy", |_ctx: FiringContext| async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok(None)
        })
    };
    let a = sleepy(env.worker("share", 2).await.worker_id("worker-a"))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let b = sleepy(env.worker("share", 2).await.worker_id("worker-b"))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    for i in 0..24 {
        env.publish(&TestFiring::new("share", &format!("job-{i}"), "sleepy"))
            .await;
    }
    env.ring("share").await;
    let seen = events.wait_for(24, Duration::from_secs(60)).await.to_vec();
    let by_a = seen.iter().filter(|e| e.worker_id == "worker-a").count();
    let by_b = seen.iter().filter(|e| e.worker_id == "worker-b").count();
    assert_eq!(by_a + by_b, 24);
    assert!(by_a > 0 && by_b > 0, "a ran {by_a}, b ran {by_b}");
    assert!(
        events.counts().values().all(|n| *n == 1),
        "one event per firing"
    );
    // Each firing ran where its start was accepted.
    let owners = responder.owners.lock().unwrap().clone();
    for event in &seen {
        assert_eq!(owners.get(&event.firing_id), Some(&event.worker_id));
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_band_drains_first() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    // The low backlog is older: a FIFO would run it first.
    for i in 0..5 {
        env.publish(&TestFiring::new("bands", &format!("low-{i}"), "record").priority(1))
            .await;
    }
    for i in 0..3 {
        env.publish(&TestFiring::new("bands", &format!("normal-{i}"), "record").priority(5))
            .await;
    }
    for i in 0..5 {
        env.publish(&TestFiring::new("bands", &format!("high-{i}"), "record").priority(8))
            .await;
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let worker = env
        .worker("bands", 1)
        .await
        .handler_fn("record", move |ctx: FiringContext| {
            let order = o.clone();
            async move {
                order.lock().unwrap().push(ctx.firing.job_id.clone());
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    events.wait_for(13, Duration::from_secs(30)).await;
    let order = order.lock().unwrap().clone();
    let bands: Vec<&str> = order
        .iter()
        .map(|job| job.split('-').next().unwrap())
        .collect();
    assert_eq!(
        bands,
        [
            ["high"; 5].as_slice(),
            ["normal"; 3].as_slice(),
            ["low"; 5].as_slice()
        ]
        .concat(),
        "{order:?}"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_sleeps_until_the_doorbell_rings() {
    let env = Env::start().await;
    let responder = env.responder().await;
    let mut events = env.events().await;
    let worker = echo_worker(&env, "idle", 2).await;
    // The first round found every band empty; nothing is fetched until a doorbell
    // (or the 30 s poll), so a firing published silently waits.
    worker.waiting().await;
    let quiet = env.publish(&TestFiring::new("idle", "quiet", "echo")).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        responder.request_count(),
        0,
        "an idle worker does not poll faster than its interval"
    );

    let rung = Instant::now();
    env.ring("idle").await;
    let event = events.of(&quiet, Duration::from_secs(5)).await;
    assert_eq!(event.outcome, Outcome::Succeeded);
    assert!(
        rung.elapsed() < Duration::from_secs(2),
        "woke {:?} after the doorbell",
        rung.elapsed()
    );

    // A doorbell for another group does not wake it.
    let other = env.publish(&TestFiring::new("idle", "other", "echo")).await;
    env.ring("elsewhere").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(events.seen.iter().all(|e| e.firing_id != other));
    env.ring("idle").await;
    events.of(&other, Duration::from_secs(5)).await;
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_with_a_thread_for_every_band_takes_a_firing_as_it_is_published() {
    let env = Env::start().await;
    let responder = env.responder().await;
    let mut events = env.events().await;
    let worker = echo_worker(&env, "waiting", 3).await;
    worker.waiting().await;
    for band in [1, 5, 8] {
        let published = Instant::now();
        let quiet = env
            .publish(&TestFiring::new("waiting", &format!("quiet-{band}"), "echo").priority(band))
            .await;
        let event = events.of(&quiet, Duration::from_secs(10)).await;
        assert_eq!(event.outcome, Outcome::Succeeded);
        assert!(
            published.elapsed() < Duration::from_secs(5),
            "priority {band}: started {:?} after a publish without a doorbell",
            published.elapsed()
        );
    }
    assert_eq!(responder.request_count(), 3);
    assert_eq!(worker.metrics().in_flight.get(), 0);
    assert_eq!(
        worker.metrics().free_threads.get(),
        3,
        "threads set aside for requests are idle, not in flight"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_band_with_work_takes_the_threads_set_aside_for_the_others() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = starts.clone();
    // Three threads, each set aside for one band while the worker is idle.
    let worker = env
        .worker("burst", 3)
        .await
        .poll_interval(Duration::from_secs(30))
        .handler_fn("slow", move |_ctx: FiringContext| {
            let starts = s.clone();
            async move {
                starts.lock().unwrap().push(Instant::now());
                tokio::time::sleep(Duration::from_millis(600)).await;
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    worker.waiting().await;
    for i in 0..6 {
        env.publish(&TestFiring::new("burst", &format!("slow-{i}"), "slow"))
            .await;
    }
    env.ring("burst").await;
    let seen = events.wait_for(6, Duration::from_secs(30)).await;
    assert!(seen.iter().all(|e| e.outcome == Outcome::Succeeded));
    let starts = starts.lock().unwrap().clone();
    // The first run holds its thread for 600 ms, and the other bands'
    // requests would hold theirs for up to 1 s: only closing them lets the
    // second and third runs start beside the first.
    let spread = starts[2].duration_since(starts[0]);
    assert!(
        spread < Duration::from_millis(300),
        "the first three runs started {spread:?} apart"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_while_holding_requests_open_strands_nothing() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let stopped = echo_worker(&env, "handover", 3).await;
    stopped.waiting().await;
    stopped.shutdown().await;

    let firing = env
        .publish(&TestFiring::new("handover", "after-stop", "echo"))
        .await;
    // A message delivered to the stopped worker's requests would come back
    // only after the 5 s ack wait; the next worker's first round finds it.
    let next = echo_worker(&env, "handover", 3).await;
    let started = Instant::now();
    let event = events.of(&firing, Duration::from_secs(20)).await;
    assert_eq!(event.worker_id, next.id());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "run {:?} after the next worker started",
        started.elapsed()
    );
    next.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_too_busy_to_hold_requests_open_answers_the_doorbell_again() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let worker = env
        .worker("doorbell-again", 3)
        .await
        .poll_interval(Duration::from_secs(30))
        .handler_fn("hold", |_ctx: FiringContext| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok(None)
        })
        .handler_fn("echo", |_ctx: FiringContext| async move { Ok(None) })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    // Idle, with a request open on every band, it does not listen to the
    // doorbell. Two long runs leave one thread: too few for three requests.
    worker.waiting().await;
    for i in 0..2 {
        env.publish(&TestFiring::new(
            "doorbell-again",
            &format!("hold-{i}"),
            "hold",
        ))
        .await;
    }
    env.ring("doorbell-again").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(worker.in_flight(), 2);

    let urgent = env
        .publish(&TestFiring::new("doorbell-again", "urgent", "echo").priority(8))
        .await;
    let rung = Instant::now();
    env.ring("doorbell-again").await;
    let event = events.of(&urgent, Duration::from_secs(20)).await;
    assert_eq!(event.outcome, Outcome::Succeeded);
    assert!(
        rung.elapsed() < Duration::from_secs(2),
        "ran {:?} after the doorbell, with the long runs still going",
        rung.elapsed()
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_open_request_serves_a_band_s_trickle_of_firings() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let consumer = env.subjects.fire_consumer("trickle", Band::Normal);
    let mut pulls = env
        .client
        .subscribe(format!("$JS.API.CONSUMER.MSG.NEXT.*.{consumer}"))
        .await
        .unwrap();
    env.client.flush().await.unwrap();
    // 48 threads: a request for 12 messages on each band.
    let worker = echo_worker(&env, "trickle", 48).await;
    worker.waiting().await;
    let mut count_pulls = move || {
        let mut n = 0;
        while let Some(Some(_)) = pulls.next().now_or_never() {
            n += 1;
        }
        n
    };
    assert!(count_pulls() >= 1, "the worker holds a request on the band");

    for i in 0..8 {
        let firing = env
            .publish(&TestFiring::new("trickle", &format!("quiet-{i}"), "echo"))
            .await;
        let event = events.of(&firing, Duration::from_secs(5)).await;
        assert_eq!(event.outcome, Outcome::Succeeded);
    }
    // One request per firing would be 8; a request lasts 1 s, so one may
    // have been renewed meanwhile.
    let during = count_pulls();
    assert!(during <= 2, "{during} pull requests for 8 firings");

    // A burst larger than the request: the rest is fetched, nothing waits
    // for the 30 s poll.
    let mut burst = Vec::new();
    for i in 0..40 {
        burst.push(
            env.publish(&TestFiring::new("trickle", &format!("burst-{i}"), "echo"))
                .await,
        );
    }
    for firing in &burst {
        events.of(firing, Duration::from_secs(5)).await;
    }
    worker.shutdown().await;
}
