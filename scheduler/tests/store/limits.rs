//! Concurrency limits in the store, on both backends: a job's
//! `max_concurrent` under each overlap policy with `queue_limit`, the
//! limits of a whole group (`groups.put`), and the release of what they
//! held.

use super::*;
use chime_common::concurrency::GroupLimits;
use chime_scheduler::recovery::limit_release::{LimitRelease, LimitReleaseConfig};
use chime_scheduler::store::HoldCause;

both_backends!(
    queue_runs_max_concurrent_and_bounds_the_queue,
    a_released_firing_keeps_its_slot_and_newcomers_wait_behind,
    forbid_with_max_concurrent_skips_only_beyond_the_limit,
    replace_with_max_concurrent_cancels_the_oldest,
    allow_with_max_concurrent_holds_and_never_drops,
    a_group_limit_holds_across_jobs_and_releases_in_order,
    a_plain_success_in_a_limited_group_releases_what_it_held,
    a_group_rate_limit_counts_starts_in_any_one_second,
    raising_a_limit_releases_through_the_periodic_pass,
    groups_round_trip_and_report_running_and_held,
    concurrent_replicas_never_exceed_a_group_limit,
    a_deleted_job_leaves_nothing_held,
    a_late_publish_mark_leaves_a_released_firing_to_be_published_again,
);

/// Puts `job` and triggers `n` firings of it, all published at `now`.
async fn put_and_trigger_n(store: &Store, job: &JobSpec, n: usize, now: i64) -> Vec<FiringId> {
    store.put_job(job, t(now)).await.expect("put");
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(trigger(store, &job.id, now).await);
    }
    store.record_published(&ids, t(now)).await.expect("publish");
    ids
}

async fn trigger(store: &Store, job_id: &str, now: i64) -> FiringId {
    store
        .trigger(job_id, None, t(now))
        .await
        .expect("trigger")
        .expect("the job exists")
}

async fn refusal(store: &Store, id: &FiringId, worker: &str, now: i64) -> Option<StartRefusal> {
    start(store, id, worker, t(now)).await.reply.refusal
}

async fn put_group(store: &Store, value: Value) {
    let limits = GroupLimits::from_json(&value).expect("valid limits");
    store
        .put_group_limits(&limits, t(0))
        .await
        .expect("put group");
}

fn in_group(group: &str, extra: Value) -> Value {
    let mut v = json!({"group": group});
    if let (Value::Object(base), Value::Object(more)) = (&mut v, extra) {
        base.extend(more);
    }
    v
}

fn start_in(id: &FiringId, worker: &str, group: &str) -> StartRequest {
    StartRequest {
        group: group.to_string(),
        ..start_req(id, worker)
    }
}

async fn start_grouped(store: &Store, id: &FiringId, group: &str, now: i64) -> StartOutcome {
    store
        .start(&[start_in(id, &format!("w-{id}"), group)], t(now))
        .await
        .expect("start")
        .pop()
        .expect("one decision")
}

async fn queue_runs_max_concurrent_and_bounds_the_queue(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "q",
        "1h",
        json!({"overlap": "queue", "max_concurrent": 3, "queue_limit": 2}),
    );
    let ids = put_and_trigger_n(&store, &job, 7, 0).await;
    let mut decided = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        decided.push(start(&store, id, &format!("w{i}"), t(1)).await);
    }
    let refusals: Vec<Option<StartRefusal>> = decided.iter().map(|d| d.reply.refusal).collect();
    assert_eq!(
        refusals,
        [
            None,
            None,
            None,
            Some(StartRefusal::Queued),
            Some(StartRefusal::Queued),
            Some(StartRefusal::Skipped),
            Some(StartRefusal::Skipped),
        ]
    );
    assert_eq!(decided[3].held, Some(HoldCause::Job));
    let skipped = firing(&store, &ids[5]).await;
    assert_eq!(skipped.state, FiringState::Skipped);
    assert_eq!(
        skipped.error.as_deref(),
        Some("overlap: the queue is full (queue_limit 2)")
    );
    // A queued firing asking again keeps its place.
    assert_eq!(
        refusal(&store, &ids[3], "w3", 2).await,
        Some(StartRefusal::Queued)
    );

    let done = finish(&store, &ids[0], "w0", Outcome::Succeeded, t(5)).await;
    assert_eq!(done.released, vec![ids[3].clone()], "the oldest held first");
    assert_eq!(staged(&store, &ids[3]).await.publish_seq, 1);
    let started = start(&store, &ids[3], "w3", t(6)).await;
    assert!(started.reply.accepted);
    assert_eq!(
        started.limit_wait,
        Some((HoldCause::Job, Duration::from_secs(5)))
    );
    assert_eq!(store.executing(100).await.expect("executing").len(), 3);
}

