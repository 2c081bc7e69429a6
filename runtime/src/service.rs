//! The one shape of a periodic service, and the one runner that owns its loop
//! (after River's `internal/maintenance` services).
//!
//! A periodic service only says what one pass does: [`Service::run_once`]
//! takes the time (`now`), so tests call it directly with the instant they
//! want, and returns what it did. [`Periodic`] owns everything around the
//! pass, once for every service: the interval, the optional lease (only the
//! holder runs passes; see [`Leadership`]), what a failed pass means, the
//! test signal, and shutdown. The [`crate::supervisor`] runs the runner and
//! restarts it when it fails.
//!
//! A failed pass whose error [`is_retryable`](ServiceError::is_retryable)
//! (an outage: the database or NATS is unreachable for now) is logged,
//! counted and tried again next tick: restarting would not bring the
//! database back sooner. After `max_retries` such failures in a row, or at
//! the first failure that is not an outage, the run fails and the supervisor
//! restarts it with backoff and reports it in the health if it keeps failing.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::signal::TestSignal;

/// A service that does its work in passes.
pub trait Service: Send + Sync + 'static {
    /// What one pass did, for logs, metrics, test signals and tests.
    type Outcome: fmt::Debug + Clone + Send + 'static;
    /// Why a pass failed.
    type Error: ServiceError;

    /// One pass at `now`.
    fn run_once(
        &self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Self::Outcome, Self::Error>> + Send;
}

/// A failed pass, told apart by what the runner should do about it.
pub trait ServiceError: std::error::Error + Send + Sync + 'static {
    /// True for an outage the next tick may not meet (retry without a
    /// restart); false for a failure a restart or an operator must see.
    fn is_retryable(&self) -> bool;
}

/// Whether this process may run a single-active service now (a lease).
pub trait Leadership: Send + Sync + 'static {
    /// Takes or renews the right to run at `now`; true while held.
    fn hold(&self, now: DateTime<Utc>) -> BoxFuture<'_, bool>;
    /// Gives the right up, so another process takes it at once.
    fn release(&self) -> BoxFuture<'_, ()>;
}

/// How a periodic service is run.
#[derive(Debug, Clone)]
pub struct PeriodicConfig {
    /// The pause between the starts of two passes.
    pub interval: Duration,
    /// Retryable failures in a row tried again next tick before the run fails.
    pub max_retries: u32,
}

impl PeriodicConfig {
    /// A pass every `interval`, retrying outages for up to a minute of ticks
    /// (at least 3) before the supervisor is told.
    pub fn every(interval: Duration) -> Self {
        let per_minute = Duration::from_secs(60).as_nanos() / interval.as_nanos().max(1);
        PeriodicConfig {
            interval,
            max_retries: u32::try_from(per_minute).unwrap_or(u32::MAX).max(3),
        }
    }

    /// Checks the settings; the message names the service.
    pub fn validate(&self, service: &str) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err(format!("{service}: the interval must be above zero"));
        }
        Ok(())
    }
}

/// What a pass came to, as test signals report it.
#[derive(Debug, Clone, PartialEq)]
pub enum Pass<O> {
    /// The pass ran and did this.
    Done(O),
    /// The pass failed; `retryable` failures are tried again next tick.
    Failed { error: String, retryable: bool },
    /// Another process holds the lease: no pass.
    Standby,
}

/// A run ended in failure; the supervisor restarts it.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E: ServiceError> {
    #[error("{service}: {error}")]
    Failed { service: &'static str, error: E },
    #[error("{service}: {retries} passes in a row met an outage, the last: {error}")]
    Outage {
        service: &'static str,
        retries: u32,
        error: E,
    },
}

/// Asks a periodic service for a pass now, not at its next tick: the work
/// it handles has just appeared (a commit that another service made).
/// Wakes that come while a pass runs ask for one more pass after it.
#[derive(Clone, Default, Debug)]
pub struct Wake(Arc<tokio::sync::Notify>);

impl Wake {
    /// Asks for a pass as soon as the running one (if any) ends.
    pub fn wake(&self) {
        self.0.notify_one();
    }

    async fn woken(wake: Option<&Wake>) {
        match wake {
            Some(wake) => wake.0.notified().await,
            None => std::future::pending().await,
        }
    }
}

/// Told of every failed pass (a metric).
type OnFailure<E> = Arc<dyn Fn(&E) + Send + Sync>;

/// Runs a [`Service`] every interval until shutdown.
pub struct Periodic<S: Service> {
    name: &'static str,
    service: Arc<S>,
    config: PeriodicConfig,
    lease: Option<Arc<dyn Leadership>>,
    signal: TestSignal<Pass<S::Outcome>>,
    on_failure: OnFailure<S::Error>,
    wake: Option<Wake>,
}

