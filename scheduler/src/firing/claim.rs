//! Time-slice claims in the `chime-slices` KV bucket.
//!
//! A claim key is `slice.<start ms>.<partition>`. `create` is the
//! compare-and-swap: exactly one replica wins a key. The value records the
//! owner, whether the slice's firings are all published, and a lease instant
//! after which another replica may take the slice over with a
//! revision-checked `update`.
//!
//! Each replica also keeps `replica.<id>` fresh in the same bucket (a
//! liveness instant, renewed several times a second). A claim whose owner's
//! liveness has lapsed is taken over at once, not when its lease ends: the
//! slices a killed replica had claimed ahead are then published on time by
//! another replica instead of up to a slice and a lease late.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Where a claimed slice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimState {
    /// Owned; its firings are staged or being published.
    Claimed,
    /// Every firing of the slice was published and acknowledged.
    Published,
    /// The owner gave it up (shutdown): take it over at once.
    Released,
}

/// The value of a claim key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimValue {
    pub owner: String,
    pub state: ClaimState,
    /// After this instant (UTC ms) an unpublished claim may be taken over.
    pub until_ms: i64,
}

impl ClaimValue {
    /// True when a replica other than `me` may take this claim over;
    /// `owner_gone` says the owner's liveness has lapsed, `lease_over` that
    /// the claim's lease (`until_ms`, longer for an owner seen alive after
    /// a stall, see `slicer.rs`) has ended.
    pub fn takeable_by(&self, me: &str, owner_gone: bool, lease_over: bool) -> bool {
        self.owner != me
            && match self.state {
                ClaimState::Claimed => owner_gone || lease_over,
                ClaimState::Released => true,
                ClaimState::Published => false,
            }
    }
}

/// The value of a replica's liveness key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Liveness {
    /// The replica counts as gone after this instant (UTC ms) unless renewed.
    pub alive_until_ms: i64,
}

/// The liveness key of replica `id`.
pub fn liveness_key(id: &str) -> String {
    format!("replica.{id}")
}

/// The replica id a liveness key names.
pub fn liveness_owner(key: &str) -> Option<&str> {
    key.strip_prefix("replica.")
}

/// The key of partition `partition` of the slice starting at `start_ms`.
pub fn slice_key(start_ms: i64, partition: u32) -> String {
    format!("slice.{start_ms}.{partition}")
}

/// The start instant (UTC ms) encoded in a claim key.
pub fn slice_start(key: &str) -> Option<i64> {
    key.strip_prefix("slice.")?.split('.').next()?.parse().ok()
}

/// Counts each owned slice's firings still waiting for a publish ack, and
/// reports a slice once all of them are acknowledged, so the slicer can mark
/// the claim published.
#[derive(Clone)]
pub struct SliceProgress {
    pending: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    done: mpsc::UnboundedSender<Arc<str>>,
}

impl SliceProgress {
    /// A tracker and the receiver of completed slices.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Arc<str>>) {
        let (done, rx) = mpsc::unbounded_channel();
        (
            SliceProgress {
                pending: Arc::new(Mutex::new(HashMap::new())),
                done,
            },
            rx,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts tracking `count` firings of `slice` (a slice with none is done at once).
    pub fn register(&self, slice: Arc<str>, count: usize) {
        if count == 0 {
            let _ = self.done.send(slice);
        } else {
            *self.lock().entry(slice).or_insert(0) += count;
        }
    }

    /// One firing of `slice` was acknowledged.
    pub fn acked(&self, slice: &Arc<str>) {
        let mut pending = self.lock();
        if let Some(n) = pending.get_mut(slice) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                pending.remove(slice);
                let _ = self.done.send(slice.clone());
            }
        }
    }

    /// Slices with firings not yet acknowledged.
    pub fn unfinished(&self) -> Vec<Arc<str>> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_encode_start_and_partition() {
        let key = slice_key(1_774_661_400_000, 3);
        assert_eq!(key, "slice.1774661400000.3");
        assert_eq!(slice_start(&key), Some(1_774_661_400_000));
        assert_eq!(slice_start("lease.x"), None);
    }

    #[test]
    fn only_stale_or_released_claims_of_others_are_takeable() {
        let claim = |owner: &str, state, until_ms| ClaimValue {
            owner: owner.into(),
            state,
            until_ms,
        };
        assert!(claim("a", ClaimState::Claimed, 100).takeable_by("b", false, true));
        assert!(!claim("a", ClaimState::Claimed, 100).takeable_by("b", false, false));
        assert!(claim("a", ClaimState::Claimed, 100).takeable_by("b", true, false));
        assert!(!claim("a", ClaimState::Claimed, 100).takeable_by("a", true, true));
        assert!(!claim("a", ClaimState::Published, 100).takeable_by("b", true, true));
        assert!(claim("a", ClaimState::Released, 10_000).takeable_by("b", false, false));
        assert_eq!(liveness_owner(&liveness_key("r1-2")), Some("r1-2"));
        assert_eq!(liveness_owner("slice.1.0"), None);
    }

    #[test]
    fn a_slice_is_done_when_every_firing_is_acked() {
        let (progress, mut done) = SliceProgress::new();
        let slice: Arc<str> = Arc::from("slice.1000.0");
        progress.register(slice.clone(), 2);
        progress.acked(&slice);
        assert!(done.try_recv().is_err());
        progress.acked(&slice);
        assert_eq!(done.try_recv().ok().as_deref(), Some("slice.1000.0"));
        let empty: Arc<str> = Arc::from("slice.2000.0");
        progress.register(empty, 0);
        assert_eq!(done.try_recv().ok().as_deref(), Some("slice.2000.0"));
    }
}
