//! The firings this worker runs now, and those it finished lately.
//!
//! Cancel requests find a run here by firing id. Heartbeats list the firings
//! the worker owes the scheduler a report on (see [`Running::listed`]). It also guards against one
//! attempt running twice on this worker: JetStream can deliver an attempt
//! again (a lost ack, an ack after `ack_wait`) and the scheduler accepts a
//! repeated start from the same worker, so the worker itself drops a
//! delivery of an attempt it is running or has just finished.

use chime_common::protocol::{Interruption, Outcome, MAX_LISTED_RUNNING};
use chime_common::FiringId;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a finished attempt is remembered.
const RECENT_FOR: Duration = Duration::from_secs(600);
/// The most finished attempts remembered: more than the scheduler's window
/// for a repeated start (5 s) holds at 10,000 finishes a second.
const RECENT_MAX: usize = 100_000;

/// Why a run was stopped from outside, and the outcome it then reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StopReason {
    pub outcome: Outcome,
    pub reason: String,
    /// Set when the worker stopped the run for a fault that is not the job's.
    pub interrupted: Option<Interruption>,
}

/// How one run is stopped from outside: a token and the first reason given.
#[derive(Clone, Default)]
pub(crate) struct RunControl {
    token: CancellationToken,
    stop: Arc<OnceLock<StopReason>>,
}

impl RunControl {
    /// Cancels the run (outcome `cancelled`); the first reason is the one reported.
    pub(crate) fn cancel(&self, reason: &str) {
        self.stop(Outcome::Cancelled, reason, None);
    }

    /// Stops the run for a fault of the worker or of NATS (`interrupted`):
    /// it reports `failed` with the interruption, which the scheduler
    /// retries without spending the job's attempts.
    pub(crate) fn interrupt(&self, interrupted: Interruption, reason: &str) {
        self.stop(Outcome::Failed, reason, Some(interrupted));
    }

    /// Stops the run, which then reports `outcome`; the first stop is the one reported.
    fn stop(&self, outcome: Outcome, reason: &str, interrupted: Option<Interruption>) {
        let _ = self.stop.set(StopReason {
            outcome,
            reason: reason.to_string(),
            interrupted,
        });
        self.token.cancel();
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub(crate) fn stopped(&self) -> Option<&StopReason> {
        self.stop.get()
    }

    #[cfg(test)]
    pub(crate) fn reason(&self) -> Option<&str> {
        self.stop.get().map(|stop| stop.reason.as_str())
    }
}

#[derive(Default)]
struct Inner {
    running: HashMap<FiringId, RunControl>,
    /// Accepted starts whose finished event JetStream has not acknowledged.
    listed: BTreeSet<FiringId>,
    recent_set: HashSet<FiringId>,
    recent: VecDeque<(Instant, FiringId)>,
    /// Set by `cancel_all`: later claims come back already cancelled.
    closed: Option<String>,
    /// Set by `fence` until `unfence`: claims meanwhile come back already stopped.
    fenced: Option<String>,
}

/// Firings held by this worker.
#[derive(Clone, Default)]
pub(crate) struct Running {
    inner: Arc<Mutex<Inner>>,
}

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave it inconsistent (single map operations).
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Claims `id` for a start; `None` when this worker already holds or just finished it.
    pub(crate) fn claim(&self, id: &FiringId) -> Option<RunControl> {
        let mut inner = self.lock();
        if inner.running.contains_key(id) || inner.recent_set.contains(id) {
            return None;
        }
        let control = RunControl::default();
        if let Some(reason) = &inner.closed {
            control.interrupt(Interruption::Shutdown, reason);
        } else if let Some(reason) = &inner.fenced {
            control.interrupt(Interruption::Fenced, reason);
        }
        inner.running.insert(id.clone(), control.clone());
        Some(control)
    }

    /// Gives back a claim whose start was not accepted.
    pub(crate) fn release(&self, id: &FiringId) {
        self.lock().running.remove(id);
    }

    /// Records that the scheduler accepted the start of `id`: the worker
    /// lists it in its heartbeats until [`Running::reported`].
    pub(crate) fn accepted(&self, id: &FiringId) {
        self.lock().listed.insert(id.clone());
    }

    /// Records that JetStream acknowledged the finished event of `id` (or
    /// that the worker gave up on it): the scheduler has it or never will.
    pub(crate) fn reported(&self, id: &FiringId) {
        self.lock().listed.remove(id);
    }

    /// The firings a heartbeat lists as running: every firing whose start
    /// is asked for or accepted and whose finished event is not yet
    /// acknowledged. A start still awaiting its answer is listed too, so
    /// that a beat written while the answer travels does not deny a run
    /// the worker is about to begin. `None` past [`MAX_LISTED_RUNNING`]: a
    /// heartbeat without the list makes the scheduler judge the worker by
    /// its key alone, as for a worker that never lists.
    pub(crate) fn listed(&self) -> Option<Vec<FiringId>> {
        let inner = self.lock();
        let mut listed: BTreeSet<&FiringId> = inner.listed.iter().collect();
        listed.extend(inner.running.keys());
        (listed.len() <= MAX_LISTED_RUNNING).then(|| listed.into_iter().cloned().collect())
    }

