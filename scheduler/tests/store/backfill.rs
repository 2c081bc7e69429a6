//! `jobs.backfill` in the store: one staged firing per past instant of a
//! range, marked `backfill`, with the next attempt number where an instant
//! already ran, adopted and subject to overlap and retries like any firing.

use super::*;

both_backends!(
    backfill_stages_one_marked_firing_per_instant_in_the_range,
    backfill_takes_the_next_attempt_of_an_instant_that_already_ran,
    backfill_takes_the_earliest_limit_instants,
    backfill_of_a_sharded_job_writes_at_most_the_limit_of_firings,
    backfill_refuses_bad_ranges_and_limits_and_changes_nothing,
    backfill_firings_follow_overlap_and_retries,
);

const HOUR: i64 = 3600;

async fn backfill(store: &Store, id: &str, from: i64, to: i64, now: i64) -> Vec<FiringId> {
    store
        .backfill(id, t(from), t(to), 1000, t(now))
        .await
        .expect("backfill")
        .expect("the job exists")
}

async fn backfill_stages_one_marked_firing_per_instant_in_the_range(db: &TestDb) {
    let store = db.store().await;
    // Instants at t(1 h), t(2 h), … (anchored where it was put).
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("put");
    let ids = backfill(&store, "a", 2 * HOUR, 5 * HOUR, 10 * HOUR).await;
    let instants: Vec<DateTime<Utc>> = ids.iter().map(|id| at_ms(id.scheduled_ms)).collect();
    assert_eq!(instants, vec![t(2 * HOUR), t(3 * HOUR), t(4 * HOUR)]);
    assert!(ids.iter().all(|id| id.attempt == 1 && id.job_id == "a"));
    for id in &ids {
        let f = firing(&store, id).await;
        assert_eq!(f.state, FiringState::Staged);
        assert!(f.backfill, "{f:?}");
        assert_eq!(f.due_at, t(10 * HOUR), "due now, not at its instant");
        let json = serde_json::to_value(&f).expect("json");
        assert_eq!(json["backfill"], json!(true));
    }
    // A firing staged by the schedule does not say backfill at all.
    let triggered = store
        .trigger("a", None, t(10 * HOUR))
        .await
        .expect("trigger")
        .expect("job");
    let plain = serde_json::to_value(firing(&store, &triggered).await).expect("json");
    assert!(plain.get("backfill").is_none(), "{plain}");
    // The slicer adopts them like triggers, oldest instant first.
    let outcome = store
        .stage_slice(&stage("s1", t(10 * HOUR + 1), t(10 * HOUR)))
        .await
        .expect("stage");
    let adopted: Vec<&FiringId> = outcome
        .firings
        .iter()
        .map(|f| &f.id)
        .filter(|id| ids.contains(id))
        .collect();
    assert_eq!(adopted, ids.iter().collect::<Vec<_>>());
}

async fn backfill_takes_the_next_attempt_of_an_instant_that_already_ran(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("put");
    let staged = store
        .stage_slice(&stage("s1", t(HOUR + 1), t(HOUR)))
        .await
        .expect("stage");
    let first = staged.firings[0].id.clone();
    assert_eq!(at_ms(first.scheduled_ms), t(HOUR));
    assert!(start(&store, &first, "w", t(HOUR)).await.reply.accepted);
    finish(&store, &first, "w", Outcome::Failed, t(HOUR + 1)).await;

    let again = backfill(&store, "a", HOUR, 2 * HOUR, 3 * HOUR).await;
    assert_eq!(
        again,
        vec![FiringId::new("a", t(HOUR).timestamp_millis(), 2)]
    );
    let third = backfill(&store, "a", HOUR, 2 * HOUR, 3 * HOUR).await;
    assert_eq!(third[0].attempt, 3);
    assert!(!firing(&store, &first).await.backfill);
}

async fn backfill_takes_the_earliest_limit_instants(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("m", "1m", json!({})), t(0))
        .await
        .expect("put");
    let ids = store
        .backfill("m", t(0), t(10 * HOUR), 5, t(10 * HOUR))
        .await
        .expect("backfill")
        .expect("job");
    let instants: Vec<DateTime<Utc>> = ids.iter().map(|id| at_ms(id.scheduled_ms)).collect();
    assert_eq!(instants, (1..=5).map(|m| t(60 * m)).collect::<Vec<_>>());
    assert_eq!(firings_of(&store, "m").await.len(), 5);
}

async fn backfill_of_a_sharded_job_writes_at_most_the_limit_of_firings(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("wide", "1m", json!({"shards": 1000})), t(0))
        .await
        .expect("put");
    // 600 instants asked for, each of 1,000 shards: 600,000 firings unbounded.
    let ids = store
        .backfill("wide", t(0), t(10 * HOUR), 600, t(10 * HOUR))
        .await
        .expect("backfill")
        .expect("job");
    assert_eq!(ids.len(), chime_common::api::BACKFILL_LIMIT_MAX as usize);
    let instants: std::collections::BTreeSet<i64> = ids.iter().map(|id| id.scheduled_ms).collect();
    assert_eq!(
        instants.len(),
        10,
        "the earliest instants, every shard of each"
    );
}

async fn backfill_refuses_bad_ranges_and_limits_and_changes_nothing(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("put");
    let now = t(10 * HOUR);
    for (from, to, limit, field) in [
        (t(HOUR), t(11 * HOUR), 10, "to"),
        (t(5 * HOUR), t(5 * HOUR), 10, "to"),
        (t(6 * HOUR), t(5 * HOUR), 10, "to"),
        (t(HOUR), t(5 * HOUR), 0, "limit"),
        (t(HOUR), t(5 * HOUR), 10_001, "limit"),
    ] {
        let refused = store.backfill("a", from, to, limit, now).await;
        assert!(
            matches!(&refused, Err(StoreError::Invalid(e)) if e.field == field),
            "{from} {to} {limit}: {refused:?}"
        );
    }
    assert_eq!(
        store
            .backfill("nope", t(HOUR), t(5 * HOUR), 10, now)
            .await
            .expect("backfill"),
        None
    );
    assert!(firings_of(&store, "a").await.is_empty());
}

async fn backfill_firings_follow_overlap_and_retries(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "f",
        "1h",
        json!({"overlap": "forbid", "retry": {"max_attempts": 2}}),
    );
    store.put_job(&job, t(0)).await.expect("put");
    let ids = backfill(&store, "f", HOUR, 3 * HOUR, 10 * HOUR).await;
    assert_eq!(ids.len(), 2);
    let now = t(10 * HOUR);
    assert!(start(&store, &ids[0], "w", now).await.reply.accepted);
    let second = start(&store, &ids[1], "w", now).await;
    assert!(!second.reply.accepted, "forbid: {second:?}");
    assert_eq!(firing(&store, &ids[1]).await.state, FiringState::Skipped);
    // A failed backfill firing is retried, and the retry is a backfill too.
    let done = finish(&store, &ids[0], "w", Outcome::Failed, now).await;
    let (retry, _) = done.retry.expect("a retry");
    assert_eq!(retry.attempt, 2);
    assert!(firing(&store, &retry).await.backfill);
}

fn at_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("a valid instant")
}
