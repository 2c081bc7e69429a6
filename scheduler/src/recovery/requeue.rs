//! Why an executing firing is run again, and finding the executing firings
//! that their live worker does not run.
//!
//! A worker lists in each heartbeat the firings it runs (`running`,
//! docs/PROTOCOL.md §7): each start it asked for or was accepted, until
//! JetStream acknowledged its finished event. The store can record a start
//! that the worker never runs: the answer came too late, the worker gave
//! up and handed the message back, and every later delivery was refused
//! `already_started`. Such a firing would wait for its deadline. Instead,
//! once two heartbeats of its worker written after the expiry monitor saw
//! it executing leave it out, it is re-queued as a fault of the
//! infrastructure.
//!
//! Beats are told apart by their revision in the bucket, not by clocks: a
//! beat counts only if its revision is above the newest one read when the
//! firing was first seen executing (so it was written after the start was
//! recorded) and above the last one counted (so a stale read is not taken
//! for a second beat). A heartbeat without `running` (a worker that does
//! not list, or lists too many) resets the count: such a worker is judged
//! by its key alone, as before.

use crate::store::ExecutingRow;
use async_nats::jetstream::kv;
use chime_common::protocol::{heartbeat_key, heartbeat_matches_key, Interruption, WorkerInfo};
use chime_common::FiringId;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Heartbeats in a row that must leave a firing out before it is re-queued:
/// the first may have been written while the worker's start request was
/// still being answered.
pub const MISSED_BEATS: u32 = 2;

/// What ended an attempt that the infrastructure, not the job, ended: the
/// `cause` label of `chime_firings_requeued_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequeueCause {
    /// Its worker's heartbeat key expired.
    Vanished,
    /// Its deadline passed and its worker did not report.
    Deadline,
    /// Its live worker's heartbeats do not list it.
    NotRunning,
    /// Its worker reported the run interrupted.
    Interrupted(Interruption),
}

impl RequeueCause {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            RequeueCause::Vanished => "vanished",
            RequeueCause::Deadline => "deadline",
            RequeueCause::NotRunning => "not_running",
            RequeueCause::Interrupted(interruption) => interruption.as_str(),
        }
    }
}

/// One heartbeat as read from the bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    /// Its revision in the bucket's stream.
    pub revision: u64,
    /// The firings it lists; `None` when it has no `running` list.
    pub running: Option<HashSet<FiringId>>,
}

impl Beat {
    /// Reads the heartbeat of worker `worker_id` of `group` (under its key
    /// `<group>.<id>`, else the older key, the id alone); `None` if there is
    /// none, it cannot be read, or its body names another worker or group
    /// than its key (the worker is then judged by its key alone).
    pub async fn read(workers: &kv::Store, group: &str, worker_id: &str) -> Option<Beat> {
        let mut found = None;
        for key in [heartbeat_key(group, worker_id), worker_id.to_string()] {
            match workers.entry(key.as_str()).await {
                Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                    found = Some((key, entry));
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(worker_id, error = %e, "cannot read a heartbeat");
                    return None;
                }
            }
        }
        let (key, entry) = found?;
        let info = serde_json::from_slice::<WorkerInfo>(&entry.value).ok();
        if info
            .as_ref()
            .is_some_and(|info| !heartbeat_matches_key(&key, info) || info.group != group)
        {
            tracing::warn!(
                key,
                "ignoring a heartbeat whose body names another worker or group"
            );
            return None;
        }
        let running = info
            .and_then(|info| info.running)
            .map(|ids| ids.into_iter().collect());
        Some(Beat {
            revision: entry.revision,
            running,
        })
    }
}

/// What is known of one executing firing's worker's beats.
#[derive(Debug, Clone)]
struct Watch {
    worker_id: String,
    /// The newest revision counted (at first: the newest when first seen).
    last: u64,
    /// Beats in a row since then that left the firing out.
    missed: u32,
}

/// Counts, per executing firing, the heartbeats of its worker that leave it
/// out. Kept in memory by the one expiry monitor; a replica that takes
/// the monitor over starts counting afresh.
#[derive(Debug, Default)]
pub struct NotRunning {
    watches: Mutex<HashMap<FiringId, Watch>>,
}

