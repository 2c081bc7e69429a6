//! Lateness and misses in the store, on both backends: a start later than
//! its job's `max_lateness` carries one `late` alert, and instants recorded
//! `skipped` by the misfire policy (or by a calendar, when the job asks)
//! carry one `missed` alert each.

use super::{
    every, finish, plant_previous_release_jobs, rewrite_as_previous_release, stage, start, t,
    TestDb,
};
use chime_common::calendars::Calendar;
use chime_common::protocol::{AlertKind, Outcome};
use chime_common::FiringId;
use chime_scheduler::store::{MissCause, Store};
use chrono::Duration as Span;
use serde_json::json;
use std::time::Duration;

pub(crate) async fn a_start_later_than_max_lateness_raises_one_late_alert(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("late", "1m", json!({"max_lateness": "1s"})), t(0))
        .await
        .expect("put");
    store
        .put_job(&every("relaxed", "1m", json!({})), t(0))
        .await
        .expect("put");
    store
        .stage_slice(&stage("s", t(121), t(0)))
        .await
        .expect("stage");
    let first = FiringId::new("late", t(60).timestamp_millis(), 1);
    let second = FiringId::new("late", t(120).timestamp_millis(), 1);

    // Within max_lateness: measured, no alert.
    let on_time = start(&store, &first, "w1", t(60) + Span::milliseconds(900)).await;
    assert_eq!(on_time.reply.refusal, None);
    assert_eq!(on_time.lateness, Some(Duration::from_millis(900)));
    assert_eq!(on_time.late, None);

    // Beyond it: one `late` alert with the lateness.
    let late = start(&store, &second, "w1", t(125)).await;
    assert_eq!(late.reply.refusal, None);
    assert_eq!(late.lateness, Some(Duration::from_secs(5)));
    let alert = late.late.as_ref().expect("a late alert");
    assert_eq!(alert.kind, AlertKind::Late);
    assert_eq!(alert.lateness_ms, Some(5000));
    assert_eq!(alert.firing_id.as_ref(), Some(&second));
    assert_eq!(
        (alert.job_id.as_str(), alert.group.as_str()),
        ("late", "default")
    );
    assert!(
        alert.message.contains("max_lateness of 1s"),
        "{}",
        alert.message
    );

    // The same worker asking again is not a second start: no second alert.
    let again = start(&store, &second, "w1", t(126)).await;
    assert_eq!(again.reply.refusal, None);
    assert_eq!(again.lateness, None);
    assert_eq!(again.late, None);

    // A job without max_lateness is measured, never alerted.
    let relaxed = FiringId::new("relaxed", t(60).timestamp_millis(), 1);
    let outcome = start(&store, &relaxed, "w2", t(100)).await;
    assert_eq!(outcome.lateness, Some(Duration::from_secs(40)));
    assert_eq!(outcome.late, None);
}

/// Whether the first firing of each of `jobs` (every minute from `t(0)`),
/// started 5 s after its instant, carries a `late` alert.
async fn started_late(store: &Store, jobs: &[&str]) -> Vec<bool> {
    store
        .stage_slice(&stage("late-check", t(61), t(0)))
        .await
        .expect("stage");
    let mut late = Vec::with_capacity(jobs.len());
    for job in jobs {
        let id = FiringId::new(*job, t(60).timestamp_millis(), 1);
        let outcome = start(store, &id, "w", t(65)).await;
        assert_eq!(outcome.reply.refusal, None, "{job}");
        late.push(outcome.late.is_some());
    }
    late
}

/// Jobs written before `jobs.no_max_lateness_version` (`20261128120000`),
/// and jobs a replica of that release rewrites after it (a rolling
/// upgrade), keep their `max_lateness`: a start, which reads that column
/// instead of the spec, must not take such a job for one without.
pub(crate) async fn an_upgrade_keeps_every_max_lateness(db: &TestDb) {
    db.migrate_before(20261128120000).await;
    let jobs = [
        every("strict", "1m", json!({"max_lateness": "1s"})),
        every("relaxed", "1m", json!({})),
        every("rewritten", "1m", json!({})),
    ];
    plant_previous_release_jobs(db, &jobs, t(60)).await;
    let store = db.store().await;
    rewrite_as_previous_release(db, &every("rewritten", "1m", json!({"max_lateness": "1s"}))).await;
    let late = started_late(&store, &["strict", "relaxed", "rewritten"]).await;
    assert_eq!(late, [true, false, true]);
}

/// A replace that gives a job `max_lateness`, unconditionally or on its
/// version, applies it from the next start.
pub(crate) async fn max_lateness_added_by_a_replace_is_applied(db: &TestDb) {
    let store = db.store().await;
    let jobs = ["plain-then-unconditional", "plain-then-versioned"];
    for (job, conditional) in jobs.iter().zip([false, true]) {
        let written = store
            .put_job(&every(job, "1m", json!({})), t(0))
            .await
            .expect("put");
        let strict = every(job, "1m", json!({"max_lateness": "1s"}));
        if conditional {
            store
                .put_job_if(&strict, Some(written.version), t(0))
                .await
                .expect("put on the version");
        } else {
            store.put_job(&strict, t(0)).await.expect("replace");
        }
    }
    assert_eq!(started_late(&store, &jobs).await, [true, true]);
}

