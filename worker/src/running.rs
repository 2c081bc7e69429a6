//! The firings this worker runs now, and those it finished lately.
//!
//! Cancel requests find a run here by firing id. It also guards against one
//! attempt running twice on this worker: JetStream can deliver an attempt
//! again (a lost ack, an ack after `ack_wait`) and the scheduler accepts a
//! repeated start from the same worker, so the worker itself drops a
//! delivery of an attempt it is running or has just finished.

use chime_common::FiringId;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a finished attempt is remembered.
const RECENT_FOR: Duration = Duration::from_secs(600);
/// The most finished attempts remembered.
const RECENT_MAX: usize = 10_000;

/// How one run is stopped from outside: a token and the first reason given.
#[derive(Clone, Default)]
pub(crate) struct RunControl {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
}

impl RunControl {
    /// Cancels the run; the first reason is the one reported.
    pub(crate) fn cancel(&self, reason: &str) {
        let _ = self.reason.set(reason.to_string());
        self.token.cancel();
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub(crate) fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }
}

#[derive(Default)]
struct Inner {
    running: HashMap<FiringId, RunControl>,
    recent_set: HashSet<FiringId>,
    recent: VecDeque<(Instant, FiringId)>,
    /// Set by `cancel_all`: later claims come back already cancelled.
    closed: Option<String>,
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
            control.cancel(reason);
        }
        inner.running.insert(id.clone(), control.clone());
        Some(control)
    }

    /// Gives back a claim whose start was not accepted.
    pub(crate) fn release(&self, id: &FiringId) {
        self.lock().running.remove(id);
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

    /// Cancels every run, and every run claimed later; returns how many ran.
    pub(crate) fn cancel_all(&self, reason: &str) -> usize {
        let mut inner = self.lock();
        inner.closed = Some(reason.to_string());
        for control in inner.running.values() {
            control.cancel(reason);
        }
        inner.running.len()
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
    fn claims_after_cancel_all_come_back_cancelled() {
        let running = Running::default();
        let first = running.claim(&FiringId::new("job", 1, 1)).unwrap();
        assert_eq!(running.cancel_all("worker shutting down"), 1);
        assert!(first.token().is_cancelled());
        let late = running.claim(&FiringId::new("job", 2, 1)).unwrap();
        assert_eq!(late.reason(), Some("worker shutting down"));
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
