//! Pausing many jobs at once and maintenance windows (`jobs.pause` with
//! `until`) in the store, on both backends.

use super::*;
use chime_scheduler::ops::maintenance_windows::{MaintenanceWindows, MaintenanceWindowsConfig};
use chime_scheduler::store::JobSelection;

both_backends!(
    a_window_ends_only_for_jobs_whose_until_passed,
    a_window_resumes_through_the_misfire_policy,
    a_pause_without_until_or_an_unpausing_put_ends_the_window,
    pause_until_not_in_the_future_is_refused_and_changes_nothing,
    pause_and_resume_many_by_group_and_selector,
    the_maintenance_pass_resumes_what_is_due_and_reports_it,
);

async fn pause(store: &Store, id: &str, until: Option<i64>, now: i64) -> chime_common::Job {
    store
        .set_paused(id, Pause::Until(until.map(t)), t(now))
        .await
        .expect("pause")
        .expect("the job exists")
}

async fn a_window_ends_only_for_jobs_whose_until_passed(db: &TestDb) {
    let store = db.store().await;
    for id in ["a", "b", "c"] {
        store
            .put_job(&every(id, "1h", json!({})), t(0))
            .await
            .expect("put");
    }
    let a = pause(&store, "a", Some(100), 1).await;
    assert_eq!(a.paused_until, Some(t(100)));
    assert_eq!(a.state, JobState::Paused);
    assert_eq!(
        serde_json::to_value(&a).unwrap()["paused_until"],
        json!("2030-01-01T00:01:40.000Z")
    );
    pause(&store, "b", Some(200), 1).await;
    pause(&store, "c", None, 1).await;
    assert_eq!(store.get_job("a").await.unwrap().unwrap(), a);

    assert!(store
        .resume_due_pauses(t(99), 100)
        .await
        .expect("pass")
        .is_empty());
    let resumed = store.resume_due_pauses(t(150), 100).await.expect("pass");
    assert_eq!(
        resumed
            .iter()
            .map(|j| j.spec.id.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
    let a = store.get_job("a").await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.spec.paused, a.paused_until),
        (JobState::Active, false, None)
    );
    let b = store.get_job("b").await.unwrap().unwrap();
    assert_eq!((b.state, b.paused_until), (JobState::Paused, Some(t(200))));
    let c = store.get_job("c").await.unwrap().unwrap();
    assert_eq!((c.state, c.paused_until), (JobState::Paused, None));
    assert!(
        serde_json::to_value(&c)
            .unwrap()
            .get("paused_until")
            .is_none(),
        "written only when set"
    );
    // The batch bounds a pass; the next pass takes the rest.
    pause(&store, "a", Some(300), 160).await;
    let first = store.resume_due_pauses(t(400), 1).await.expect("pass");
    let second = store.resume_due_pauses(t(400), 1).await.expect("pass");
    assert_eq!(first[0].spec.id, "b", "earliest until first");
    assert_eq!(second[0].spec.id, "a");
    assert!(store
        .resume_due_pauses(t(400), 1)
        .await
        .expect("pass")
        .is_empty());
}

async fn a_window_resumes_through_the_misfire_policy(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({"misfire": "skip"})), t(0))
        .await
        .expect("put");
    pause(&store, "a", Some(600), 1).await;
    let during = store
        .stage_slice(&stage("s1", t(600), t(599)))
        .await
        .expect("stage");
    assert!(during.firings.is_empty(), "a paused job is not staged");
    store.resume_due_pauses(t(600), 10).await.expect("pass");
    let after = store
        .stage_slice(&stage("s2", t(602), t(600)))
        .await
        .expect("stage");
    assert!(
        after.misfired > 0,
        "the window's instants go through misfire"
    );
    assert_eq!(after.skipped, after.misfired);
}

async fn a_pause_without_until_or_an_unpausing_put_ends_the_window(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({}));
    store.put_job(&job, t(0)).await.expect("put");
    pause(&store, "a", Some(100), 1).await;
    let indefinite = pause(&store, "a", None, 2).await;
    assert_eq!(indefinite.paused_until, None);
    assert!(store
        .resume_due_pauses(t(150), 10)
        .await
        .expect("pass")
        .is_empty());

    // A put that keeps the job paused (an apply during the window) keeps
    // the window; one that does not ends it.
    pause(&store, "a", Some(300), 200).await;
    let mut still_paused = job.clone();
    still_paused.paused = true;
    still_paused.priority = 9;
    let kept = store.put_job(&still_paused, t(201)).await.expect("put");
    assert_eq!(
        (kept.state, kept.paused_until),
        (JobState::Paused, Some(t(300)))
    );
    assert_eq!(store.get_job("a").await.unwrap().unwrap(), kept);
    let put = store.put_job(&job, t(202)).await.expect("put");
    assert_eq!((put.state, put.paused_until), (JobState::Active, None));
    assert_eq!(
        store.get_job("a").await.unwrap().unwrap().paused_until,
        None
    );
    assert!(store
        .resume_due_pauses(t(400), 10)
        .await
        .expect("pass")
        .is_empty());
}

