//! What the worker is doing now, for `/readyz`: waiting for its NATS
//! objects, taking firings, fenced, or draining; and for `/healthz`, which
//! of its services keep failing.

use chime_runtime::supervisor::Health;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Inner {
    /// Start-up finished: every NATS object found, the fetch loop running.
    started: AtomicBool,
    fenced: AtomicBool,
    draining: AtomicBool,
    /// What start-up waits for, while it waits.
    waiting_for: Mutex<Option<String>>,
    /// The supervisors' views of their services, for `/healthz`.
    services: Mutex<Vec<Health>>,
}

/// A worker's state, shared with its admin endpoint. Get it with
/// [`Worker::status`](crate::Worker::status) before starting the worker, so
/// `/readyz` can answer (not ready) while start-up waits.
#[derive(Debug, Clone, Default)]
pub struct WorkerStatus(Arc<Inner>);

impl WorkerStatus {
    /// Why the worker does not take firings now; `None` when it does.
    pub fn not_ready(&self) -> Option<String> {
        let inner = &self.0;
        if inner.draining.load(Ordering::Relaxed) {
            return Some("draining: shutting down".into());
        }
        if inner.fenced.load(Ordering::Relaxed) {
            return Some(
                "fenced: no heartbeat within its lease; runs stopped, not fetching".into(),
            );
        }
        if !inner.started.load(Ordering::Relaxed) {
            let waiting = inner
                .waiting_for
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            return Some(match waiting {
                Some(what) => format!("starting: waiting for {what}"),
                None => "starting".into(),
            });
        }
        None
    }

    /// The services that keep failing, with their last error; empty when
    /// the worker is healthy.
    pub fn failing(&self) -> Vec<(String, String)> {
        let services = self.0.services.lock().unwrap_or_else(|p| p.into_inner());
        services.iter().flat_map(Health::failing).collect()
    }

    pub(crate) fn watch(&self, health: Health) {
        self.0
            .services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(health);
    }

    /// Whether the worker has fenced itself.
    pub fn is_fenced(&self) -> bool {
        self.0.fenced.load(Ordering::Relaxed)
    }

    pub(crate) fn set_waiting_for(&self, what: Option<String>) {
        *self.0.waiting_for.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    pub(crate) fn set_started(&self) {
        self.0.started.store(true, Ordering::Relaxed);
    }

    pub(crate) fn set_fenced(&self, fenced: bool) {
        self.0.fenced.store(fenced, Ordering::Relaxed);
    }

    pub(crate) fn set_draining(&self) {
        self.0.draining.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_started_and_neither_fenced_nor_draining() {
        let status = WorkerStatus::default();
        assert_eq!(status.not_ready().as_deref(), Some("starting"));
        status.set_waiting_for(Some("a scheduler to create consumer fire_g_a_high".into()));
        assert_eq!(
            status.not_ready().as_deref(),
            Some("starting: waiting for a scheduler to create consumer fire_g_a_high")
        );
        status.set_waiting_for(None);
        status.set_started();
        assert_eq!(status.not_ready(), None);
        status.set_fenced(true);
        assert!(status.not_ready().unwrap().starts_with("fenced"));
        status.set_fenced(false);
        assert_eq!(status.not_ready(), None);
        status.set_draining();
        assert!(status.not_ready().unwrap().starts_with("draining"));
    }
}