async fn a_released_firing_keeps_its_slot_and_newcomers_wait_behind(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "q",
        "1h",
        json!({"overlap": "queue", "max_concurrent": 1, "queue_limit": 5}),
    );
    let ids = put_and_trigger_n(&store, &job, 2, 0).await;
    assert!(start(&store, &ids[0], "w0", t(1)).await.reply.accepted);
    assert_eq!(
        refusal(&store, &ids[1], "w1", 1).await,
        Some(StartRefusal::Queued)
    );
    let done = finish(&store, &ids[0], "w0", Outcome::Succeeded, t(2)).await;
    assert_eq!(done.released, vec![ids[1].clone()]);
    // A firing due after the release finds the slot kept for the released
    // one, and waits behind it.
    let late = trigger(&store, "q", 3).await;
    assert_eq!(
        refusal(&store, &late, "w2", 3).await,
        Some(StartRefusal::Queued)
    );
    assert!(start(&store, &ids[1], "w1", t(4)).await.reply.accepted);
    let done = finish(&store, &ids[1], "w1", Outcome::Succeeded, t(5)).await;
    assert_eq!(done.released, vec![late.clone()]);
    assert!(start(&store, &late, "w2", t(6)).await.reply.accepted);
}

async fn forbid_with_max_concurrent_skips_only_beyond_the_limit(db: &TestDb) {
    let store = db.store().await;
    let job = every("f", "1h", json!({"overlap": "forbid", "max_concurrent": 2}));
    let ids = put_and_trigger_n(&store, &job, 3, 0).await;
    assert!(start(&store, &ids[0], "w0", t(1)).await.reply.accepted);
    assert!(start(&store, &ids[1], "w1", t(1)).await.reply.accepted);
    assert_eq!(
        refusal(&store, &ids[2], "w2", 1).await,
        Some(StartRefusal::Skipped)
    );
    assert_eq!(
        firing(&store, &ids[2]).await.error.as_deref(),
        Some("overlap: 2 firings still running (max_concurrent)")
    );
}

async fn replace_with_max_concurrent_cancels_the_oldest(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "r",
        "1h",
        json!({"overlap": "replace", "max_concurrent": 2}),
    );
    let ids = put_and_trigger_n(&store, &job, 3, 0).await;
    assert!(start(&store, &ids[0], "w0", t(1)).await.cancel.is_empty());
    assert!(start(&store, &ids[1], "w1", t(2)).await.cancel.is_empty());
    let third = start(&store, &ids[2], "w2", t(3)).await;
    assert!(third.reply.accepted);
    let cancelled: Vec<&FiringId> = third.cancel.iter().map(|r| &r.firing_id).collect();
    assert_eq!(cancelled, [&ids[0]], "only the oldest makes room");
}