async fn pause_until_not_in_the_future_is_refused_and_changes_nothing(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({"group": "g"})), t(0))
        .await
        .expect("put");
    let before = store.get_job("a").await.unwrap().unwrap();
    for until in [
        t(10),
        t(9),
        DateTime::from_timestamp(4_200_000_000, 0).unwrap(),
    ] {
        let one = store
            .set_paused("a", Pause::Until(Some(until)), t(10))
            .await;
        assert!(
            matches!(&one, Err(StoreError::Invalid(e)) if e.field == "until"),
            "{until}: {one:?}"
        );
        let selection = JobSelection {
            group: Some("g".into()),
            selector: None,
        };
        let many = store
            .set_paused_many(&selection, Pause::Until(Some(until)), t(10))
            .await;
        assert!(
            matches!(&many, Err(StoreError::Invalid(e)) if e.field == "until"),
            "{until}: {many:?}"
        );
    }
    assert_eq!(store.get_job("a").await.unwrap().unwrap(), before);
}

async fn pause_and_resume_many_by_group_and_selector(db: &TestDb) {
    let store = db.store().await;
    for (id, group, team) in [
        ("a1", "etl", "data"),
        ("a2", "etl", "web"),
        ("b1", "web", "data"),
        ("b2", "web", "web"),
    ] {
        let job = every(id, "1h", json!({"group": group, "labels": {"team": team}}));
        store.put_job(&job, t(0)).await.expect("put");
    }
    let ids = |jobs: &[chime_common::Job]| {
        let mut ids: Vec<String> = jobs.iter().map(|j| j.spec.id.clone()).collect();
        ids.sort();
        ids
    };
    let selection = |group: Option<&str>, selector: Option<&str>| JobSelection {
        group: group.map(str::to_string),
        selector: selector.map(|s| s.parse().expect("a selector")),
    };
    let by_group = store
        .set_paused_many(
            &selection(Some("etl"), None),
            Pause::Until(Some(t(100))),
            t(1),
        )
        .await
        .expect("pause");
    assert_eq!(ids(&by_group), ["a1", "a2"]);
    assert!(by_group
        .iter()
        .all(|j| j.state == JobState::Paused && j.paused_until == Some(t(100))));
    let by_label = store
        .set_paused_many(
            &selection(None, Some("team=data")),
            Pause::Until(None),
            t(2),
        )
        .await
        .expect("pause");
    assert_eq!(ids(&by_label), ["a1", "b1"]);
    let both = store
        .set_paused_many(
            &selection(Some("web"), Some("team=data")),
            Pause::Resume,
            t(3),
        )
        .await
        .expect("resume");
    assert_eq!(ids(&both), ["b1"]);
    let paused: Vec<String> = {
        let page = store
            .list_jobs(&JobFilter {
                state: Some(JobState::Paused),
                ..JobFilter::default()
            })
            .await
            .expect("list");
        ids(&page.items)
    };
    assert_eq!(paused, ["a1", "a2"]);
    let none = store
        .set_paused_many(&selection(Some("nobody"), None), Pause::Resume, t(4))
        .await
        .expect("resume");
    assert!(none.is_empty());
}

async fn the_maintenance_pass_resumes_what_is_due_and_reports_it(db: &TestDb) {
    let store = db.store().await;
    for id in ["a", "b"] {
        store
            .put_job(&every(id, "1h", json!({})), t(0))
            .await
            .expect("put");
    }
    pause(&store, "a", Some(10), 1).await;
    pause(&store, "b", Some(20), 1).await;
    let windows = MaintenanceWindows {
        config: MaintenanceWindowsConfig::default(),
        store: store.clone(),
    };
    assert!(windows
        .run_once(t(9))
        .await
        .expect("pass")
        .resumed
        .is_empty());
    assert_eq!(windows.run_once(t(10)).await.expect("pass").resumed, ["a"]);
    assert_eq!(windows.run_once(t(30)).await.expect("pass").resumed, ["b"]);
    let audit = store
        .list_audit(&chime_scheduler::store::AuditFilter {
            target: Some("a".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("audit");
    let resumes: Vec<_> = audit
        .items
        .iter()
        .map(|e| (e.actor.as_str(), e.verb.as_str(), e.after_version))
        .collect();
    let version = store.get_job("a").await.expect("get").expect("a").version;
    assert_eq!(resumes, [("maintenance", "jobs.resume", Some(version))]);
    assert!(windows
        .run_once(t(40))
        .await
        .expect("pass")
        .resumed
        .is_empty());
    assert!(MaintenanceWindowsConfig {
        batch: 0,
        ..MaintenanceWindowsConfig::default()
    }
    .validate()
    .is_err());
}
