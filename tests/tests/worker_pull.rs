//! The worker's fetch loop against a real nats-server: threads bound
//! concurrency, workers share a backlog, the high band drains first, and an
//! idle worker sleeps until the doorbell rings.

use chime_common::protocol::Outcome;
use chime_tests::worker_env::*;
use chime_worker::FiringContext;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    let worker = env
        .worker("idle", 2)
        .await
        .poll_interval(Duration::from_secs(30))
        .handler_fn("echo", |ctx: FiringContext| async move {
            Ok(Some(ctx.firing.payload.to_string()))
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    // The first round found every band empty; nothing is fetched until a doorbell
    // (or the 30 s poll), so a firing published silently waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
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