async fn allow_with_max_concurrent_holds_and_never_drops(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"max_concurrent": 2}));
    let ids = put_and_trigger_n(&store, &job, 5, 0).await;
    let mut refusals = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        refusals.push(refusal(&store, id, &format!("w{i}"), 1).await);
    }
    assert_eq!(
        refusals,
        [
            None,
            None,
            Some(StartRefusal::Queued),
            Some(StartRefusal::Queued),
            Some(StartRefusal::Queued)
        ]
    );
    // Each finish releases one, until every firing ran.
    let mut running = vec![ids[0].clone(), ids[1].clone()];
    let mut now = 2;
    let mut ran = 2;
    while let Some(id) = running.pop() {
        let worker = format!("w{}", ids.iter().position(|i| *i == id).unwrap());
        let done = finish(&store, &id, &worker, Outcome::Succeeded, t(now)).await;
        for released in done.released {
            let worker = format!("w{}", ids.iter().position(|i| *i == released).unwrap());
            assert!(
                start(&store, &released, &worker, t(now))
                    .await
                    .reply
                    .accepted
            );
            running.push(released);
            ran += 1;
        }
        now += 1;
    }
    assert_eq!(ran, 5);
    for id in &ids {
        assert_eq!(firing(&store, id).await.state, FiringState::Succeeded);
    }
}

async fn a_group_limit_holds_across_jobs_and_releases_in_order(db: &TestDb) {
    let store = db.store().await;
    put_group(&store, json!({"name": "db", "max_concurrent": 2})).await;
    let a = put_and_trigger_n(&store, &every("a", "1h", in_group("db", json!({}))), 2, 0).await;
    let b = put_and_trigger_n(&store, &every("b", "1h", in_group("db", json!({}))), 2, 0).await;
    assert!(start_grouped(&store, &a[0], "db", 1).await.reply.accepted);
    assert!(start_grouped(&store, &b[0], "db", 2).await.reply.accepted);
    let held = start_grouped(&store, &b[1], "db", 3).await;
    assert_eq!(held.reply.refusal, Some(StartRefusal::Queued));
    assert_eq!(held.held, Some(HoldCause::Group));
    assert_eq!(
        start_grouped(&store, &a[1], "db", 4).await.held,
        Some(HoldCause::Group)
    );
    let done = store
        .finish(
            &[finished(
                &a[0],
                &format!("w-{}", a[0]),
                Outcome::Succeeded,
                None,
            )],
            t(5),
            &delay,
        )
        .await
        .expect("finish")
        .pop()
        .expect("one outcome");
    assert_eq!(
        done.released,
        vec![b[1].clone()],
        "held first, released first"
    );
    assert_eq!(
        start_grouped(&store, &a[1], "db", 6).await.reply.refusal,
        Some(StartRefusal::Queued),
        "the slot is kept for the released firing"
    );
    let started = start_grouped(&store, &b[1], "db", 6).await;
    assert!(started.reply.accepted);
    assert_eq!(
        started.limit_wait,
        Some((HoldCause::Group, Duration::from_secs(3)))
    );
}

async fn a_plain_success_in_a_limited_group_releases_what_it_held(db: &TestDb) {
    let store = db.store().await;
    put_group(&store, json!({"name": "g", "max_concurrent": 1})).await;
    let ids = put_and_trigger_n(&store, &every("p", "1h", in_group("g", json!({}))), 2, 0).await;
    assert!(start_grouped(&store, &ids[0], "g", 1).await.reply.accepted);
    assert_eq!(
        start_grouped(&store, &ids[1], "g", 1).await.held,
        Some(HoldCause::Group)
    );
    let done = store
        .finish(
            &[finished(
                &ids[0],
                &format!("w-{}", ids[0]),
                Outcome::Succeeded,
                None,
            )],
            t(2),
            &delay,
        )
        .await
        .expect("finish")
        .pop()
        .expect("one outcome");
    assert!(done.applied);
    assert_eq!(done.released, vec![ids[1].clone()]);
}

