//! Traces on both backends: a trigger's `traceparent` is stored with every
//! shard and attempt of its run and read back with each staged firing and
//! by `traced_firings`; a one-shot job put in a trace (a submission) stages
//! its firings in it, whichever statement writes the put, while a
//! recurring job, and any later put without a trace, stages none.

use super::*;
use chime_common::traceparent::TraceParent;
use chime_scheduler::store::TracedFiring;

both_backends!(
    a_trigger_s_trace_is_kept_by_every_shard_and_attempt,
    a_one_shot_job_put_in_a_trace_stages_its_firing_in_it,
);

const GIVEN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn given() -> TraceParent {
    GIVEN.parse().expect("a valid traceparent")
}

async fn a_trigger_s_trace_is_kept_by_every_shard_and_attempt(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "a",
        "1h",
        json!({"retry": {"max_attempts": 2}, "shards": 2}),
    );
    store.put_job(&job, t(0)).await.expect("put");
    let id = store
        .trigger_in_trace("a", None, Some(&given()), t(0))
        .await
        .expect("trigger")
        .expect("the job exists");

    let outcome = store
        .stage_slice(&stage("s1", t(2), t(0)))
        .await
        .expect("stage");
    assert_eq!(
        outcome.firings.len(),
        2,
        "both shards: {:?}",
        outcome.firings
    );
    for firing in outcome
        .firings
        .iter()
        .chain(&store.slice_firings("s1").await.expect("owned"))
    {
        assert_eq!(firing.traceparent, Some(given()), "{}", firing.id);
        assert_eq!(firing.staged_at, t(0), "{}", firing.id);
    }

    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    let (retry, _) = finish(&store, &id, "w", Outcome::Failed, t(2))
        .await
        .retry
        .expect("a retry");
    let retried = staged(&store, &retry).await;
    assert_eq!(
        retried.traceparent,
        Some(given()),
        "the retry keeps the trace"
    );
    assert_eq!(retried.staged_at, t(2));

    let traced = store
        .traced_firings(&[id.to_string(), retry.to_string(), "nope@1#1".to_string()])
        .await
        .expect("read");
    assert_eq!(traced.len(), 2, "{traced:?}");
    for firing in [&id, &retry] {
        assert_eq!(
            traced[&firing.to_string()],
            TracedFiring {
                group: "default".into(),
                traceparent: Some(given()),
            }
        );
    }

    let plain = store
        .trigger("a", None, t(5))
        .await
        .expect("trigger")
        .expect("the job exists");
    assert_eq!(staged(&store, &plain).await.traceparent, None);
    let traced = store
        .traced_firings(&[plain.to_string()])
        .await
        .expect("read");
    assert_eq!(traced[&plain.to_string()].traceparent, None);
}

async fn a_one_shot_job_put_in_a_trace_stages_its_firing_in_it(db: &TestDb) {
    let store = db.store().await;
    let once = |id: &str| {
        spec(json!({"id": id, "schedule": {"at": "2030-01-01T00:00:02Z"}, "handler": "h"}))
    };
    let traced = Some(given());
    // A submission's put: only if the job does not exist.
    store
        .put_job_in_trace(&once("insert"), Some(0), traced.as_ref(), t(0))
        .await
        .expect("put");
    // An unconditional put.
    store
        .put_job_in_trace(&once("upsert"), None, traced.as_ref(), t(0))
        .await
        .expect("put");
    // A put that replaces a version: with a trace it stores it, without one
    // it clears the one stored.
    for (id, first, second) in [
        ("cleared", traced.as_ref(), None),
        ("replaced", None, traced.as_ref()),
    ] {
        store
            .put_job_in_trace(&once(id), None, first, t(0))
            .await
            .expect("put");
        store
            .put_job_in_trace(&once(id), Some(1), second, t(0))
            .await
            .expect("replace");
    }
    // A recurring job's firings start traces of their own.
    store
        .put_job_in_trace(
            &every("recurring", "2s", json!({})),
            None,
            traced.as_ref(),
            t(0),
        )
        .await
        .expect("put");

    let outcome = store
        .stage_slice(&stage("s", t(3), t(0)))
        .await
        .expect("stage");
    let kept: HashMap<String, Option<TraceParent>> = outcome
        .firings
        .iter()
        .map(|f| (f.job_id.clone(), f.traceparent))
        .collect();
    assert_eq!(
        kept,
        HashMap::from([
            ("insert".to_string(), traced),
            ("upsert".to_string(), traced),
            ("cleared".to_string(), None),
            ("replaced".to_string(), traced),
            ("recurring".to_string(), None),
        ])
    );
}
