//! Firings made straight through a store, for tests of the services that
//! handle them (starts, finishes, expiry) without a replica staging them.

use chime_common::protocol::StartRequest;
use chime_common::{FiringId, JobSpec, Limits};
use chime_scheduler::store::Store;
use chrono::{DateTime, Utc};
use serde_json::json;

/// A job that never fires by itself: its firings come from `trigger`.
pub fn never_firing_job(id: &str) -> JobSpec {
    JobSpec::from_json(
        &json!({"id": id, "handler": "noop", "schedule": {"at": "2099-01-01T00:00:00Z"}}),
        &Limits::default(),
    )
    .expect("a valid spec")
}

/// Puts `ids` as jobs that never fire by themselves and triggers one firing
/// of each.
pub async fn triggered(store: &Store, ids: &[&str]) -> Vec<FiringId> {
    let mut firings = Vec::new();
    for id in ids {
        store
            .put_job(&never_firing_job(id), Utc::now())
            .await
            .expect("put");
        let firing = store
            .trigger(id, None, Utc::now())
            .await
            .expect("trigger")
            .expect("a firing");
        firings.push(firing);
    }
    firings
}

/// [`triggered`], then each firing started by `worker` (group `default`) at
/// `at`; panics unless every start was accepted.
pub async fn started(
    store: &Store,
    ids: &[&str],
    worker: &str,
    at: DateTime<Utc>,
) -> Vec<FiringId> {
    let firings = triggered(store, ids).await;
    let requests: Vec<StartRequest> = firings
        .iter()
        .map(|id| StartRequest {
            firing_id: id.clone(),
            worker_id: worker.into(),
            group: "default".into(),
            handler: None,
            payload_sha256: None,
        })
        .collect();
    let decisions = store.start(&requests, at).await.expect("start");
    assert!(
        decisions.iter().all(|d| d.reply.accepted),
        "every start accepted: {decisions:?}"
    );
    firings
}