pub(crate) async fn misfire_skips_raise_one_missed_alert_each(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("m", "10s", json!({"misfire": "skip"})), t(0))
        .await
        .expect("put");
    // Staged at 200 s: the instants more than the default misfire_threshold
    // (60 s) late, from 10 s to about 130 s, are skipped.
    let outcome = store
        .stage_slice(&stage("s1", t(201), t(200)))
        .await
        .expect("stage");
    let skipped = outcome.skipped;
    assert!(skipped > 0, "some instants misfired");
    assert_eq!(outcome.missed.len() as u64, skipped);
    for missed in &outcome.missed {
        assert_eq!(missed.cause, MissCause::Misfire);
        assert_eq!(missed.alert.kind, AlertKind::Missed);
        assert_eq!(missed.alert.job_id, "m");
        assert!(
            missed.alert.message.contains("misfired"),
            "{}",
            missed.alert.message
        );
    }
    let first = FiringId::new("m", t(10).timestamp_millis(), 1);
    assert!(outcome
        .missed
        .iter()
        .any(|m| m.alert.firing_id.as_ref() == Some(&first)));
    // Staging again records nothing new and alerts nothing again.
    let again = store
        .stage_slice(&stage("s1", t(201), t(200)))
        .await
        .expect("stage");
    assert!(again.missed.is_empty(), "{:?}", again.missed);
}

pub(crate) async fn calendar_skips_alert_only_when_the_job_asks(db: &TestDb) {
    let store = db.store().await;
    let all_of_2030 =
        Calendar::from_json(&json!({"id": "closed", "dates": [], "weekdays": ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]}))
            .expect("a valid calendar");
    store.put_calendar(&all_of_2030, t(0)).await.unwrap();
    store
        .put_job(&every("quiet", "1m", json!({"exclude": ["closed"]})), t(0))
        .await
        .expect("put");
    store
        .put_job(
            &every(
                "loud",
                "1m",
                json!({"exclude": ["closed"], "alert_on_excluded": true}),
            ),
            t(0),
        )
        .await
        .expect("put");
    let outcome = store
        .stage_slice(&stage("s", t(181), t(0)))
        .await
        .expect("stage");
    assert!(outcome.firings.is_empty(), "every date is excluded");
    assert_eq!(outcome.skipped, 6, "3 instants of each job");
    let alerted: Vec<_> = outcome
        .missed
        .iter()
        .map(|m| (m.alert.job_id.as_str(), m.cause))
        .collect();
    assert_eq!(alerted, [("loud", MissCause::Calendar); 3]);
    let message = &outcome.missed[0].alert.message;
    assert!(message.contains("\"closed\""), "{message}");
}

pub(crate) async fn a_retry_is_late_from_when_it_was_due(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "flaky",
        "1h",
        json!({"max_lateness": "2s", "retry": {"max_attempts": 3}}),
    );
    store.put_job(&job, t(0)).await.expect("put");
    let first = store
        .trigger("flaky", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert_eq!(start(&store, &first, "w", t(0)).await.late, None);
    // Retries are due 10 s × attempt after a failure (the suite's delay).
    let (second, due) = finish(&store, &first, "w", Outcome::Failed, t(1))
        .await
        .retry
        .expect("a retry");
    assert_eq!(due, t(11));
    // 12 s after the instant, 1 s after it was due: not late.
    let outcome = start(&store, &second, "w", t(12)).await;
    assert_eq!(outcome.lateness, Some(Duration::from_secs(1)));
    assert_eq!(outcome.late, None);
    let (third, due) = finish(&store, &second, "w", Outcome::Failed, t(13))
        .await
        .retry
        .expect("a retry");
    assert_eq!(due, t(33));
    let outcome = start(&store, &third, "w", t(36)).await;
    let alert = outcome.late.expect("a late alert");
    assert_eq!(alert.lateness_ms, Some(3000));
    assert_eq!(alert.firing_id.as_ref(), Some(&third));
}

/// A start decided one by one (a job with `overlap: forbid`) is judged as a
/// plain one, and a backfilled firing is late from when it was backfilled,
/// not from its instant in the past.
pub(crate) async fn every_start_path_judges_lateness_and_backfills_count_from_their_backfill(
    db: &TestDb,
) {
    let store = db.store().await;
    store
        .put_job(
            &every(
                "forbid",
                "1m",
                json!({"max_lateness": "1s", "overlap": "forbid"}),
            ),
            t(0),
        )
        .await
        .expect("put");
    store
        .stage_slice(&stage("s", t(61), t(0)))
        .await
        .expect("stage");
    let first = FiringId::new("forbid", t(60).timestamp_millis(), 1);
    let outcome = start(&store, &first, "w1", t(63)).await;
    assert_eq!(outcome.reply.refusal, None);
    assert_eq!(outcome.lateness, Some(Duration::from_secs(3)));
    let alert = outcome.late.expect("a late alert from the per-firing path");
    assert_eq!(alert.lateness_ms, Some(3000));
    finish(&store, &first, "w1", Outcome::Succeeded, t(64)).await;

    let backfilled = store
        .backfill("forbid", t(100), t(200), 10, t(1000))
        .await
        .expect("backfill")
        .expect("job");
    assert!(!backfilled.is_empty());
    let outcome = start(
        &store,
        &backfilled[0],
        "w1",
        t(1000) + Span::milliseconds(200),
    )
    .await;
    assert_eq!(outcome.reply.refusal, None);
    assert_eq!(outcome.lateness, Some(Duration::from_millis(200)));
    assert_eq!(outcome.late, None);
}
