//! Shards in the store, on both backends: each instant of a job with
//! `shards: N` is N firings, shard 0…N-1, each with its own attempts, and
//! the instant succeeds (triggering `on_success` and fan-in counts, once)
//! only when its last shard does.

use super::*;

both_backends!(
    a_sharded_instant_stages_one_firing_per_shard,
    a_trigger_runs_every_shard_and_history_groups_them,
    a_retry_of_one_shard_keeps_its_shard,
    on_success_fires_once_after_the_last_shard,
    a_failed_shard_means_no_on_success,
    forbid_lets_one_instant_s_shards_run_by_default,
    misfire_skips_and_backfills_make_every_shard,
    a_re_run_instant_triggers_once_more_at_its_last_shard,
);

fn sharded(id: &str, shards: u32, extra: Value) -> JobSpec {
    let mut more = json!({"shards": shards});
    if let (Value::Object(base), Value::Object(extra)) = (&mut more, extra) {
        base.extend(extra);
    }
    every(id, "1h", more)
}

/// Every shard of the instant `first` names (attempt 1), shard order.
fn shards_of(first: &FiringId, shards: u32) -> Vec<FiringId> {
    (0..shards)
        .map(|shard| {
            FiringId::of_shard(first.job_id.as_str(), first.scheduled_ms, shard, shards, 1)
        })
        .collect()
}

/// Starts every id on its own worker (`w<shard>`).
async fn start_all(store: &Store, ids: &[FiringId], now: i64) {
    for id in ids {
        let worker = format!("w{}", id.shard.unwrap_or(0));
        assert!(
            start(store, id, &worker, t(now)).await.reply.accepted,
            "{id}"
        );
    }
}

async fn finish_shard(
    store: &Store,
    id: &FiringId,
    outcome: Outcome,
    now: i64,
) -> chime_scheduler::store::FinishOutcome {
    let worker = format!("w{}", id.shard.unwrap_or(0));
    let done = finish(store, id, &worker, outcome, t(now)).await;
    assert!(done.applied, "{done:?}");
    done
}

async fn a_sharded_instant_stages_one_firing_per_shard(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("scan", "1s", json!({"shards": 3})), t(0))
        .await
        .expect("put");
    store
        .put_job(&every("plain", "1s", json!({})), t(0))
        .await
        .expect("put");
    let staged = store
        .stage_slice(&stage("s1", t(3), t(0)))
        .await
        .expect("stage");
    let scan: Vec<&StagedFiring> = staged
        .firings
        .iter()
        .filter(|f| f.job_id == "scan")
        .collect();
    assert_eq!(scan.len(), 2 * 3, "two instants of three shards");
    let ids: HashSet<String> = scan.iter().map(|f| f.id.to_string()).collect();
    assert_eq!(ids.len(), 6, "distinct ids: {ids:?}");
    let at = t(1).timestamp_millis();
    for shard in 0..3 {
        assert!(ids.contains(&format!("scan@{at}.{shard}#1")), "{ids:?}");
    }
    assert!(scan.iter().all(|f| f.shards == 3 && f.attempt == 1));
    // An unsharded job keeps its ids exactly.
    let plain: Vec<String> = staged
        .firings
        .iter()
        .filter(|f| f.job_id == "plain")
        .map(|f| f.id.to_string())
        .collect();
    assert_eq!(
        plain,
        [
            format!("plain@{at}#1"),
            format!("plain@{}#1", t(2).timestamp_millis())
        ]
    );
    // What a takeover reads back is the same, shard counts included.
    let owned = store.slice_firings("s1").await.expect("slice");
    assert_eq!(owned.iter().filter(|f| f.shards == 3).count(), 6);
    let listed = firings_of(&store, "scan").await;
    assert_eq!(listed.len(), 6);
    assert!(listed
        .iter()
        .all(|f| f.shard == f.id.shard && f.shard.is_some()));
    assert!(firings_of(&store, "plain")
        .await
        .iter()
        .all(|f| f.shard.is_none()));
}