impl<S: Service> Clone for Periodic<S> {
    fn clone(&self) -> Self {
        Periodic {
            name: self.name,
            service: self.service.clone(),
            config: self.config.clone(),
            lease: self.lease.clone(),
            signal: self.signal.clone(),
            on_failure: self.on_failure.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<S: Service> Periodic<S> {
    /// Runs `service` (named `name` in logs) as `config` says, on every process.
    pub fn new(name: &'static str, service: Arc<S>, config: PeriodicConfig) -> Self {
        Periodic {
            name,
            service,
            config,
            lease: None,
            signal: TestSignal::default(),
            on_failure: Arc::new(|_| {}),
            wake: None,
        }
    }

    /// The name its logs, metrics and `/healthz` use.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs passes only while `lease` is held, and releases it when the run ends.
    pub fn with_lease(mut self, lease: Arc<dyn Leadership>) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Reports every pass on `signal`.
    pub fn with_signal(mut self, signal: TestSignal<Pass<S::Outcome>>) -> Self {
        self.signal = signal;
        self
    }

    /// Also runs a pass whenever `wake` is woken, between ticks.
    pub fn with_wake(mut self, wake: Wake) -> Self {
        self.wake = Some(wake);
        self
    }

    /// Calls `count` on every failed pass (a metric).
    pub fn on_failure(mut self, count: impl Fn(&S::Error) + Send + Sync + 'static) -> Self {
        self.on_failure = Arc::new(count);
        self
    }

    /// A pass every interval until `shutdown`, the first at once. Returns Ok
    /// at shutdown and an error when a pass fails in a way a restart must
    /// handle (see the module documentation).
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), RunError<S::Error>> {
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retries = 0;
        let ended = loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = Wake::woken(self.wake.as_ref()) => {}
                _ = shutdown.cancelled() => break Ok(()),
            }
            if let Some(lease) = &self.lease {
                if !lease.hold(Utc::now()).await {
                    self.signal.emit(|| Pass::Standby);
                    continue;
                }
            }
            let error = match self.service.run_once(Utc::now()).await {
                Ok(outcome) => {
                    retries = 0;
                    tracing::trace!(service = self.name, ?outcome, "pass done");
                    self.signal.emit(|| Pass::Done(outcome));
                    continue;
                }
                Err(error) => error,
            };
            (self.on_failure)(&error);
            let retryable = error.is_retryable();
            self.signal.emit(|| Pass::Failed {
                error: error.to_string(),
                retryable,
            });
            if !retryable {
                break Err(RunError::Failed {
                    service: self.name,
                    error,
                });
            }
            if retries >= self.config.max_retries {
                break Err(RunError::Outage {
                    service: self.name,
                    retries,
                    error,
                });
            }
            retries += 1;
            tracing::warn!(service = self.name, error = %error, retries, "pass failed; trying again next tick");
        };
        if let Some(lease) = &self.lease {
            lease.release().await;
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Mutex;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Fault(&'static str, bool);

    impl ServiceError for Fault {
        fn is_retryable(&self) -> bool {
            self.1
        }
    }

    /// Counts its passes; fails them as `faults` says, in order, then succeeds.
    #[derive(Default)]
    struct Counter {
        passes: AtomicU32,
        faults: Mutex<Vec<Fault>>,
    }

    impl Service for Counter {
        type Outcome = u32;
        type Error = Fault;

        async fn run_once(&self, _now: DateTime<Utc>) -> Result<u32, Fault> {
            let pass = self.passes.fetch_add(1, Ordering::SeqCst) + 1;
            let mut faults = self.faults.lock().unwrap();
            if faults.is_empty() {
                Ok(pass)
            } else {
                Err(faults.remove(0))
            }
        }
    }

    fn runner(faults: Vec<Fault>, max_retries: u32) -> Periodic<Counter> {
        let counter = Counter {
            faults: Mutex::new(faults),
            ..Counter::default()
        };
        Periodic::new(
            "counter",
            Arc::new(counter),
            PeriodicConfig {
                interval: Duration::from_secs(1),
                max_retries,
            },
        )
    }

    /// Runs `runner` in a task until `shutdown`.
    fn spawn(
        runner: &Periodic<Counter>,
        shutdown: &CancellationToken,
    ) -> tokio::task::JoinHandle<Result<(), RunError<Fault>>> {
        let (runner, shutdown) = (runner.clone(), shutdown.clone());
        tokio::spawn(async move { runner.run(shutdown).await })
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_runs_every_interval_until_shutdown() {
        let runner = runner(vec![], 3);
        let mut passes = runner.signal.subscribe();
        let shutdown = CancellationToken::new();
        let run = spawn(&runner, &shutdown);
        passes
            .wait_for(Duration::from_millis(10), "the first pass at once", |p| {
                *p == Pass::Done(1)
            })
            .await;
        passes
            .wait_for(Duration::from_millis(3010), "three more passes", |p| {
                *p == Pass::Done(4)
            })
            .await;
        shutdown.cancel();
        assert!(run.await.unwrap().is_ok());
        assert_eq!(runner.service.passes.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_runs_a_pass_between_ticks() {
        let wake = Wake::default();
        let runner = runner(vec![], 3).with_wake(wake.clone());
        let mut passes = runner.signal.subscribe();
        let shutdown = CancellationToken::new();
        let run = spawn(&runner, &shutdown);
        passes
            .wait_for(Duration::from_millis(10), "the first pass at once", |p| {
                *p == Pass::Done(1)
            })
            .await;
        wake.wake();
        passes
            .wait_for(
                Duration::from_millis(10),
                "a pass long before the next tick",
                |p| *p == Pass::Done(2),
            )
            .await;
        shutdown.cancel();
        assert!(run.await.unwrap().is_ok());
        assert_eq!(runner.service.passes.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_retried_next_tick_and_counted() {
        let failures = Arc::new(AtomicU32::new(0));
        let counted = failures.clone();
        let runner =
            runner(vec![Fault("down", true), Fault("down", true)], 3).on_failure(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            });
        let mut passes = runner.signal.subscribe();
        let shutdown = CancellationToken::new();
        let run = spawn(&runner, &shutdown);
        passes
            .wait_for(Duration::from_secs(5), "a pass after the outage", |p| {
                *p == Pass::Done(3)
            })
            .await;
        assert_eq!(failures.load(Ordering::SeqCst), 2);
        shutdown.cancel();
        assert!(run.await.unwrap().is_ok(), "an outage alone is no failure");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_longer_than_max_retries_fails_the_run() {
        let runner = runner((0..10).map(|_| Fault("down", true)).collect(), 3);
        let ended = runner.run(CancellationToken::new()).await;
        assert!(
            matches!(ended, Err(RunError::Outage { retries: 3, .. })),
            "{ended:?}"
        );
        assert_eq!(runner.service.passes.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_that_is_not_an_outage_fails_the_run_at_once() {
        let runner = runner(vec![Fault("corrupt row", false)], 3);
        let ended = runner.run(CancellationToken::new()).await;
        assert_eq!(ended.unwrap_err().to_string(), "counter: corrupt row");
        assert_eq!(runner.service.passes.load(Ordering::SeqCst), 1);
    }

    /// A lease that is held while `held` says so; counts its releases.
    #[derive(Default)]
    struct Switch {
        held: AtomicBool,
        released: AtomicU32,
    }

    impl Leadership for Switch {
        fn hold(&self, _now: DateTime<Utc>) -> BoxFuture<'_, bool> {
            Box::pin(async { self.held.load(Ordering::SeqCst) })
        }
        fn release(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {
                self.released.fetch_add(1, Ordering::SeqCst);
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_lease_holder_runs_passes_and_it_releases_at_shutdown() {
        let lease = Arc::new(Switch::default());
        let runner = runner(vec![], 3).with_lease(lease.clone());
        let mut passes = runner.signal.subscribe();
        let shutdown = CancellationToken::new();
        let run = spawn(&runner, &shutdown);
        for _ in 0..3 {
            passes
                .wait_for(Duration::from_secs(2), "a standby tick", |p| {
                    *p == Pass::Standby
                })
                .await;
        }
        assert_eq!(runner.service.passes.load(Ordering::SeqCst), 0);
        lease.held.store(true, Ordering::SeqCst);
        passes
            .wait_for(Duration::from_secs(2), "a pass once held", |p| {
                *p == Pass::Done(1)
            })
            .await;
        shutdown.cancel();
        assert!(run.await.unwrap().is_ok());
        assert_eq!(lease.released.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn max_retries_cover_about_a_minute_of_ticks() {
        assert_eq!(
            PeriodicConfig::every(Duration::from_secs(1)).max_retries,
            60
        );
        assert_eq!(
            PeriodicConfig::every(Duration::from_secs(60)).max_retries,
            3
        );
        assert!(PeriodicConfig::every(Duration::ZERO)
            .validate("expiry")
            .is_err());
    }
}
