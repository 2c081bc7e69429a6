//! The time rules in the store: exclusion calendars (`calendars.*`, a job's
//! `exclude` at staging) and jittered instants, on both backends.

use super::{firings_of, spec, stage, t, TestDb};
use chime_common::calendars::Calendar;
use chime_common::schedule::Schedule;
use chime_common::FiringState;
use chime_scheduler::store::StoreError;
use serde_json::json;

fn calendar(id: &str, dates: &[&str]) -> Calendar {
    Calendar::from_json(&json!({"id": id, "dates": dates})).expect("a valid calendar")
}

/// At 21:00 in New York, which is 02:00Z the next day: the local date and
/// the UTC date differ, and the calendar must use the local one.
fn evening_job(exclude: &[&str]) -> chime_common::JobSpec {
    spec(json!({
        "id": "evening", "handler": "test",
        "schedule": {"cron": "0 21 * * *", "tz": "America/New_York"},
        "exclude": exclude,
    }))
}

pub(crate) async fn calendars_round_trip_and_guard_their_jobs(db: &TestDb) {
    let store = db.store().await;
    let holidays = calendar("holidays", &["2030-12-25", "2030-01-01"]);
    assert_eq!(store.put_calendar(&holidays, t(0)).await.unwrap(), holidays);
    assert_eq!(
        store.get_calendar("holidays").await.unwrap(),
        Some(holidays.clone())
    );
    assert_eq!(store.get_calendar("nope").await.unwrap(), None);
    let weekends =
        Calendar::from_json(&json!({"id": "weekends", "dates": [], "weekdays": ["SAT", "SUN"]}))
            .unwrap();
    store.put_calendar(&weekends, t(0)).await.unwrap();
    let ids: Vec<String> = store
        .list_calendars()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, ["holidays", "weekends"]);
    // In the order asked, the missing left out.
    let found = store
        .calendars(&["weekends".into(), "gone".into(), "holidays".into()])
        .await
        .unwrap();
    assert_eq!(found, [weekends.clone(), holidays.clone()]);

    // A job may only exclude calendars that exist ...
    match store
        .put_job(&evening_job(&["holidays", "gone"]), t(0))
        .await
    {
        Err(StoreError::Invalid(e)) => assert_eq!(e.field, "exclude[1]", "{e}"),
        other => panic!("expected invalid_argument, got {other:?}"),
    }
    store
        .put_job(&evening_job(&["holidays"]), t(0))
        .await
        .expect("put");
    // ... and a calendar a job excludes cannot be deleted from under it.
    match store.delete_calendar("holidays").await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("\"evening\""), "{m}"),
        other => panic!("expected conflict, got {other:?}"),
    }
    assert_eq!(
        store.delete_calendar("weekends").await.unwrap(),
        Some(weekends)
    );
    assert_eq!(store.delete_calendar("weekends").await.unwrap(), None);
    store.delete_job("evening", t(0)).await.expect("delete job");
    assert_eq!(
        store.delete_calendar("holidays").await.unwrap(),
        Some(holidays)
    );
}

pub(crate) async fn excluded_local_dates_are_skipped_naming_the_calendar(db: &TestDb) {
    let store = db.store().await;
    // t(0) is 2030-01-01T00:00Z, still 2029-12-31 19:00 in New York.
    store
        .put_calendar(&calendar("holidays", &["2030-01-02"]), t(0))
        .await
        .unwrap();
    store
        .put_job(&evening_job(&["holidays"]), t(0))
        .await
        .expect("put");
    let day = 86_400;
    let outcome = store
        .stage_slice(&stage("s1", t(3 * day), t(0)))
        .await
        .expect("stage");
    // 21:00 local on Dec 31, Jan 1, Jan 2 are 02:00Z on Jan 1, 2, 3.
    let staged: Vec<i64> = outcome
        .firings
        .iter()
        .map(|f| f.scheduled_at.timestamp())
        .collect();
    assert_eq!(staged, [t(7200).timestamp(), t(day + 7200).timestamp()]);
    assert_eq!(outcome.skipped, 1);
    let skipped: Vec<_> = firings_of(&store, "evening")
        .await
        .into_iter()
        .filter(|f| f.state == FiringState::Skipped)
        .collect();
    assert_eq!(skipped.len(), 1);
    assert_eq!(
        skipped[0].scheduled_at,
        t(2 * day + 7200),
        "Jan 2 in New York"
    );
    let error = skipped[0].error.as_deref().unwrap_or("");
    assert!(
        error.contains("\"holidays\"") && error.contains("2030-01-02"),
        "{error}"
    );

    // An edit applies to the instants not yet staged: Jan 2 stays skipped,
    // Jan 3 is now excluded, Jan 4 no longer.
    store
        .put_calendar(&calendar("holidays", &["2030-01-03"]), t(3 * day))
        .await
        .unwrap();
    let outcome = store
        .stage_slice(&stage("s2", t(5 * day), t(3 * day)))
        .await
        .expect("stage");
    let staged: Vec<_> = outcome.firings.iter().map(|f| f.scheduled_at).collect();
    assert_eq!(staged, [t(4 * day + 7200)]);
    let skipped: Vec<_> = firings_of(&store, "evening")
        .await
        .into_iter()
        .filter(|f| f.state == FiringState::Skipped)
        .map(|f| f.scheduled_at)
        .collect();
    assert_eq!(skipped.len(), 2);
    assert!(skipped.contains(&t(3 * day + 7200)) && skipped.contains(&t(2 * day + 7200)));
}

pub(crate) async fn jittered_and_hashed_jobs_stage_the_instants_computed_anywhere(db: &TestDb) {
    let store = db.store().await;
    let jobs = [
        spec(
            json!({"id": "spread-1", "handler": "test", "schedule": {"every": "1m"}, "jitter": "30s"}),
        ),
        spec(json!({"id": "spread-2", "handler": "test", "schedule": {"cron": "H/5 * * * *"}})),
    ];
    let mut expected = Vec::new();
    for job in &jobs {
        store.put_job(job, t(0)).await.expect("put");
        // The same computation in this process: what any replica computes.
        let options = job.time.schedule_options(Some(&job.id));
        let schedule = Schedule::compile_with(&job.schedule, t(0), &options).expect("compiles");
        let mut instants: Vec<_> = schedule
            .iter_after(t(0))
            .take_while(|i| *i < t(1800))
            .collect();
        assert!(instants.len() >= 5, "{}: {instants:?}", job.id);
        expected.append(&mut instants);
    }
    // A second store on the same database, as another replica or a restart.
    let other = db.store().await;
    let outcome = other
        .stage_slice(&stage("s", t(1800), t(0)))
        .await
        .expect("stage");
    let mut staged: Vec<_> = outcome.firings.iter().map(|f| f.scheduled_at).collect();
    staged.sort();
    expected.sort();
    assert_eq!(staged, expected);
    // Jittered instants are not on the minute.
    assert!(outcome
        .firings
        .iter()
        .filter(|f| f.job_id == "spread-1")
        .any(|f| f.scheduled_at.timestamp_subsec_millis() != 0
            || f.scheduled_at.timestamp() % 60 != 0));
}