impl NotRunning {
    /// Updates the counts from `rows` (the executing firings just read) and
    /// `beats` (their live workers' heartbeats, read after the rows), and
    /// returns the firings left out by [`MISSED_BEATS`] beats in a row.
    /// Firings no longer executing are forgotten.
    pub fn judge(&self, rows: &[ExecutingRow], beats: &HashMap<String, Beat>) -> HashSet<FiringId> {
        let mut watches = self.watches.lock().unwrap_or_else(|p| p.into_inner());
        let executing: HashSet<&FiringId> = rows.iter().map(|row| &row.firing_id).collect();
        watches.retain(|id, _| executing.contains(id));
        let mut missing = HashSet::new();
        for row in rows {
            let Some(beat) = beats.get(&row.worker_id) else {
                continue;
            };
            let watch = match watches.get_mut(&row.firing_id) {
                Some(watch) if watch.worker_id == row.worker_id => watch,
                _ => {
                    // The beat read now may predate the start: the next counts.
                    watches.insert(
                        row.firing_id.clone(),
                        Watch {
                            worker_id: row.worker_id.clone(),
                            last: beat.revision,
                            missed: 0,
                        },
                    );
                    continue;
                }
            };
            if beat.revision <= watch.last {
                continue;
            }
            watch.last = beat.revision;
            match &beat.running {
                Some(running) if !running.contains(&row.firing_id) => watch.missed += 1,
                _ => watch.missed = 0,
            }
            if watch.missed >= MISSED_BEATS {
                missing.insert(row.firing_id.clone());
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn row(id: &FiringId, worker: &str) -> ExecutingRow {
        let at: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        ExecutingRow {
            firing_id: id.clone(),
            job_id: id.job_id.clone(),
            group: "g".into(),
            worker_id: worker.into(),
            attempt: id.attempt,
            started_at: at,
            deadline_at: at,
        }
    }

    fn beats(revision: u64, running: Option<&[&FiringId]>) -> HashMap<String, Beat> {
        let running = running.map(|ids| ids.iter().map(|id| (*id).clone()).collect());
        HashMap::from([("w".to_string(), Beat { revision, running })])
    }

    #[test]
    fn two_new_beats_that_leave_a_firing_out_find_it() {
        let judge = NotRunning::default();
        let gone = FiringId::new("a", 1, 1);
        let kept = FiringId::new("b", 1, 1);
        let rows = [row(&gone, "w"), row(&kept, "w")];
        let listing = |revision| beats(revision, Some(&[&kept]));
        assert!(judge.judge(&rows, &listing(10)).is_empty(), "first seen");
        assert!(judge.judge(&rows, &listing(10)).is_empty(), "no new beat");
        assert!(judge.judge(&rows, &listing(12)).is_empty(), "one miss");
        assert!(
            judge.judge(&rows, &listing(12)).is_empty(),
            "a stale read is not a second beat"
        );
        assert_eq!(judge.judge(&rows, &listing(13)), HashSet::from([gone]));
    }

    #[test]
    fn a_listing_or_a_beat_without_a_list_resets_the_count() {
        let judge = NotRunning::default();
        let id = FiringId::new("a", 1, 1);
        let rows = [row(&id, "w")];
        judge.judge(&rows, &beats(1, Some(&[])));
        judge.judge(&rows, &beats(2, Some(&[])));
        judge.judge(&rows, &beats(3, None));
        assert!(judge.judge(&rows, &beats(4, Some(&[]))).is_empty());
        judge.judge(&rows, &beats(5, Some(&[&id])));
        assert!(judge.judge(&rows, &beats(6, Some(&[]))).is_empty());
        assert!(!judge.judge(&rows, &beats(7, Some(&[]))).is_empty());
    }

    #[test]
    fn a_worker_that_never_lists_is_never_judged_by_the_list() {
        let judge = NotRunning::default();
        let id = FiringId::new("a", 1, 1);
        let rows = [row(&id, "w")];
        for revision in 1..10 {
            assert!(judge.judge(&rows, &beats(revision, None)).is_empty());
        }
        assert!(
            judge.judge(&rows, &HashMap::new()).is_empty(),
            "no beat read"
        );
    }
}
