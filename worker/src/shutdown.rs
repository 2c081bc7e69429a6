//! A running worker's handle and its graceful shutdown.
//!
//! Shutdown: stop fetching (nothing fetched is held unstarted, so nothing
//! needs a NAK) → let running firings finish within the drain grace → cancel
//! the rest (`cancelled`, "worker shutting down") → flush finished events
//! within the flush grace → stop heartbeats and delete the heartbeat key.

use crate::finish::Reporter;
use crate::heartbeat::Heartbeat;
use crate::metrics::Metrics;
use crate::slots::Slots;
use crate::status::WorkerStatus;
use crate::worker::Shared;
use chime_common::supervisor::Supervisor;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The error of firings cancelled at the end of a shutdown's drain grace.
pub const SHUTDOWN_REASON: &str = "worker shutting down";

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every run ended within the drain grace.
    pub drained: bool,
    /// Runs cancelled when the drain grace ended.
    pub cancelled: usize,
    /// Finished events still unpublished when the flush grace ended.
    pub unsent_events: usize,
}

/// A started worker. Call [`WorkerHandle::shutdown`] to stop it gracefully;
/// dropping the handle leaves the worker running in the background.
pub struct WorkerHandle {
    shared: Arc<Shared>,
    slots: Slots,
    heartbeat: Heartbeat,
    firings: TaskTracker,
    stop_fetching: CancellationToken,
    stop_background: CancellationToken,
    fetching: Supervisor,
    background: Supervisor,
}

impl WorkerHandle {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shared: Arc<Shared>,
        slots: Slots,
        heartbeat: Heartbeat,
        firings: TaskTracker,
        stop_fetching: CancellationToken,
        stop_background: CancellationToken,
        fetching: Supervisor,
        background: Supervisor,
    ) -> Self {
        WorkerHandle {
            shared,
            slots,
            heartbeat,
            firings,
            stop_fetching,
            stop_background,
            fetching,
            background,
        }
    }

    /// The worker id.
    pub fn id(&self) -> &str {
        &self.shared.config.worker_id
    }

    /// The group it serves.
    pub fn group(&self) -> &str {
        &self.shared.config.group
    }

    /// Firings held now (being started or running).
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Its state, for `/readyz`: fenced, draining.
    pub fn status(&self) -> WorkerStatus {
        self.shared.status.clone()
    }

    /// Stops gracefully (see the module docs) and returns what happened.
    pub async fn shutdown(self) -> ShutdownReport {
        let config = &self.shared.config;
        tracing::info!(
            in_flight = self.slots.in_flight(),
            "worker shutting down: no more fetches"
        );
        self.shared.status.set_draining();
        self.stop_fetching.cancel();
        self.fetching.wait().await;

        self.firings.close();
        let drained = tokio::time::timeout(config.drain_grace, self.firings.wait())
            .await
            .is_ok();
        let mut cancelled = 0;
        if !drained {
            cancelled = self.shared.running.cancel_all(SHUTDOWN_REASON);
            tracing::warn!(cancelled, grace = ?config.drain_grace, "drain grace over; cancelling the remaining runs");
            self.firings.wait().await;
        }

        let reporter: &Reporter = &self.shared.reporter;
        let unsent_events = reporter.flush(config.flush_grace).await;

        self.stop_background.cancel();
        self.background.wait().await;
        self.heartbeat.remove().await;
        let report = ShutdownReport {
            drained,
            cancelled,
            unsent_events,
        };
        tracing::info!(?report, "worker stopped");
        report
    }
}
