//! Fan-in schedules (`{"after": [...], "within"?}`) in the store: a job
//! fires once each of its upstream jobs has succeeded since it last fired
//! (or was put), counted in the finish transaction of each success.

use super::*;

both_backends!(
    fan_in_fires_once_per_pair_of_successes_not_on_one_alone,
    fan_in_within_drops_old_successes,
    fan_in_a_failure_does_not_count,
    fan_in_two_upstreams_finishing_at_once_fire_once,
    fan_in_paused_downstream_records_nothing,
    fan_in_cycles_are_refused_through_after_and_on_success,
    fan_in_reports_a_deleted_upstream,
    fan_in_a_put_resets_what_counted,
);

/// A fan-in job `id` waiting for `after`, with extra spec fields merged in.
fn fan_in(id: &str, after: &[&str], extra: Value) -> JobSpec {
    let mut schedule = json!({ "after": after });
    if let Some(within) = extra.get("within") {
        schedule["within"] = within.clone();
    }
    let mut v = json!({"id": id, "schedule": schedule, "handler": "test"});
    if let (Value::Object(base), Value::Object(more)) = (&mut v, extra) {
        base.extend(more.into_iter().filter(|(k, _)| k != "within"));
    }
    spec(v)
}

/// Runs one triggered firing of `job` to `outcome` at `at`; returns the
/// firings its finish staged.
async fn run(store: &Store, job: &str, outcome: Outcome, at: DateTime<Utc>) -> Vec<FiringId> {
    let id = store
        .trigger(job, None, at)
        .await
        .expect("trigger")
        .expect("the job exists");
    assert!(start(store, &id, "w", at).await.reply.accepted);
    let done = finish(store, &id, "w", outcome, at).await;
    assert!(done.applied, "{done:?}");
    done.triggered
}

async fn put_upstreams(store: &Store, ids: &[&str]) {
    for id in ids {
        store
            .put_job(&every(id, "1h", json!({})), t(0))
            .await
            .expect("put upstream");
    }
}

/// The firings of `job`, oldest first.
async fn fired(store: &Store, job: &str) -> Vec<DateTime<Utc>> {
    let mut at: Vec<_> = firings_of(store, job)
        .await
        .into_iter()
        .map(|f| f.scheduled_at)
        .collect();
    at.sort();
    at
}

async fn fan_in_fires_once_per_pair_of_successes_not_on_one_alone(db: &TestDb) {
    let store = db.store().await;
    put_upstreams(&store, &["a", "b"]).await;
    let job = store
        .put_job(&fan_in("c", &["a", "b"], json!({})), t(0))
        .await
        .expect("put");
    assert_eq!(job.state, JobState::Active, "a fan-in never completes");
    assert_eq!(job.next_fire_at, None);
    assert!(job.upstream_missing.is_empty());
    // The slicer never stages it.
    let staged = store
        .stage_slice(&stage("s1", t(7200), t(0)))
        .await
        .expect("stage");
    assert_eq!(count(&staged, "c"), 0);

    // a twice, then b: one firing, when b succeeds.
    assert!(run(&store, "a", Outcome::Succeeded, t(10)).await.is_empty());
    assert!(run(&store, "a", Outcome::Succeeded, t(20)).await.is_empty());
    assert!(fired(&store, "c").await.is_empty(), "not on a alone");
    let triggered = run(&store, "b", Outcome::Succeeded, t(30)).await;
    assert_eq!(triggered, [FiringId::new("c", t(30).timestamp_millis(), 1)]);
    assert_eq!(staged_firing_due(&store, &triggered[0]).await, t(30));
    // Counting starts again: b alone does not fire it, then a does.
    assert!(run(&store, "b", Outcome::Succeeded, t(40)).await.is_empty());
    assert_eq!(
        run(&store, "a", Outcome::Succeeded, t(50)).await,
        [FiringId::new("c", t(50).timestamp_millis(), 1)]
    );
    assert_eq!(fired(&store, "c").await, [t(30), t(50)]);
    let job = store.get_job("c").await.expect("get").expect("c");
    assert_eq!((job.state, job.next_fire_at), (JobState::Active, None));
}

async fn staged_firing_due(store: &Store, id: &FiringId) -> DateTime<Utc> {
    staged(store, id).await.due_at
}

