//! The firings this replica published that it has not seen start: the only
//! ones its publisher's marker looks up to write `published`.
//!
//! The marker writes `published` for a firing still `staged` a moment
//! after its ack (`mark_delay`). At a steady rate nearly every firing has
//! started by then, and looking each one up to find the few that have not
//! would be a primary-key probe of `firings` per firing that writes
//! nothing. The publisher's collector adds a
//! firing when JetStream acks it, the start service takes it off when it
//! accepts its start, and the marker sends the store only what is left.
//!
//! This only spares work: the store's mark still changes only a row that
//! is `staged`. A start decided by another replica, or decided before the
//! ack was collected, is not seen here, and its firing is looked up as
//! before. Every firing added is taken off by its start or by the marker,
//! so the set holds at most the firings acked in the last `mark_delay`.

use chime_common::FiringId;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// Acked firings of this replica not yet seen start or marked (cheap to
/// clone: clones share the set).
#[derive(Debug, Clone, Default)]
pub struct Unstarted(Arc<Mutex<HashSet<FiringId>>>);

impl Unstarted {
    /// JetStream acked `id`'s firing message.
    pub fn acked(&self, id: FiringId) {
        self.lock().insert(id);
    }

    /// A start of `id` was accepted: its row is past `staged`.
    pub fn started(&self, id: &FiringId) {
        self.lock().remove(id);
    }

    /// Whether `id` may still need marking: acked, and no start seen.
    pub fn contains(&self, id: &FiringId) -> bool {
        self.lock().contains(id)
    }

    /// The marker is done with `ids` (marked, or left as they are).
    pub fn forget<'a>(&self, ids: impl IntoIterator<Item = &'a FiringId>) {
        let mut set = self.lock();
        for id in ids {
            set.remove(id);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<FiringId>> {
        // A panic while holding it left a set of ids, still a valid one.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firing_is_unstarted_from_its_ack_until_its_start_or_its_mark() {
        let unstarted = Unstarted::default();
        let (a, b) = (FiringId::new("a", 1_000, 1), FiringId::new("b", 1_000, 1));
        assert!(!unstarted.contains(&a));
        unstarted.acked(a.clone());
        unstarted.acked(b.clone());
        assert!(unstarted.contains(&a) && unstarted.contains(&b));
        unstarted.started(&a);
        assert!(!unstarted.contains(&a));
        unstarted.forget([&b]);
        assert!(!unstarted.contains(&b));
        assert!(unstarted.0.lock().unwrap().is_empty());
    }
}
