//! The time wheel: staged firings wait in memory and leave at their instant.
//!
//! XXL-JOB keeps a 60-slot ring keyed by second, so it fires to the second.
//! Chime orders firings by (due millisecond, priority descending, arrival) in a
//! B-tree and the publisher sleeps until the earliest one on its alarm
//! (`alarm.rs`), which wakes to the microsecond on Linux (a timerfd) and to
//! tokio's whole millisecond elsewhere; within one instant, higher
//! priorities leave first.

use crate::ops::metrics::Metrics;
use crate::store::StagedFiring;
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// A staged firing and the slice claim that owns it (None: rescued, owned by no slice).
#[derive(Debug, Clone)]
pub struct WheelEntry {
    pub firing: StagedFiring,
    pub slice: Option<Arc<str>>,
}

type Key = (i64, Reverse<u8>, u64);

#[derive(Default)]
struct State {
    entries: BTreeMap<Key, WheelEntry>,
    seq: u64,
}

/// The wheel, shared by the slicer (which inserts) and the publisher loop (which pops).
#[derive(Clone)]
pub struct Wheel {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    metrics: Metrics,
}

impl Wheel {
    /// An empty wheel.
    pub fn new(metrics: Metrics) -> Self {
        Wheel {
            state: Arc::new(Mutex::new(State::default())),
            changed: Arc::new(Notify::new()),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the map half-updated
        // (each operation is one insert or split), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds firings, each to leave at its `due_at`.
    pub fn insert(&self, firings: impl IntoIterator<Item = StagedFiring>, slice: Option<Arc<str>>) {
        let mut state = self.lock();
        for firing in firings {
            state.seq += 1;
            let key = (
                firing.due_at.timestamp_millis(),
                Reverse(firing.priority),
                state.seq,
            );
            state.entries.insert(
                key,
                WheelEntry {
                    firing,
                    slice: slice.clone(),
                },
            );
        }
        self.metrics.wheel_staged.set(state.entries.len() as i64);
        drop(state);
        self.changed.notify_one();
    }

    /// Puts entries back (a failed publish), to leave at `due_ms`.
    pub fn reinsert(&self, entries: Vec<WheelEntry>, due_ms: i64) {
        let mut state = self.lock();
        for entry in entries {
            state.seq += 1;
            let key = (due_ms, Reverse(entry.firing.priority), state.seq);
            state.entries.insert(key, entry);
        }
        self.metrics.wheel_staged.set(state.entries.len() as i64);
        drop(state);
        self.changed.notify_one();
    }

    /// Removes and returns every entry due at or before `now_ms`, in leaving order.
    pub fn pop_due(&self, now_ms: i64) -> Vec<WheelEntry> {
        let mut state = self.lock();
        let later = state.entries.split_off(&(now_ms + 1, Reverse(u8::MAX), 0));
        let due = std::mem::replace(&mut state.entries, later);
        self.metrics.wheel_staged.set(state.entries.len() as i64);
        due.into_values().collect()
    }

    /// The earliest due instant held, in UTC milliseconds.
    pub fn next_due_ms(&self) -> Option<i64> {
        self.lock().entries.keys().next().map(|k| k.0)
    }

    /// Firings held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until something is inserted.
    pub async fn changed(&self) {
        self.changed.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::FiringId;
    use chrono::{TimeZone, Utc};
    use std::time::Duration;

    fn firing(job: &str, due_ms: i64, priority: u8) -> StagedFiring {
        let at = Utc.timestamp_millis_opt(due_ms).unwrap();
        StagedFiring {
            id: FiringId::new(job, due_ms, 1),
            job_id: job.into(),
            group: "default".into(),
            priority,
            handler: "noop".into(),
            payload: bytes::Bytes::from_static(b"null"),
            scheduled_at: at,
            due_at: at,
            attempt: 1,
            timeout: Duration::from_secs(60),
            publish_seq: 0,
            shards: 1,
            traceparent: None,
            staged_at: at,
            worker_id: None,
        }
    }

    #[test]
    fn firings_leave_in_time_order_then_priority_order() {
        let wheel = Wheel::new(Metrics::new());
        wheel.insert(
            vec![
                firing("late", 2_000, 9),
                firing("low", 1_000, 1),
                firing("high", 1_000, 9),
                firing("mid", 1_000, 5),
            ],
            None,
        );
        assert_eq!(wheel.next_due_ms(), Some(1_000));
        assert!(wheel.pop_due(999).is_empty());
        let due: Vec<String> = wheel
            .pop_due(1_000)
            .into_iter()
            .map(|e| e.firing.job_id)
            .collect();
        assert_eq!(due, vec!["high", "mid", "low"]);
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.pop_due(5_000).len(), 1);
        assert!(wheel.is_empty());
    }

    #[test]
    fn reinserted_entries_wait_for_their_new_instant() {
        let wheel = Wheel::new(Metrics::new());
        wheel.insert(vec![firing("a", 1_000, 5)], None);
        let due = wheel.pop_due(1_000);
        wheel.reinsert(due, 1_250);
        assert!(wheel.pop_due(1_249).is_empty());
        assert_eq!(wheel.pop_due(1_250).len(), 1);
    }
}
