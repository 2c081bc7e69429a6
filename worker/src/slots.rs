//! Threads as slots: a firing holds one from fetch until its run ends.
//!
//! `free = threads - in_flight` is the number of messages the pull loop may
//! fetch; a slot coming back wakes the pull loop.

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
    /// Serialises a permit change with its gauge update, so gauges end right.
    gauges: Arc<Mutex<()>>,
}

/// One thread, held by one firing; freed on drop.
pub(crate) struct Slot {
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
            gauges: Arc::new(Mutex::new(())),
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
        self.threads - self.free()
    }

    /// Takes a free thread, if any.
    pub(crate) fn try_take(&self) -> Option<Slot> {
        let _gauges = self.gauges.lock().unwrap_or_else(|p| p.into_inner());
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        self.metrics.set_in_flight(self.in_flight(), self.threads);
        Some(Slot {
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
            let _gauges = self.slots.gauges.lock().unwrap_or_else(|p| p.into_inner());
            drop(self.permit.take());
            let slots = &self.slots;
            slots
                .metrics
                .set_in_flight(slots.in_flight(), slots.threads);
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
}