    /// Records that the run of `id` ended.
    pub(crate) fn finish(&self, id: &FiringId, now: Instant) {
        let mut inner = self.lock();
        inner.running.remove(id);
        while let Some((at, _)) = inner.recent.front() {
            if now.duration_since(*at) < RECENT_FOR && inner.recent.len() < RECENT_MAX {
                break;
            }
            if let Some((_, old)) = inner.recent.pop_front() {
                inner.recent_set.remove(&old);
            }
        }
        if inner.recent_set.insert(id.clone()) {
            inner.recent.push_back((now, id.clone()));
        }
    }

    /// Cancels the run of `id`; false if it does not run here.
    pub(crate) fn cancel(&self, id: &FiringId, reason: &str) -> bool {
        match self.lock().running.get(id) {
            Some(control) => {
                control.cancel(reason);
                true
            }
            None => false,
        }
    }

    /// Stops every run at the end of a shutdown's drain grace, and every
    /// run claimed later; returns how many ran. They end `failed`,
    /// interrupted by the shutdown, never `cancelled`: only a user cancels,
    /// and the scheduler runs an interrupted attempt again.
    pub(crate) fn interrupt_all(&self, reason: &str) -> usize {
        let mut inner = self.lock();
        inner.closed = Some(reason.to_string());
        for control in inner.running.values() {
            control.interrupt(Interruption::Shutdown, reason);
        }
        inner.running.len()
    }

    /// Stops every run with outcome `failed`, interrupted by the fence, and
    /// every run claimed until [`Running::unfence`]; returns how many ran.
    /// The scheduler runs a fenced attempt again without spending the job's
    /// attempts, as it does a run it finds lost.
    pub(crate) fn fence(&self, reason: &str) -> usize {
        let mut inner = self.lock();
        inner.fenced = Some(reason.to_string());
        for control in inner.running.values() {
            control.interrupt(Interruption::Fenced, reason);
        }
        inner.running.len()
    }

    /// Lets claims run again after a fence.
    pub(crate) fn unfence(&self) {
        self.lock().fenced = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_claimed_once_until_long_after_it_finished() {
        let running = Running::default();
        let id = FiringId::new("job", 1, 1);
        let control = running.claim(&id).unwrap();
        assert!(running.claim(&id).is_none(), "running");
        assert!(running.cancel(&id, "replaced"));
        assert!(control.token().is_cancelled());
        assert_eq!(control.reason(), Some("replaced"));
        control.cancel("second reason");
        assert_eq!(control.reason(), Some("replaced"));
        let now = Instant::now();
        running.finish(&id, now);
        assert!(running.claim(&id).is_none(), "just finished");
        assert!(!running.cancel(&id, "late"));
        running.finish(&FiringId::new("job", 2, 1), now + RECENT_FOR);
        assert!(running.claim(&id).is_some(), "forgotten after RECENT_FOR");
    }

    #[test]
    fn claims_after_interrupt_all_come_back_interrupted() {
        let running = Running::default();
        let first = running.claim(&FiringId::new("job", 1, 1)).unwrap();
        assert_eq!(running.interrupt_all("worker shutting down"), 1);
        assert!(first.token().is_cancelled());
        let stopped = first.stopped().unwrap();
        assert_eq!(stopped.outcome, Outcome::Failed, "never cancelled");
        assert_eq!(stopped.interrupted, Some(Interruption::Shutdown));
        let late = running.claim(&FiringId::new("job", 2, 1)).unwrap();
        assert_eq!(late.reason(), Some("worker shutting down"));
    }

    #[test]
    fn heartbeats_list_starts_until_their_report_is_acknowledged() {
        let running = Running::default();
        let id = FiringId::new("job", 1, 1);
        running.claim(&id).unwrap();
        assert_eq!(running.listed(), Some(vec![id.clone()]), "asked to start");
        let refused = FiringId::new("job", 2, 1);
        running.claim(&refused).unwrap();
        running.release(&refused);
        assert_eq!(
            running.listed(),
            Some(vec![id.clone()]),
            "refused: not listed"
        );
        running.accepted(&id);
        running.finish(&id, Instant::now());
        assert_eq!(running.listed(), Some(vec![id.clone()]), "report unsent");
        running.reported(&id);
        assert_eq!(running.listed(), Some(vec![]));
        for i in 0..=MAX_LISTED_RUNNING {
            running.accepted(&FiringId::new("job", i as i64, 1));
        }
        assert_eq!(
            running.listed(),
            None,
            "past the bound the list is left out"
        );
    }

    #[test]
    fn a_fence_fails_every_run_until_lifted() {
        let running = Running::default();
        let first = running.claim(&FiringId::new("job", 1, 1)).unwrap();
        assert_eq!(running.fence("fenced: no heartbeat for 4.0s"), 1);
        assert!(first.token().is_cancelled());
        assert_eq!(first.stopped().unwrap().outcome, Outcome::Failed);
        assert_eq!(
            first.stopped().unwrap().interrupted,
            Some(Interruption::Fenced)
        );
        let during = running.claim(&FiringId::new("job", 2, 1)).unwrap();
        assert_eq!(during.reason(), Some("fenced: no heartbeat for 4.0s"));
        running.release(&FiringId::new("job", 2, 1));
        running.unfence();
        let after = running.claim(&FiringId::new("job", 3, 1)).unwrap();
        assert!(after.stopped().is_none());
    }

    #[test]
    fn a_released_claim_can_be_claimed_again() {
        let running = Running::default();
        let id = FiringId::new("job", 1, 1);
        running.claim(&id).unwrap();
        running.release(&id);
        assert!(running.claim(&id).is_some());
    }
}
