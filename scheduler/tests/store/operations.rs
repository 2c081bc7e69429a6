//! The store's part of the weekly operations: labels and the
//! selectors that page through them, conditional puts (`if_version`), and
//! an operator's cancel of one firing. Run on both backends like the rest
//! of the suite.

use super::*;
use chime_common::labels::Selector;
use chime_scheduler::store::CANCELLED_BY_OPERATOR;

both_backends!(
    labels_are_stored_and_read_back,
    selectors_choose_exactly_the_matching_jobs_on_every_page,
    if_version_zero_creates_only_a_missing_job,
    if_version_replaces_only_the_version_it_names,
    concurrent_conditional_puts_have_one_winner,
    cancel_ends_a_waiting_firing_and_a_later_start_is_refused,
    cancel_of_a_running_firing_names_its_worker,
    cancel_of_an_ended_or_unknown_firing_changes_nothing,
    cancel_of_a_queued_firing_frees_the_queue,
);

/// Labels of job `i` of the selector test: a spread of teams, envs and flags.
fn labels_of(i: usize) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert(
        "team".into(),
        json!(["data", "web", "ops"][i % 3].to_string()),
    );
    if !i.is_multiple_of(4) {
        labels.insert("env".into(), json!(["dev", "prod", "staging"][i % 3]));
    }
    if i.is_multiple_of(5) {
        labels.insert("critical".into(), json!(""));
    }
    if i.is_multiple_of(7) {
        labels.insert("k8s.io/tier".into(), json!("batch"));
    }
    Value::Object(labels)
}

async fn labels_are_stored_and_read_back(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "a",
        "1h",
        json!({"labels": {"team": "data", "k8s.io/x": "", "v": "a b,c"}}),
    );
    let put = store.put_job(&job, t(0)).await.expect("put");
    assert_eq!(put.spec.labels, job.labels);
    let got = store.get_job("a").await.expect("get").expect("exists");
    assert_eq!(got.spec.labels.get("v").map(String::as_str), Some("a b,c"));
    assert_eq!(got, put);
}

async fn selectors_choose_exactly_the_matching_jobs_on_every_page(db: &TestDb) {
    let store = db.store().await;
    let mut specs = Vec::new();
    for i in 0..40 {
        let group = if i % 2 == 0 { "even" } else { "odd" };
        let job = every(
            &format!("job-{i:02}"),
            "1h",
            json!({"labels": labels_of(i), "group": group}),
        );
        store.put_job(&job, t(i as i64)).await.expect("put");
        specs.push(job);
    }
    for text in [
        "team=data",
        "team==web,env!=dev",
        "env!=prod",
        "critical",
        "!env",
        "team in (data,ops),!critical",
        "env notin (dev,staging)",
        "k8s.io/tier=batch,team=data",
        "team=nobody",
        "team=data,team!=data",
    ] {
        let selector: Selector = text.parse().expect("a selector");
        for group in [None, Some("even")] {
            let mut expected: Vec<String> = specs
                .iter()
                .filter(|s| selector.matches(&s.labels))
                .filter(|s| group.is_none_or(|g| s.group == g))
                .map(|s| s.id.clone())
                .collect();
            expected.reverse(); // newest first
            let mut seen = Vec::new();
            let mut after = None;
            for _ in 0..100 {
                let page = store
                    .list_jobs(&JobFilter {
                        selector: Some(selector.clone()),
                        group: group.map(str::to_string),
                        limit: 3,
                        after,
                        ..JobFilter::default()
                    })
                    .await
                    .expect("list");
                assert!(page.items.len() <= 3);
                assert!(
                    page.next.is_none() || page.items.len() == 3,
                    "{text}: a page before the last is full"
                );
                seen.extend(page.items.into_iter().map(|j| j.spec.id));
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen, expected, "{text} in {group:?}");
        }
    }
}

async fn if_version_zero_creates_only_a_missing_job(db: &TestDb) {
    let store = db.store().await;
    let first = every("a", "1h", json!({"priority": 1}));
    let created = store
        .put_job_if(&first, Some(0), t(0))
        .await
        .expect("created");
    assert_eq!(created.version, 1);
    let second = every("a", "1h", json!({"priority": 9}));
    let refused = store.put_job_if(&second, Some(0), t(1)).await;
    match refused {
        Err(StoreError::Conflict(message)) => {
            assert!(message.contains("version 1"), "{message}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        store.get_job("a").await.expect("get"),
        Some(created),
        "a refused put changes nothing"
    );
}

async fn if_version_replaces_only_the_version_it_names(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("v1");
    store
        .put_job(&every("a", "1h", json!({"priority": 2})), t(1))
        .await
        .expect("v2");
    let stale = store
        .put_job_if(&every("a", "1h", json!({"priority": 3})), Some(1), t(2))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict(ref m)) if m.contains("version 2")),
        "{stale:?}"
    );
    let current = store.get_job("a").await.expect("get").expect("exists");
    assert_eq!(current.spec.priority, 2);
    assert_eq!(current.version, 2);

    let replaced = store
        .put_job_if(&every("a", "2h", json!({"priority": 4})), Some(2), t(3))
        .await
        .expect("the named version is replaced");
    assert_eq!(replaced.version, 3);
    assert_eq!(replaced.created_at, current.created_at);
    assert_eq!(replaced.next_fire_at, Some(t(3 + 7200)));
    assert_eq!(store.get_job("a").await.expect("get"), Some(replaced));

    let missing = store
        .put_job_if(&every("b", "1h", json!({})), Some(1), t(4))
        .await;
    assert!(
        matches!(missing, Err(StoreError::Conflict(ref m)) if m.contains("does not exist")),
        "{missing:?}"
    );
    assert_eq!(store.get_job("b").await.expect("get"), None);
}

