//! Threads as slots: a firing holds one from fetch until its run ends.
//!
//! `free = threads - in_flight - reserved` is the number of messages the
//! pull loop may fetch; a slot coming back wakes the pull loop. A reserved
//! thread is set aside for a message an open pull request
//! (`services/open_pull.rs`) may deliver: not free to fetch into, but idle,
//! so not in flight either.

use crate::metrics::Metrics;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The worker's threads.
#[derive(Clone)]
pub(crate) struct Slots {
    threads: usize,
    semaphore: Arc<Semaphore>,
    freed: Arc<Notify>,
    metrics: Metrics,
    /// Threads reserved for open pull requests. The mutex also serialises a
    /// permit change with its gauge update, so gauges end right.
    reserved: Arc<Mutex<usize>>,
}

/// One thread, held by one firing; freed on drop.
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Slots,
}

/// One thread set aside for a message that may arrive; freed on drop unless
/// it became that message's [`Slot`].
pub(crate) struct Reserved {
    permit: Option<OwnedSemaphorePermit>,
    slots: Slots,
}

impl Slots {
    pub(crate) fn new(threads: usize, metrics: Metrics) -> Self {
        metrics.threads.set(threads as i64);
        metrics.set_in_flight(0, threads);
        Slots {
            threads,
            semaphore: Arc::new(Semaphore::new(threads)),
            freed: Arc::new(Notify::new()),
            metrics,
            reserved: Arc::new(Mutex::new(0)),
        }
    }

    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// Threads not holding a firing.
    pub(crate) fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Firings held.
    pub(crate) fn in_flight(&self) -> usize {
        let reserved = self.lock_reserved();
        self.in_flight_with(*reserved)
    }

    fn in_flight_with(&self, reserved: usize) -> usize {
        self.threads
            .saturating_sub(self.free())
            .saturating_sub(reserved)
    }

    fn lock_reserved(&self) -> std::sync::MutexGuard<'_, usize> {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a free thread, if any.
    pub(crate) fn try_take(&self) -> Option<Slot> {
        let reserved = self.lock_reserved();
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        self.metrics
            .set_in_flight(self.in_flight_with(*reserved), self.threads);
        Some(Slot {
            permit: Some(permit),
            slots: self.clone(),
        })
    }

    /// Sets a free thread aside, if any.
    pub(crate) fn try_reserve(&self) -> Option<Reserved> {
        let mut reserved = self.lock_reserved();
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        *reserved += 1;
        Some(Reserved {
            permit: Some(permit),
            slots: self.clone(),
        })
    }

    /// Resolves when a slot has been freed since the last call (a freed slot is never missed).
    pub(crate) async fn freed(&self) {
        self.freed.notified().await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let slots = &self.slots;
            let reserved = slots.lock_reserved();
            drop(self.permit.take());
            slots
                .metrics
                .set_in_flight(slots.in_flight_with(*reserved), slots.threads);
        }
        self.slots.freed.notify_one();
    }
}

impl Reserved {
    /// The thread, now held by the message that arrived.
    pub(crate) fn into_slot(mut self) -> Slot {
        let slots = self.slots.clone();
        let mut reserved = slots.lock_reserved();
        *reserved = reserved.saturating_sub(1);
        let permit = self.permit.take();
        slots
            .metrics
            .set_in_flight(slots.in_flight_with(*reserved), slots.threads);
        drop(reserved);
        Slot { permit, slots }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        {
            let mut reserved = self.slots.lock_reserved();
            *reserved = reserved.saturating_sub(1);
            drop(permit);
        }
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_bound_in_flight_and_wake_on_release() {
        let slots = Slots::new(2, Metrics::new("default"));
        let a = slots.try_take().unwrap();
        let _b = slots.try_take().unwrap();
        assert!(slots.try_take().is_none());
        assert_eq!(slots.in_flight(), 2);
        drop(a);
        tokio::time::timeout(std::time::Duration::from_secs(1), slots.freed())
            .await
            .expect("a freed slot wakes the waiter");
        assert_eq!(slots.free(), 1);
    }

    #[tokio::test]
    async fn a_reserved_thread_is_neither_free_nor_in_flight_until_it_is_taken() {
        let metrics = Metrics::new("default");
        let slots = Slots::new(3, metrics.clone());
        let kept = slots.try_reserve().unwrap();
        let returned = slots.try_reserve().unwrap();
        assert_eq!((slots.free(), slots.in_flight()), (1, 0));
        assert_eq!(metrics.in_flight.get(), 0);

        drop(returned);
        assert_eq!((slots.free(), slots.in_flight()), (2, 0));

        let slot = kept.into_slot();
        assert_eq!((slots.free(), slots.in_flight()), (2, 1));
        assert_eq!(metrics.in_flight.get(), 1);
        drop(slot);
        assert_eq!((slots.free(), slots.in_flight()), (3, 0));
        assert_eq!(metrics.in_flight.get(), 0);
    }
}