async fn a_group_rate_limit_counts_starts_in_any_one_second(db: &TestDb) {
    let store = db.store().await;
    put_group(&store, json!({"name": "api", "max_per_second": 3})).await;
    let ids = put_and_trigger_n(&store, &every("r", "1h", in_group("api", json!({}))), 5, 0).await;
    let at = |ms: i64| t(1) + chrono::Duration::milliseconds(ms);
    let mut accepted = 0;
    for (i, id) in ids.iter().enumerate() {
        let decision = store
            .start(&[start_in(id, &format!("w{i}"), "api")], at(i as i64 * 100))
            .await
            .expect("start")
            .pop()
            .expect("one decision");
        if decision.reply.accepted {
            accepted += 1;
        } else {
            assert_eq!(decision.held, Some(HoldCause::Rate));
        }
    }
    assert_eq!(accepted, 3, "three starts in the first second");
    // Within the second after the first start nothing more is released…
    assert!(store
        .release_for("r", "api", at(999))
        .await
        .expect("release")
        .is_empty());
    // …then one slot per start that left the window (a little over a
    // second long).
    assert!(store
        .release_for("r", "api", at(1_049))
        .await
        .expect("release")
        .is_empty());
    assert_eq!(
        store
            .release_for("r", "api", at(1_050))
            .await
            .expect("release"),
        vec![ids[3].clone()]
    );
    let started = store
        .start(&[start_in(&ids[3], "w3", "api")], at(1_050))
        .await
        .expect("start")
        .pop()
        .expect("one decision");
    assert!(started.reply.accepted);
    assert_eq!(
        store
            .release_for("r", "api", at(1_150))
            .await
            .expect("release"),
        vec![ids[4].clone()]
    );
    assert_eq!(store.get_group("api").await.expect("group").held, 0);
}

async fn raising_a_limit_releases_through_the_periodic_pass(db: &TestDb) {
    let store = db.store().await;
    put_group(&store, json!({"name": "g", "max_concurrent": 1})).await;
    let ids = put_and_trigger_n(&store, &every("p", "1h", in_group("g", json!({}))), 3, 0).await;
    assert!(start_grouped(&store, &ids[0], "g", 1).await.reply.accepted);
    for id in &ids[1..] {
        assert_eq!(
            start_grouped(&store, id, "g", 1).await.held,
            Some(HoldCause::Group)
        );
    }
    let pass = LimitRelease {
        config: LimitReleaseConfig::default(),
        store: store.clone(),
        immediate: Default::default(),
    };
    assert!(pass.run_once(t(2)).await.expect("pass").released.is_empty());
    put_group(&store, json!({"name": "g", "max_concurrent": 2})).await;
    assert_eq!(
        pass.run_once(t(3)).await.expect("pass").released,
        vec![ids[1].clone()]
    );
    // Removing the limit releases everything it held.
    put_group(&store, json!({"name": "g"})).await;
    assert_eq!(
        pass.run_once(t(4)).await.expect("pass").released,
        vec![ids[2].clone()]
    );
    assert!(pass.run_once(t(5)).await.expect("pass").released.is_empty());
}

async fn groups_round_trip_and_report_running_and_held(db: &TestDb) {
    let store = db.store().await;
    let unknown = store.get_group("nowhere").await.expect("get");
    assert_eq!(unknown.limits.max_concurrent, None);
    assert_eq!((unknown.running, unknown.held), (0, 0));
    put_group(
        &store,
        json!({"name": "db", "max_concurrent": 1, "max_per_second": 50}),
    )
    .await;
    let ids = put_and_trigger_n(&store, &every("a", "1h", in_group("db", json!({}))), 2, 0).await;
    store
        .put_job(&every("other", "1h", json!({})), t(0))
        .await
        .expect("put");
    start_grouped(&store, &ids[0], "db", 1).await;
    start_grouped(&store, &ids[1], "db", 1).await;
    let db_group = store.get_group("db").await.expect("get");
    assert_eq!(db_group.limits.max_concurrent, Some(1));
    assert_eq!(db_group.limits.max_per_second, Some(50));
    assert_eq!((db_group.running, db_group.held), (1, 1));
    let names: Vec<String> = store
        .list_groups()
        .await
        .expect("list")
        .into_iter()
        .map(|g| g.limits.name)
        .collect();
    assert_eq!(names, ["db", "default"]);
    put_group(&store, json!({"name": "db"})).await;
    let cleared = store.get_group("db").await.expect("get");
    assert_eq!(cleared.limits.max_concurrent, None);
    assert_eq!(cleared.limits.max_per_second, None);
}