async fn concurrent_conditional_puts_have_one_winner(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("v1");
    for round in 0..3_i64 {
        let version = round + 1;
        let puts = (0..8).map(|i| {
            let store = store.clone();
            async move {
                let spec = every("a", "1h", json!({"priority": i}));
                store.put_job_if(&spec, Some(version), t(10 + round)).await
            }
        });
        let results = futures::future::join_all(puts).await;
        let won: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        for r in &results {
            assert!(
                matches!(r, Ok(_) | Err(StoreError::Conflict(_))),
                "losers see a conflict: {r:?}"
            );
        }
        let stored = store.get_job("a").await.expect("get").expect("exists");
        assert_eq!(stored.version, version + 1);
    }
    let creates = (0..8).map(|i| {
        let store = store.clone();
        async move {
            let spec = every("fresh", "1h", json!({"priority": i}));
            store.put_job_if(&spec, Some(0), t(20)).await
        }
    });
    let results = futures::future::join_all(creates).await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
}

async fn cancel_ends_a_waiting_firing_and_a_later_start_is_refused(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({}));
    let staged = put_and_trigger(&store, &job, t(0)).await;
    let published = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    store
        .record_published(std::slice::from_ref(&published), t(1))
        .await
        .expect("published");
    assert_eq!(
        firing(&store, &published).await.state,
        FiringState::Published
    );

    for id in [&staged, &published] {
        let outcome = store
            .cancel_firing(id, t(2))
            .await
            .expect("cancel")
            .expect("exists");
        assert_eq!(outcome.running, None);
        assert_eq!(outcome.firing.state, FiringState::Cancelled);
        assert_eq!(outcome.firing.error.as_deref(), Some(CANCELLED_BY_OPERATOR));
        assert_eq!(outcome.firing.finished_at, Some(t(2)));
        assert_eq!(firing(&store, id).await, outcome.firing);
        let refused = start(&store, id, "w1", t(3)).await;
        assert!(!refused.reply.accepted, "{refused:?}");
        assert_eq!(firing(&store, id).await.state, FiringState::Cancelled);
    }
    assert!(
        store
            .overdue_staged(t(1_000_000), 100)
            .await
            .expect("overdue")
            .is_empty(),
        "a cancelled firing is no longer staged"
    );
}

async fn cancel_of_a_running_firing_names_its_worker(db: &TestDb) {
    let store = db.store().await;
    let running = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    assert!(start(&store, &running, "w7", t(1)).await.reply.accepted);
    let outcome = store
        .cancel_firing(&running, t(2))
        .await
        .expect("cancel")
        .expect("exists");
    assert_eq!(outcome.firing.state, FiringState::Executing);
    let to_cancel = outcome.running.expect("a run to cancel");
    assert_eq!(to_cancel.firing_id, running);
    assert_eq!(to_cancel.worker_id, "w7");
    // The worker reports the cancelled run; it ends cancelled, not retried.
    let reported = finish(&store, &running, "w7", Outcome::Cancelled, t(3)).await;
    assert!(reported.applied);
    assert_eq!(reported.retry, None);
    assert_eq!(firing(&store, &running).await.state, FiringState::Cancelled);
}

async fn cancel_of_an_ended_or_unknown_firing_changes_nothing(db: &TestDb) {
    let store = db.store().await;
    let done = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    assert!(start(&store, &done, "w1", t(1)).await.reply.accepted);
    finish(&store, &done, "w1", Outcome::Succeeded, t(2)).await;
    let before = firing(&store, &done).await;
    let refused = store.cancel_firing(&done, t(3)).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(ref m)) if m.contains("succeeded")),
        "{refused:?}"
    );
    assert_eq!(firing(&store, &done).await, before);
    let unknown = FiringId::new("a", 12345, 1);
    assert_eq!(
        store.cancel_firing(&unknown, t(3)).await.expect("cancel"),
        None
    );
}

async fn cancel_of_a_queued_firing_frees_the_queue(db: &TestDb) {
    let store = db.store().await;
    let job = every("q", "1h", json!({"overlap": "queue"}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    assert!(start(&store, &first, "w1", t(1)).await.reply.accepted);
    let queued = store
        .trigger("q", None, t(1))
        .await
        .expect("trigger")
        .expect("job");
    let held = start(&store, &queued, "w1", t(2)).await;
    assert!(!held.reply.accepted, "queued behind the running one");
    store
        .cancel_firing(&queued, t(3))
        .await
        .expect("cancel")
        .expect("exists");
    // A new firing can take the queue's place, and the cancelled one is
    // not released when the running one ends.
    let next = store
        .trigger("q", None, t(4))
        .await
        .expect("trigger")
        .expect("job");
    assert!(!start(&store, &next, "w1", t(5)).await.reply.accepted);
    let ended = finish(&store, &first, "w1", Outcome::Succeeded, t(6)).await;
    assert_eq!(ended.released, vec![next]);
    assert_eq!(firing(&store, &queued).await.state, FiringState::Cancelled);
}