async fn fan_in_within_drops_old_successes(db: &TestDb) {
    let store = db.store().await;
    put_upstreams(&store, &["a", "b"]).await;
    store
        .put_job(&fan_in("c", &["a", "b"], json!({"within": "1m"})), t(0))
        .await
        .expect("put");
    run(&store, "a", Outcome::Succeeded, t(10)).await;
    // 61 s later a's success no longer counts.
    assert!(run(&store, "b", Outcome::Succeeded, t(71)).await.is_empty());
    // a again within the minute of b's: fires.
    assert_eq!(
        run(&store, "a", Outcome::Succeeded, t(100)).await,
        [FiringId::new("c", t(100).timestamp_millis(), 1)]
    );
    // Exactly at the window's edge still counts.
    run(&store, "a", Outcome::Succeeded, t(200)).await;
    assert_eq!(run(&store, "b", Outcome::Succeeded, t(260)).await.len(), 1);
}

async fn fan_in_a_failure_does_not_count(db: &TestDb) {
    let store = db.store().await;
    put_upstreams(&store, &["a", "b"]).await;
    store
        .put_job(&fan_in("c", &["a", "b"], json!({})), t(0))
        .await
        .expect("put");
    assert!(run(&store, "a", Outcome::Failed, t(10)).await.is_empty());
    assert!(run(&store, "a", Outcome::TimedOut, t(11)).await.is_empty());
    assert!(run(&store, "b", Outcome::Succeeded, t(20)).await.is_empty());
    assert!(run(&store, "b", Outcome::Cancelled, t(21)).await.is_empty());
    assert!(fired(&store, "c").await.is_empty());
    assert_eq!(run(&store, "a", Outcome::Succeeded, t(30)).await.len(), 1);
}

async fn fan_in_two_upstreams_finishing_at_once_fire_once(db: &TestDb) {
    let (one, two) = (db.store().await, db.store().await);
    put_upstreams(&one, &["a", "b"]).await;
    one.put_job(&fan_in("c", &["a", "b"], json!({})), t(0))
        .await
        .expect("put");
    for round in 0..5 {
        let at = t(100 * (round + 1));
        let a = one.trigger("a", None, at).await.expect("a").expect("a");
        let b = one.trigger("b", None, at).await.expect("b").expect("b");
        assert!(start(&one, &a, "w1", at).await.reply.accepted);
        assert!(start(&two, &b, "w2", at).await.reply.accepted);
        // Two replicas apply the two successes at the same moment.
        let (ea, eb) = (
            [finished(&a, "w1", Outcome::Succeeded, None)],
            [finished(&b, "w2", Outcome::Succeeded, None)],
        );
        let (x, y) = tokio::join!(one.finish(&ea, at, &delay), two.finish(&eb, at, &delay));
        let triggered: Vec<FiringId> = x
            .expect("finish a")
            .into_iter()
            .chain(y.expect("finish b"))
            .flat_map(|o| o.triggered)
            .collect();
        assert_eq!(triggered.len(), 1, "round {round}: {triggered:?}");
    }
    assert_eq!(fired(&one, "c").await.len(), 5);
}

async fn fan_in_paused_downstream_records_nothing(db: &TestDb) {
    let store = db.store().await;
    put_upstreams(&store, &["a", "b"]).await;
    store
        .put_job(&fan_in("c", &["a", "b"], json!({})), t(0))
        .await
        .expect("put");
    run(&store, "a", Outcome::Succeeded, t(10)).await;
    let paused = store
        .set_paused("c", Pause::Until(None), t(15))
        .await
        .expect("pause")
        .expect("c");
    assert_eq!(paused.state, JobState::Paused);
    // b's success while c is paused is not counted, and nothing fires.
    assert!(run(&store, "b", Outcome::Succeeded, t(20)).await.is_empty());
    let resumed = store
        .set_paused("c", Pause::Resume, t(25))
        .await
        .expect("resume")
        .expect("c");
    assert_eq!(resumed.state, JobState::Active);
    assert!(fired(&store, "c").await.is_empty());
    // a's success from before the pause still counts.
    assert_eq!(run(&store, "b", Outcome::Succeeded, t(30)).await.len(), 1);
}

