//! A running worker's handle and its graceful shutdown.
//!
//! Shutdown: stop fetching (nothing fetched is held unstarted, so nothing
//! needs a NAK) → let running firings finish within the drain grace → stop
//! the rest and report them `failed`, interrupted `shutdown`, so they run
//! again without spending the job's attempts → flush finished events
//! within the flush grace → stop heartbeats and delete the heartbeat key.

use crate::config::WorkerConfig;
use crate::firing::finish::Reporter;
use crate::metrics::Metrics;
use crate::running::Running;
use crate::services::heartbeat::Heartbeat;
use crate::slots::Slots;
use crate::status::WorkerStatus;
use chime_runtime::supervisor::{Supervisor, SupervisorConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The error of firings stopped at the end of a shutdown's drain grace.
pub const SHUTDOWN_REASON: &str = "worker shutting down";

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every run ended within the drain grace.
    pub drained: bool,
    /// Runs stopped when the drain grace ended (reported interrupted).
    pub interrupted: usize,
    /// Finished events still unpublished when the flush grace ended.
    pub unsent_events: usize,
}

/// Services stopped together: their supervisor and the token that stops them.
pub(crate) struct Stage {
    pub(crate) supervisor: Supervisor,
    pub(crate) stop: CancellationToken,
}

impl Stage {
    /// A stage whose services are restarted by `config` and counted by `on_restart`.
    pub(crate) fn new(
        config: SupervisorConfig,
        on_restart: impl Fn(&str) + Send + Sync + 'static,
    ) -> Self {
        let stop = CancellationToken::new();
        Stage {
            supervisor: Supervisor::new(config, stop.clone(), on_restart),
            stop,
        }
    }

    /// Stops its services and waits until they have stopped.
    async fn end(&self) {
        self.stop.cancel();
        self.supervisor.wait().await;
    }
}

/// A started worker. Call [`WorkerHandle::shutdown`] to stop it gracefully;
/// dropping the handle leaves the worker running in the background.
pub struct WorkerHandle {
    pub(crate) config: WorkerConfig,
    pub(crate) metrics: Metrics,
    pub(crate) status: WorkerStatus,
    pub(crate) slots: Slots,
    /// The runs, interrupted when the drain grace ends.
    pub(crate) running: Running,
    /// The firings' tasks, waited for within the drain grace.
    pub(crate) firings: TaskTracker,
    /// Finished events still to publish, flushed within the flush grace.
    pub(crate) reporter: Reporter,
    /// Its key is deleted last.
    pub(crate) heartbeat: Heartbeat,
    /// The fetch loop: stopped first.
    pub(crate) fetching: Stage,
    /// The heartbeat, the fence and the cancel listener: stopped once the
    /// runs have ended, so they keep the lease and honour cancels meanwhile.
    pub(crate) background: Stage,
    /// Whether the fetch loop waits with nothing to fetch now.
    pub(crate) waiting: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl WorkerHandle {
    /// The worker id.
    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// The group it serves.
    pub fn group(&self) -> &str {
        &self.config.group
    }

    /// Firings held now (being started or running).
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }

    /// Returns once the fetch loop waits with nothing it can fetch now:
    /// every band drained or held open by a pull request, until a doorbell,
    /// the poll interval, a freed thread or an open request's end wakes it.
    /// A worker just started is there once its first round found its bands
    /// empty. For tests and embedders that must know the worker settled.
    pub async fn waiting(&self) {
        let mut waiting = self.waiting.subscribe();
        // The sender lives as long as this handle, so this cannot fail.
        let _ = waiting.wait_for(|waiting| *waiting).await;
    }

    /// Its metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Its state, for `/readyz`: fenced, draining.
    pub fn status(&self) -> WorkerStatus {
        self.status.clone()
    }

    /// Stops gracefully (see the module docs) and returns what happened.
    pub async fn shutdown(self) -> ShutdownReport {
        let config = &self.config;
        tracing::info!(
            in_flight = self.slots.in_flight(),
            "worker shutting down: no more fetches"
        );
        self.status.set_draining();
        self.fetching.end().await;

        self.firings.close();
        let drained = tokio::time::timeout(config.drain_grace, self.firings.wait())
            .await
            .is_ok();
        let mut interrupted = 0;
        if !drained {
            interrupted = self.running.interrupt_all(SHUTDOWN_REASON);
            tracing::warn!(interrupted, grace = ?config.drain_grace, "drain grace over; stopping the remaining runs, to be run again elsewhere");
            self.firings.wait().await;
        }

        let unsent_events = self.reporter.flush(config.flush_grace).await;

        self.background.end().await;
        self.heartbeat.remove().await;
        let report = ShutdownReport {
            drained,
            interrupted,
            unsent_events,
        };
        tracing::info!(?report, "worker stopped");
        report
    }
}