async fn a_trigger_runs_every_shard_and_history_groups_them(db: &TestDb) {
    let store = db.store().await;
    let job = sharded("scan", 4, json!({}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    assert_eq!(first.shard, Some(0), "the reply names shard 0");
    let later = store
        .trigger("scan", None, t(10))
        .await
        .expect("trigger")
        .expect("job");
    for id in shards_of(&first, 4).iter().chain(&shards_of(&later, 4)) {
        assert_eq!(staged(&store, id).await.shards, 4);
    }
    // Newest instant first, its shards together.
    let listed: Vec<(i64, Option<u32>)> = firings_of(&store, "scan")
        .await
        .iter()
        .map(|f| (f.id.scheduled_ms, f.shard))
        .collect();
    let (a, b) = (first.scheduled_ms, later.scheduled_ms);
    assert_eq!(
        listed,
        [
            (b, Some(3)),
            (b, Some(2)),
            (b, Some(1)),
            (b, Some(0)),
            (a, Some(3)),
            (a, Some(2)),
            (a, Some(1)),
            (a, Some(0)),
        ]
    );
    // Pages of two continue from the cursor without losing a shard.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_firings(&FiringFilter {
                job_id: Some("scan".into()),
                limit: 3,
                after,
                ..FiringFilter::default()
            })
            .await
            .expect("list");
        seen.extend(page.items.iter().map(|f| f.id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 8);
}

async fn a_retry_of_one_shard_keeps_its_shard(db: &TestDb) {
    let store = db.store().await;
    let job = sharded("scan", 3, json!({"retry": {"max_attempts": 2}}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let ids = shards_of(&first, 3);
    start_all(&store, &ids, 1).await;
    let done = finish_shard(&store, &ids[2], Outcome::Failed, 2).await;
    let (retry, _) = done.retry.expect("a second attempt");
    assert_eq!(retry, ids[2].next_attempt());
    assert_eq!(retry.shard, Some(2));
    assert_eq!(
        retry.to_string(),
        format!("scan@{}.2#2", first.scheduled_ms)
    );
    let again = staged(&store, &retry).await;
    assert_eq!((again.attempt, again.shards), (2, 3));
    assert_eq!(firing(&store, &retry).await.shard, Some(2));
    // The other shards are untouched by it.
    assert_eq!(firing(&store, &ids[1]).await.state, FiringState::Executing);
}

async fn on_success_fires_once_after_the_last_shard(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("next", "1h", json!({})), t(0))
        .await
        .expect("put");
    let joined = spec(json!({"id": "joined", "schedule": {"after": ["scan"]}, "handler": "test"}));
    store.put_job(&joined, t(0)).await.expect("put fan-in");
    let job = sharded(
        "scan",
        3,
        json!({"on_success": ["next"], "retry": {"max_attempts": 2}}),
    );
    let first = put_and_trigger(&store, &job, t(0)).await;
    let ids = shards_of(&first, 3);
    start_all(&store, &ids, 1).await;
    // Shard 1 fails once, then its retry succeeds last.
    let failed = finish_shard(&store, &ids[1], Outcome::Failed, 2).await;
    let (retry, _) = failed.retry.expect("retried");
    assert!(finish_shard(&store, &ids[0], Outcome::Succeeded, 3)
        .await
        .triggered
        .is_empty());
    assert!(finish_shard(&store, &ids[2], Outcome::Succeeded, 4)
        .await
        .triggered
        .is_empty());
    assert!(firings_of(&store, "next").await.is_empty());
    assert!(firings_of(&store, "joined").await.is_empty());
    assert!(start(&store, &retry, "w1", t(5)).await.reply.accepted);
    let last = finish_shard(&store, &retry, Outcome::Succeeded, 6).await;
    let mut jobs: Vec<&str> = last.triggered.iter().map(|id| id.job_id.as_str()).collect();
    jobs.sort_unstable();
    assert_eq!(jobs, ["joined", "next"], "{last:?}");
    assert_eq!(firings_of(&store, "next").await.len(), 1);
    assert_eq!(firings_of(&store, "joined").await.len(), 1);
}

async fn a_failed_shard_means_no_on_success(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("next", "1h", json!({})), t(0))
        .await
        .expect("put");
    let job = sharded("scan", 2, json!({"on_success": ["next"]}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let ids = shards_of(&first, 2);
    start_all(&store, &ids, 1).await;
    let failed = finish_shard(&store, &ids[0], Outcome::Failed, 2).await;
    assert!(failed.retry.is_none());
    assert!(finish_shard(&store, &ids[1], Outcome::Succeeded, 3)
        .await
        .triggered
        .is_empty());
    assert!(firings_of(&store, "next").await.is_empty());
}

async fn forbid_lets_one_instant_s_shards_run_by_default(db: &TestDb) {
    let store = db.store().await;
    let job = sharded("scan", 3, json!({"overlap": "forbid"}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let later = store
        .trigger("scan", None, t(1))
        .await
        .expect("trigger")
        .expect("job");
    start_all(&store, &shards_of(&first, 3), 2).await;
    let refused = start(&store, &later, "w9", t(3)).await;
    assert_eq!(refused.reply.refusal, Some(StartRefusal::Skipped));
}

async fn misfire_skips_and_backfills_make_every_shard(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(
            &every(
                "scan",
                "10s",
                json!({"shards": 2, "misfire": "skip", "misfire_threshold": "5s"}),
            ),
            t(0),
        )
        .await
        .expect("put");
    // Found at 32 s: 10 and 20 are misfired, 30 is on time.
    let outcome = store
        .stage_slice(&stage("s", t(33), t(32)))
        .await
        .expect("stage");
    assert_eq!(outcome.skipped, 2, "counted per instant");
    assert_eq!(outcome.missed.len(), 2, "one alert per instant");
    assert!(outcome
        .missed
        .iter()
        .all(|m| m.alert.firing_id.as_ref().and_then(|id| id.shard) == Some(0)));
    let staged: Vec<String> = outcome.firings.iter().map(|f| f.id.to_string()).collect();
    let at = t(30).timestamp_millis();
    assert_eq!(staged, [format!("scan@{at}.0#1"), format!("scan@{at}.1#1")]);
    let all = firings_of(&store, "scan").await;
    let skipped: Vec<&chime_common::Firing> = all
        .iter()
        .filter(|f| f.state == FiringState::Skipped)
        .collect();
    assert_eq!(skipped.len(), 4, "both shards of both misfired instants");

    // A backfill of the two skipped instants makes both shards of each, as
    // the next attempt.
    let ids = store
        .backfill("scan", t(10), t(21), 1000, t(40))
        .await
        .expect("backfill")
        .expect("job");
    let mut texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
    texts.sort();
    let (ten, twenty) = (t(10).timestamp_millis(), t(20).timestamp_millis());
    assert_eq!(
        texts,
        [
            format!("scan@{ten}.0#2"),
            format!("scan@{ten}.1#2"),
            format!("scan@{twenty}.0#2"),
            format!("scan@{twenty}.1#2"),
        ]
    );
    for id in &ids {
        assert_eq!(staged_firing_shards(&store, id).await, 2);
    }
}

async fn staged_firing_shards(store: &Store, id: &FiringId) -> u32 {
    staged(store, id).await.shards
}

async fn a_re_run_instant_triggers_once_more_at_its_last_shard(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("next", "1h", json!({})), t(0))
        .await
        .expect("put");
    store
        .put_job(&sharded("scan", 2, json!({"on_success": ["next"]})), t(0))
        .await
        .expect("put");
    let first = store
        .stage_slice(&stage("s", t(3601), t(3600)))
        .await
        .expect("stage")
        .firings;
    let ids: Vec<FiringId> = first
        .iter()
        .filter(|f| f.job_id == "scan")
        .map(|f| f.id.clone())
        .collect();
    assert_eq!(ids.len(), 2);
    start_all(&store, &ids, 3600).await;
    assert!(finish_shard(&store, &ids[0], Outcome::Succeeded, 3601)
        .await
        .triggered
        .is_empty());
    assert_eq!(
        finish_shard(&store, &ids[1], Outcome::Succeeded, 3602)
            .await
            .triggered
            .len(),
        1
    );
    // The same instant again, every shard as attempt 2.
    let again = store
        .backfill("scan", t(3600), t(3601), 10, t(3700))
        .await
        .expect("backfill")
        .expect("job");
    assert_eq!(again.len(), 2);
    start_all(&store, &again, 3700).await;
    let one = finish_shard(&store, &again[0], Outcome::Succeeded, 3701).await;
    assert!(
        one.triggered.is_empty(),
        "not at the re-run's first shard: {one:?}"
    );
    let last = finish_shard(&store, &again[1], Outcome::Succeeded, 3702).await;
    assert_eq!(
        last.triggered.len(),
        1,
        "once more at its last shard: {last:?}"
    );
    // Two triggered runs of `next`, besides its own instant.
    let triggered = firings_of(&store, "next").await;
    assert_eq!(triggered.len(), 3, "{triggered:?}");
}