async fn fan_in_cycles_are_refused_through_after_and_on_success(db: &TestDb) {
    let store = db.store().await;
    // a --on_success--> b, c after [b].
    store
        .put_job(&every("a", "1h", json!({"on_success": ["b"]})), t(0))
        .await
        .expect("a");
    put_upstreams(&store, &["b"]).await;
    store
        .put_job(&fan_in("c", &["b"], json!({})), t(0))
        .await
        .expect("c");
    // a after [c] closes a → b → c → a through on_success and after.
    match store
        .put_job(&fan_in("a", &["c"], json!({"on_success": ["b"]})), t(0))
        .await
    {
        Err(StoreError::Invalid(e)) => {
            assert_eq!(e.field, "schedule.after");
            assert!(e.message.contains("a → b → c → a"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // c --on_success--> a closes it the other way round.
    match store
        .put_job(&fan_in("c", &["b"], json!({"on_success": ["a"]})), t(0))
        .await
    {
        Err(StoreError::Invalid(e)) => {
            assert_eq!(e.field, "schedule.after");
            assert!(e.message.contains("c → a → b → c"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // b after [c] closes b → c → b through fan-in schedules alone.
    match store.put_job(&fan_in("b", &["c"], json!({})), t(0)).await {
        Err(StoreError::Invalid(e)) => {
            assert_eq!(e.field, "schedule.after");
            assert!(e.message.contains("b → c → b"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // e waits for d (not put yet); d triggering e as well is no cycle, but
    // e then triggering d is one, closed by d's on_success.
    store
        .put_job(&fan_in("e", &["d"], json!({})), t(0))
        .await
        .expect("e after a missing d");
    store
        .put_job(&every("d", "1h", json!({"on_success": ["x", "e"]})), t(0))
        .await
        .expect("d → e twice is not a cycle");
    match store
        .put_job(&every("e", "1h", json!({"on_success": ["d"]})), t(0))
        .await
    {
        Err(StoreError::Invalid(e)) => {
            assert_eq!(e.field, "on_success");
            assert!(e.message.contains("e → d → e"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Nothing refused was stored: c still waits for b alone.
    let c = store.get_job("c").await.expect("get").expect("c");
    assert!(c.spec.on_success.is_empty());
    let a = store.get_job("a").await.expect("get").expect("a");
    assert!(!a.spec.schedule.is_fan_in());
}

async fn fan_in_reports_a_deleted_upstream(db: &TestDb) {
    let store = db.store().await;
    put_upstreams(&store, &["a", "b"]).await;
    let put = store
        .put_job(&fan_in("c", &["a", "b", "z"], json!({})), t(0))
        .await
        .expect("put");
    assert_eq!(put.upstream_missing, ["z"]);
    store
        .delete_job("a", t(1))
        .await
        .expect("delete")
        .expect("a");
    let c = store.get_job("c").await.expect("get").expect("c");
    assert_eq!(c.upstream_missing, ["a", "z"]);
    let paused = store
        .set_paused("c", Pause::Until(None), t(2))
        .await
        .expect("pause")
        .expect("c");
    assert_eq!(paused.upstream_missing, ["a", "z"]);
    store
        .set_paused("c", Pause::Resume, t(3))
        .await
        .expect("resume")
        .expect("c");
    let json = serde_json::to_value(&c).expect("json");
    assert_eq!(json["upstream_missing"], json!(["a", "z"]));
    let listed = store
        .list_jobs(&JobFilter::default())
        .await
        .expect("list")
        .items;
    let c = listed.iter().find(|j| j.spec.id == "c").expect("c listed");
    assert_eq!(c.upstream_missing, ["a", "z"]);
    assert!(listed
        .iter()
        .filter(|j| j.spec.id != "c")
        .all(|j| j.upstream_missing.is_empty()));
    // Put back, they count again.
    put_upstreams(&store, &["a", "z"]).await;
    let c = store.get_job("c").await.expect("get").expect("c");
    assert!(c.upstream_missing.is_empty());
    for up in ["a", "b"] {
        assert!(run(&store, up, Outcome::Succeeded, t(10)).await.is_empty());
    }
    assert_eq!(run(&store, "z", Outcome::Succeeded, t(20)).await.len(), 1);
    // A deleted downstream counts nothing and leaves no rows.
    store
        .delete_job("c", t(30))
        .await
        .expect("delete")
        .expect("c");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM fan_in").await, 0);
    assert!(run(&store, "a", Outcome::Succeeded, t(40)).await.is_empty());
}

async fn fan_in_a_put_resets_what_counted(db: &TestDb) {
    let store = db.store().await;
    put_upstreams(&store, &["a", "b"]).await;
    let c = fan_in("c", &["a", "b"], json!({}));
    store.put_job(&c, t(0)).await.expect("put");
    run(&store, "a", Outcome::Succeeded, t(10)).await;
    store.put_job(&c, t(15)).await.expect("put again");
    assert!(run(&store, "b", Outcome::Succeeded, t(20)).await.is_empty());
    // Made a cron job, it keeps no fan-in rows and a's success takes the
    // set-based path again.
    store
        .put_job(&every("c", "1h", json!({})), t(25))
        .await
        .expect("not a fan-in");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM fan_in").await, 0);
    assert!(run(&store, "a", Outcome::Succeeded, t(30)).await.is_empty());
    assert!(fired(&store, "c").await.is_empty());
}
