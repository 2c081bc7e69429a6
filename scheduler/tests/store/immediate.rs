//! Immediate publishing (`scheduler/src/firing/immediate.rs`) on both backends:
//! firings staged outside a slice go into the wheel at once, each once,
//! only when due within the pass's horizon, and never once a slice adopted
//! or the publisher marked them.

use super::*;
use chime_scheduler::firing::immediate::{Immediate, ImmediateConfig};
use chime_scheduler::firing::wheel::Wheel;
use chime_scheduler::ops::metrics::Metrics;

both_backends!(
    a_trigger_is_queued_at_once_and_only_once,
    a_retry_is_queued_once_it_is_due_within_the_horizon,
    an_adopted_or_published_firing_is_not_queued,
);

/// A pass with a 3 s horizon and the wheel it fills.
fn immediate(store: &Store) -> (Immediate, Wheel) {
    let wheel = Wheel::new(Metrics::new());
    let pass = Immediate::new(
        ImmediateConfig::default(),
        Duration::from_secs(3),
        store.clone(),
        wheel.clone(),
    );
    (pass, wheel)
}

async fn a_trigger_is_queued_at_once_and_only_once(db: &TestDb) {
    let store = db.store().await;
    let (pass, wheel) = immediate(&store);
    assert!(pass.run_once(t(0)).await.expect("pass").queued.is_empty());
    let id = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    let outcome = pass.run_once(t(0)).await.expect("pass");
    assert_eq!(outcome.queued, vec![id.clone()]);
    let due = wheel.pop_due(t(0).timestamp_millis());
    assert_eq!(due.len(), 1, "due now, so it leaves now");
    assert_eq!(due[0].firing.id, id);
    assert!(due[0].slice.is_none(), "no slice claim owns it");
    // Still unadopted and unpublished, but already queued: not again.
    assert!(pass.run_once(t(1)).await.expect("pass").queued.is_empty());
    assert!(wheel.is_empty());
}

async fn a_retry_is_queued_once_it_is_due_within_the_horizon(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"retry": {"max_attempts": 2}}));
    let id = put_and_trigger(&store, &job, t(0)).await;
    store
        .record_published(std::slice::from_ref(&id), t(0))
        .await
        .expect("mark");
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    let (retry, due) = finish(&store, &id, "w", Outcome::Failed, t(2))
        .await
        .retry
        .expect("a retry");
    assert_eq!(due, t(12));
    let (pass, wheel) = immediate(&store);
    assert!(
        pass.run_once(t(2)).await.expect("pass").queued.is_empty(),
        "10 s away: a slice adopts it in time"
    );
    assert_eq!(
        pass.run_once(t(10)).await.expect("pass").queued,
        vec![retry.clone()]
    );
    assert!(wheel.pop_due(t(11).timestamp_millis()).is_empty());
    let due = wheel.pop_due(t(12).timestamp_millis());
    assert_eq!(due.len(), 1, "it leaves at its instant, not before");
    assert_eq!(
        (due[0].firing.id.clone(), due[0].firing.attempt),
        (retry, 2)
    );
}

async fn an_adopted_or_published_firing_is_not_queued(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({}));
    let adopted = put_and_trigger(&store, &job, t(0)).await;
    let outcome = store
        .stage_slice(&stage("s1", t(2), t(0)))
        .await
        .expect("stage");
    assert_eq!(outcome.firings.len(), 1, "the slice adopted the trigger");
    let published = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("the job exists");
    store
        .record_published(&[published], t(0))
        .await
        .expect("mark");
    let (pass, wheel) = immediate(&store);
    assert!(pass.run_once(t(0)).await.expect("pass").queued.is_empty());
    assert!(wheel.is_empty());
    assert!(store.slice_firings("s1").await.expect("slice")[0].id == adopted);
}