/// Two stores on one database are two replicas: their starts of one group,
/// decided at once, never run more than the group's limit.
async fn concurrent_replicas_never_exceed_a_group_limit(db: &TestDb) {
    let one = db.store().await;
    let two = db.store().await;
    put_group(&one, json!({"name": "db", "max_concurrent": 3})).await;
    let mut ids = Vec::new();
    for job in ["a", "b", "c"] {
        ids.extend(
            put_and_trigger_n(&one, &every(job, "1h", in_group("db", json!({}))), 6, 0).await,
        );
    }
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        let request = start_in(id, &format!("w{i}"), "db");
        tasks.push(tokio::spawn(
            async move { store.start(&[request], t(1)).await },
        ));
    }
    let mut accepted = 0;
    for task in tasks {
        let decisions = task.await.expect("task").expect("start");
        accepted += decisions.iter().filter(|d| d.reply.accepted).count();
    }
    assert_eq!(accepted, 3);
    assert_eq!(one.executing(100).await.expect("executing").len(), 3);
    assert_eq!(one.get_group("db").await.expect("group").held, 15);
}

async fn a_deleted_job_leaves_nothing_held(db: &TestDb) {
    let store = db.store().await;
    let job = every("q", "1h", json!({"overlap": "queue", "queue_limit": 3}));
    let ids = put_and_trigger_n(&store, &job, 3, 0).await;
    assert!(start(&store, &ids[0], "w0", t(1)).await.reply.accepted);
    assert_eq!(
        refusal(&store, &ids[1], "w1", 1).await,
        Some(StartRefusal::Queued)
    );
    store.delete_job("q", t(2)).await.expect("delete");
    assert_eq!(store.get_group("default").await.expect("group").held, 0);
    assert_eq!(firing(&store, &ids[1]).await.state, FiringState::Cancelled);
}

/// The publisher marks a firing published a second after JetStream has it.
/// When a limit held it and released it meanwhile, that late mark must not
/// undo the release: the firing waits for a publish of its own.
async fn a_late_publish_mark_leaves_a_released_firing_to_be_published_again(db: &TestDb) {
    let store = db.store().await;
    let job = every("q", "1h", json!({"overlap": "queue"}));
    store.put_job(&job, t(0)).await.expect("put");
    let first = trigger(&store, "q", 0).await;
    let second = trigger(&store, "q", 0).await;
    // Published, not marked yet: both are still `staged` in the store.
    assert!(start(&store, &first, "w0", t(1)).await.reply.accepted);
    assert_eq!(
        refusal(&store, &second, "w1", 1).await,
        Some(StartRefusal::Queued)
    );
    assert_eq!(firing(&store, &second).await.state, FiringState::Published);
    let done = finish(&store, &first, "w0", Outcome::Succeeded, t(2)).await;
    assert_eq!(done.released, vec![second.clone()]);
    store
        .record_published(&[first.clone(), second.clone()], t(0))
        .await
        .expect("the late mark");
    assert_eq!(firing(&store, &second).await.state, FiringState::Staged);
    let outcome = store
        .stage_slice(&stage("s", t(4), t(3)))
        .await
        .expect("stage");
    assert_eq!(
        outcome.firings.iter().map(|f| &f.id).collect::<Vec<_>>(),
        [&second],
        "the next slice publishes it again"
    );
    assert!(start(&store, &second, "w1", t(4)).await.reply.accepted);
}
