//! History retention: the sweep that deletes final firings past their
//! retention age, keeping each job's newest, in batches from a cursor, on
//! both backends.

use super::*;
use chime_scheduler::firing::wheel::Wheel;
use chime_scheduler::ops::metrics::Metrics;
use chime_scheduler::recovery::housekeeping::{
    Housekeeping, HousekeepingConfig, MAX_PRUNE_BATCHES,
};
use chime_scheduler::store::{Pruned, RetentionCursor};

both_backends!(
    a_sweep_keeps_the_newest_per_job_and_what_is_not_final,
    the_sweep_goes_on_from_its_cursor_and_scans_a_firing_at_most_once,
    a_pass_runs_a_bounded_number_of_batches_and_goes_on_next_pass,
);

/// `count` firings of `job` at `t(first)`, `t(first + 1)`, …, each started
/// at its instant and finished a second later.
async fn finished_firings(store: &Store, job: &str, first: i64, count: i64) {
    for i in first..first + count {
        let id = store
            .trigger(job, None, t(i))
            .await
            .expect("trigger")
            .expect("job");
        assert!(start(store, &id, "w", t(i)).await.reply.accepted);
        finish(store, &id, "w", Outcome::Succeeded, t(i + 1)).await;
    }
}

/// Sweeps from `cursor` in batches of `batch` until the sweep reaches the
/// retention age; returns the batches' reports.
async fn sweep(
    store: &Store,
    before: i64,
    keep: u32,
    cursor: &mut RetentionCursor,
    batch: u32,
) -> Vec<Pruned> {
    let mut batches = Vec::new();
    loop {
        let pruned = store
            .prune_history(t(before), keep, cursor, batch)
            .await
            .expect("prune");
        *cursor = pruned.cursor.clone();
        let done = pruned.scanned < batch as usize;
        batches.push(pruned);
        if done {
            return batches;
        }
    }
}

fn deleted(batches: &[Pruned]) -> u64 {
    batches.iter().map(|b| b.deleted).sum()
}

async fn a_sweep_keeps_the_newest_per_job_and_what_is_not_final(db: &TestDb) {
    let store = db.store().await;
    for job in ["a", "b"] {
        store
            .put_job(&every(job, "1h", json!({})), t(0))
            .await
            .expect("put");
        // Instants 0…4, finished at 1…5.
        finished_firings(&store, job, 0, 5).await;
    }
    // One still running is never pruned.
    let live = store
        .trigger("a", None, t(20))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &live, "w", t(20)).await.reply.accepted);

    let mut cursor = RetentionCursor::default();
    let first = sweep(&store, 5, 2, &mut cursor, 100).await;
    // Finished before 5: instants 0…3 of each job; the newest two (3, 4)
    // are kept whatever their age.
    assert_eq!(deleted(&first), 6);
    let left: Vec<_> = firings_of(&store, "a")
        .await
        .into_iter()
        .map(|f| f.scheduled_at)
        .collect();
    assert_eq!(left, [t(20), t(4), t(3)]);

    // Later, keeping one: the sweep goes on from where it stopped and meets
    // only `a`'s running firing, so `a`'s instant 3 goes; `b` has no firing
    // come of age, and keeps its instant 3 until one does.
    let later = sweep(&store, 100, 1, &mut cursor, 100).await;
    assert_eq!(deleted(&later), 1);
    let instants = |firings: Vec<chime_common::Firing>| -> Vec<_> {
        firings.into_iter().map(|f| f.scheduled_at).collect()
    };
    assert_eq!(instants(firings_of(&store, "a").await), [t(20), t(4)]);
    assert_eq!(instants(firings_of(&store, "b").await), [t(4), t(3)]);

    // A sweep from the start (a new housekeeper) meets every job again.
    let fresh = sweep(&store, 100, 1, &mut RetentionCursor::default(), 100).await;
    assert_eq!(deleted(&fresh), 1);
    assert_eq!(instants(firings_of(&store, "b").await), [t(4)]);
    assert_eq!(
        firings_of(&store, "a").await[0].id,
        live,
        "the running firing stays"
    );
}

async fn the_sweep_goes_on_from_its_cursor_and_scans_a_firing_at_most_once(db: &TestDb) {
    let store = db.store().await;
    // Five jobs firing at the same instants: the cursor must step through
    // ties of `scheduled_at`.
    let jobs = ["a", "b", "c", "d", "e"];
    for job in jobs {
        store
            .put_job(&every(job, "1h", json!({})), t(0))
            .await
            .expect("put");
        finished_firings(&store, job, 0, 4).await;
    }
    let mut cursor = RetentionCursor::default();
    let batches = sweep(&store, 10, 1, &mut cursor, 3).await;
    // 20 firings, 3 a batch: full batches, then a short one, each firing
    // scanned at most once (one a batch deleted ahead of the cursor, at the
    // cursor's instant, is not scanned again).
    let scanned: Vec<usize> = batches.iter().map(|b| b.scanned).collect();
    let (last, full) = scanned.split_last().expect("a batch");
    assert!(full.iter().all(|n| *n == 3) && *last < 3, "{scanned:?}");
    assert!(scanned.iter().sum::<usize>() <= 20, "{scanned:?}");
    assert_eq!(deleted(&batches), 15, "all but each job's newest");
    for job in jobs {
        let left = firings_of(&store, job).await;
        assert_eq!(left.len(), 1, "{job}: {left:?}");
        assert_eq!(left[0].scheduled_at, t(3));
    }
    // Caught up: nothing more to scan until a firing comes of age.
    let again = store
        .prune_history(t(10), 1, &cursor, 3)
        .await
        .expect("prune");
    assert_eq!((again.scanned, again.deleted), (0, 0));
    assert_eq!(again.cursor, cursor);

    // A new firing of `a` comes of age: the sweep meets it alone, and `a`'s
    // older newest goes.
    finished_firings(&store, "a", 10, 1).await;
    let next = store
        .prune_history(t(20), 1, &cursor, 3)
        .await
        .expect("prune");
    assert_eq!((next.scanned, next.deleted), (1, 1));
    assert_eq!(firings_of(&store, "a").await[0].scheduled_at, t(10));
}

async fn a_pass_runs_a_bounded_number_of_batches_and_goes_on_next_pass(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("put");
    let past = MAX_PRUNE_BATCHES as i64 + 10;
    finished_firings(&store, "a", 0, past).await;
    let config = HousekeepingConfig {
        retention: std::time::Duration::from_secs(10),
        keep_per_job: 0,
        // One firing a batch: each batch deletes the one it scanned.
        prune_batch: 1,
        ..HousekeepingConfig::default()
    };
    let metrics = Metrics::new();
    let housekeeping =
        Housekeeping::new(config, store.clone(), Wheel::new(metrics.clone()), metrics);
    let now = t(past + 100);
    let first = housekeeping.run_once(now).await.expect("pass");
    assert_eq!(first.pruned, MAX_PRUNE_BATCHES as u64);
    let second = housekeeping.run_once(now).await.expect("pass");
    assert_eq!(second.pruned, 10, "the next pass goes on from the first");
    assert!(firings_of(&store, "a").await.is_empty());
    assert_eq!(housekeeping.run_once(now).await.expect("pass").pruned, 0);
}
