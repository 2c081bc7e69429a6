//! Self-fencing: a worker that could not write a heartbeat for its whole
//! lease stops its runs before the scheduler can re-queue them.
//!
//! The scheduler's expiry monitor re-queues a firing (attempt ends `lost`,
//! the next one is staged) only once its worker's key in `chime-workers` is
//! gone, and the bucket drops a key `worker_ttl` after the server stored its
//! last write. Let `s` be the local (monotonic) instant just before the last
//! heartbeat put that the server acknowledged: the server stored it after
//! `s`, so the key lives until at least `s + worker_ttl`, and no second
//! attempt of a firing running here can start before that. The worker fences
//! at `s + lease` with `lease = worker_ttl − fence_margin`: it cancels every
//! handler's token, and a handler that ignores its token is dropped
//! `stop_grace` later. Since `fence_margin > stop_grace` (checked with some
//! slack at build), every run has stopped by
//! `s + worker_ttl − fence_margin + stop_grace < s + worker_ttl`,
//! before any re-queue. Measuring from the send instant (not the ack) keeps
//! this true however slow the acknowledgement was, and monotonic time keeps
//! it true whatever the wall clocks do.
//!
//! Fenced runs end `failed` ("fenced: no heartbeat for …") and are reported
//! interrupted by the fence, so the scheduler runs them again without
//! spending the job's attempts, as it does a lost run; their finished events are
//! published when NATS is back (the scheduler ignores them if it has already
//! re-queued the attempt). While fenced, the worker fetches nothing; the
//! first heartbeat that succeeds lifts the fence.

use crate::metrics::Metrics;
use crate::running::Running;
use crate::status::WorkerStatus;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

struct Inner {
    lease: Duration,
    /// Send instant of the newest heartbeat the server acknowledged.
    renewed: watch::Sender<Instant>,
    fenced: watch::Sender<bool>,
    running: Running,
    status: WorkerStatus,
    metrics: Metrics,
}

/// The worker's heartbeat lease and the fence that ends it.
#[derive(Clone)]
pub(crate) struct Fence(Arc<Inner>);

impl Fence {
    /// A lease renewed by a heartbeat sent at `renewed`.
    pub(crate) fn new(
        lease: Duration,
        renewed: Instant,
        running: Running,
        status: WorkerStatus,
        metrics: Metrics,
    ) -> Self {
        Fence(Arc::new(Inner {
            lease,
            renewed: watch::Sender::new(renewed),
            fenced: watch::Sender::new(false),
            running,
            status,
            metrics,
        }))
    }

    /// A heartbeat sent at `sent` was acknowledged (observed at `now`).
    /// Lifts the fence unless that heartbeat is itself older than the lease.
    pub(crate) fn renew(&self, sent: Instant, now: Instant) {
        self.0.renewed.send_if_modified(|renewed| {
            let newer = sent > *renewed;
            if newer {
                *renewed = sent;
            }
            newer
        });
        if self.is_fenced() && now < sent + self.0.lease {
            self.0.running.unfence();
            self.0.status.set_fenced(false);
            self.0.fenced.send_replace(false);
            tracing::info!("heartbeat written again: fence lifted, fetching firings again");
        }
    }

    pub(crate) fn is_fenced(&self) -> bool {
        *self.0.fenced.borrow()
    }

    /// Waits until the worker is not fenced.
    pub(crate) async fn lifted(&self) {
        let mut fenced = self.0.fenced.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = fenced.wait_for(|fenced| !fenced).await;
    }

    /// One check at `now`: fences the worker if its lease ran out. Returns
    /// the number of runs stopped, `None` if it did not fence now.
    pub(crate) fn check(&self, now: Instant) -> Option<usize> {
        if self.is_fenced() {
            return None;
        }
        let renewed = *self.0.renewed.borrow();
        let silent = now.saturating_duration_since(renewed);
        if silent < self.0.lease {
            return None;
        }
        let reason = format!("fenced: no heartbeat for {:.1}s", silent.as_secs_f64());
        self.0.fenced.send_replace(true);
        self.0.status.set_fenced(true);
        let stopped = self.0.running.fence(&reason);
        self.0.metrics.fenced.inc();
        tracing::error!(
            stopped,
            lease = ?self.0.lease,
            "{reason}: stopping every run and fetching nothing until a heartbeat succeeds, \
             so that no firing runs here while the scheduler re-queues it"
        );
        Some(stopped)
    }

    /// Checks whenever the lease can have run out, until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut renewed = self.0.renewed.subscribe();
        let mut fenced = self.0.fenced.subscribe();
        loop {
            if self.is_fenced() {
                tokio::select! {
                    _ = fenced.wait_for(|fenced| !fenced) => continue,
                    _ = stop.cancelled() => return,
                }
            }
            let expires = *renewed.borrow_and_update() + self.0.lease;
            tokio::select! {
                _ = tokio::time::sleep_until(expires) => {
                    self.check(Instant::now());
                }
                _ = renewed.changed() => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::FiringId;

    const LEASE: Duration = Duration::from_secs(4);

    fn fence(at: Instant) -> (Fence, Running, WorkerStatus, Metrics) {
        let running = Running::default();
        let status = WorkerStatus::default();
        let metrics = Metrics::new("g");
        let fence = Fence::new(LEASE, at, running.clone(), status.clone(), metrics.clone());
        (fence, running, status, metrics)
    }

    #[test]
    fn the_fence_falls_when_the_lease_runs_out_and_lifts_on_a_fresh_beat() {
        let t0 = Instant::now();
        let (fence, running, status, metrics) = fence(t0);
        let run = running.claim(&FiringId::new("job", 1, 1)).unwrap();
        assert_eq!(fence.check(t0 + Duration::from_millis(3999)), None);
        fence.renew(t0 + Duration::from_secs(2), t0 + Duration::from_secs(3));
        assert_eq!(fence.check(t0 + Duration::from_millis(5999)), None);

        assert_eq!(fence.check(t0 + Duration::from_secs(6)), Some(1));
        assert!(fence.is_fenced() && status.is_fenced());
        assert_eq!(
            run.reason(),
            Some("fenced: no heartbeat for 4.0s"),
            "the run is stopped with the silence in its reason"
        );
        assert_eq!(metrics.fenced.get(), 1);
        assert_eq!(fence.check(t0 + Duration::from_secs(7)), None, "once");
        assert_eq!(metrics.fenced.get(), 1);

        // A beat sent before the fence but acknowledged after its own lease ran out proves nothing.
        fence.renew(t0 + Duration::from_secs(3), t0 + Duration::from_secs(8));
        assert!(fence.is_fenced());
        fence.renew(
            t0 + Duration::from_secs(9),
            t0 + Duration::from_millis(9100),
        );
        assert!(!fence.is_fenced() && !status.is_fenced());
        assert!(running
            .claim(&FiringId::new("job", 2, 1))
            .unwrap()
            .stopped()
            .is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_watcher_fences_on_time_and_waits_for_the_lift() {
        let (fence, running, _, _) = fence(Instant::now());
        let run = running.claim(&FiringId::new("job", 1, 1)).unwrap();
        let stop = CancellationToken::new();
        let watcher = tokio::spawn(fence.clone().run(stop.clone()));
        let started = Instant::now();
        run.token().cancelled().await;
        assert_eq!(started.elapsed(), LEASE);
        fence.renew(Instant::now(), Instant::now());
        tokio::time::timeout(Duration::from_secs(1), fence.lifted())
            .await
            .expect("lifted");
        stop.cancel();
        watcher.await.unwrap();
    }
}
