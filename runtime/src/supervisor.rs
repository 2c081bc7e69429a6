//! Runs a process's long-running services and restarts the ones that fail.
//!
//! A service is a factory of futures (`Fn() -> Future<Output = Result<(), E>>`),
//! so a failed run can be rebuilt from scratch: re-subscribe, re-open its
//! consumer. Each run is its own task, so a panic is caught as a
//! [`tokio::task::JoinError`] and does not take the process down.
//!
//! A run *fails* when it panics, returns an error, or returns `Ok` before
//! shutdown (a service must run until shutdown: returning early would leave a
//! zombie process that looks alive). A failed service is restarted after an
//! exponential backoff (`initial_backoff` doubling up to `max_backoff`); each
//! restart is reported to the `on_restart` callback (a metric) and logged
//! with the error. A run that lasts `healthy_after` resets the backoff and the
//! failure count.
//!
//! Health: a service that has failed `unhealthy_after` times in a row, without
//! a run lasting `healthy_after` in between, makes the supervisor unhealthy
//! (see [`Health::failing`]) until one of its runs lasts `healthy_after`.
//!
//! Periodic services ([`crate::service`]) are spawned with
//! [`Supervisor::spawn_periodic`]: the runner retries outages itself and
//! fails the run, for a restart here, on anything else.
//!
//! Shutdown: cancel the token given to [`Supervisor::new`] (services watch the
//! same token). A run that ends after cancellation, however it ends, is not
//! restarted.

use crate::service::{Periodic, Service};
use backoff::backoff::Backoff as _;
use backoff::{ExponentialBackoff, ExponentialBackoffBuilder};
use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How the supervisor restarts services and judges their health.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// Pause before the first restart after a healthy run.
    pub initial_backoff: Duration,
    /// The pause doubles after each failure in a row, up to this.
    pub max_backoff: Duration,
    /// A run that lasts this long counts as healthy: backoff and failure count reset.
    pub healthy_after: Duration,
    /// Failures in a row (no healthy run in between) that make the process unhealthy.
    pub unhealthy_after: u32,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            healthy_after: Duration::from_secs(30),
            unhealthy_after: 5,
        }
    }
}

impl SupervisorConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.initial_backoff.is_zero() || self.initial_backoff > self.max_backoff {
            return Err(
                "supervisor: initial_backoff must be above zero and at most max_backoff".into(),
            );
        }
        if self.healthy_after.is_zero() {
            return Err("supervisor: healthy_after must be above zero".into());
        }
        if self.unhealthy_after == 0 {
            return Err("supervisor: unhealthy_after must be at least 1".into());
        }
        Ok(())
    }

    fn backoff(&self) -> ExponentialBackoff {
        ExponentialBackoffBuilder::new()
            .with_initial_interval(self.initial_backoff)
            .with_max_interval(self.max_backoff)
            .with_multiplier(2.0)
            // Deterministic pauses: services of one replica do not contend
            // with each other, and tests can count on the doubling.
            .with_randomization_factor(0.0)
            .with_max_elapsed_time(None)
            .build()
    }
}

/// What the supervisor knows of one service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceStatus {
    /// Failures in a row since the last healthy run.
    pub consecutive_failures: u32,
    /// Restarts since start-up.
    pub restarts: u64,
    /// The last failure, for `/healthz` and logs.
    pub last_error: Option<String>,
}

/// A cheap handle on the health of every supervised service.
#[derive(Debug, Clone, Default)]
pub struct Health {
    services: Arc<Mutex<BTreeMap<String, ServiceStatus>>>,
    unhealthy_after: u32,
}

impl Health {
    fn update(&self, name: &str, change: impl FnOnce(&mut ServiceStatus)) {
        let mut services = self.services.lock().unwrap_or_else(|p| p.into_inner());
        change(services.entry(name.to_string()).or_default());
    }

    /// The services that keep failing, with their last error; empty when healthy.
    pub fn failing(&self) -> Vec<(String, String)> {
        let services = self.services.lock().unwrap_or_else(|p| p.into_inner());
        services
            .iter()
            .filter(|(_, s)| s.consecutive_failures >= self.unhealthy_after)
            .map(|(name, s)| (name.clone(), s.last_error.clone().unwrap_or_default()))
            .collect()
    }

    /// One service's status, if it is supervised.
    pub fn status(&self, name: &str) -> Option<ServiceStatus> {
        let services = self.services.lock().unwrap_or_else(|p| p.into_inner());
        services.get(name).cloned()
    }
}

/// Runs services until shutdown, restarting those that fail.
pub struct Supervisor {
    config: SupervisorConfig,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    health: Health,
    on_restart: Arc<dyn Fn(&str) + Send + Sync>,
}

impl Supervisor {
    /// A supervisor whose services stop when `shutdown` is cancelled;
    /// `on_restart(service)` is called before each restart (count it).
    pub fn new(
        config: SupervisorConfig,
        shutdown: CancellationToken,
        on_restart: impl Fn(&str) + Send + Sync + 'static,
    ) -> Self {
        let health = Health {
            services: Arc::default(),
            unhealthy_after: config.unhealthy_after,
        };
        Supervisor {
            config,
            shutdown,
            tracker: TaskTracker::new(),
            health,
            on_restart: Arc::new(on_restart),
        }
    }

    /// The health handle (for `/healthz`).
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Runs the service `name`: `factory()` now, and again after each failure.
    pub fn spawn<F, Fut, E>(&self, name: &str, factory: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let name = name.to_string();
        self.health.update(&name, |_| {});
        let config = self.config.clone();
        let shutdown = self.shutdown.clone();
        let health = self.health.clone();
        let on_restart = self.on_restart.clone();
        self.tracker.spawn(async move {
            let mut backoff = config.backoff();
            loop {
                let mut run = tokio::spawn(factory());
                let healthy = tokio::time::sleep(config.healthy_after);
                tokio::pin!(healthy);
                let mut proven = false;
                let outcome = loop {
                    tokio::select! {
                        outcome = &mut run => break outcome,
                        _ = &mut healthy, if !proven => {
                            proven = true;
                            backoff.reset();
                            health.update(&name, |s| s.consecutive_failures = 0);
                        }
                    }
                };
                let stopping = shutdown.is_cancelled();
                let error = match outcome {
                    Ok(Ok(())) if stopping => return,
                    Ok(Ok(())) => "stopped before shutdown".to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(join) if join.is_panic() => format!("panicked: {}", panic_message(join.into_panic())),
                    Err(join) => format!("task ended: {join}"),
                };
                if stopping {
                    tracing::warn!(service = %name, error = %error, "service failed during shutdown; not restarted");
                    return;
                }
                let pause = backoff.next_backoff().unwrap_or(config.max_backoff);
                health.update(&name, |s| {
                    s.consecutive_failures = s.consecutive_failures.saturating_add(1);
                    s.last_error = Some(error.clone());
                });
                tracing::error!(service = %name, error = %error, restart_in = ?pause, "service failed; restarting");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.cancelled() => return,
                }
                on_restart(&name);
                health.update(&name, |s| s.restarts = s.restarts.saturating_add(1));
            }
        });
    }

    /// Runs the periodic service `runner` until shutdown, under its own name.
    pub fn spawn_periodic<S: Service>(&self, runner: Periodic<S>) {
        let shutdown = self.shutdown.clone();
        self.spawn(runner.name(), move || {
            let (runner, shutdown) = (runner.clone(), shutdown.clone());
            async move { runner.run(shutdown).await }
        });
    }

    /// Stops accepting services; [`Supervisor::wait`] then returns once all have stopped.
    pub fn close(&self) {
        self.tracker.close();
    }

    /// Waits until every service has stopped for good (after shutdown, and [`Supervisor::close`]).
    pub async fn wait(&self) {
        self.tracker.wait().await
    }
}

/// The message a panic carried, when it was text.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(a panic payload that is not text)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn config() -> SupervisorConfig {
        SupervisorConfig {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            healthy_after: Duration::from_secs(10),
            unhealthy_after: 3,
        }
    }

    /// A supervisor whose restarts are counted in the returned counter.
    fn supervisor(shutdown: &CancellationToken) -> (Supervisor, Arc<AtomicU32>) {
        let restarts = Arc::new(AtomicU32::new(0));
        let counted = restarts.clone();
        let supervisor = Supervisor::new(config(), shutdown.clone(), move |service| {
            assert_eq!(service, "flaky");
            counted.fetch_add(1, Ordering::SeqCst);
        });
        (supervisor, restarts)
    }

    async fn until(condition: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if condition() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not met");
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_service_is_restarted_and_counted() {
        let shutdown = CancellationToken::new();
        let (supervisor, restarts) = supervisor(&shutdown);
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let token = shutdown.clone();
        supervisor.spawn("flaky", move || {
            let run = counted.fetch_add(1, Ordering::SeqCst);
            let token = token.clone();
            async move {
                if run < 2 {
                    panic!("run {run} breaks");
                }
                token.cancelled().await;
                Ok::<(), String>(())
            }
        });
        until(|| runs.load(Ordering::SeqCst) == 3).await;
        assert_eq!(restarts.load(Ordering::SeqCst), 2);
        let status = supervisor.health().status("flaky").unwrap();
        assert_eq!(status.restarts, 2);
        assert!(status.last_error.unwrap().contains("run 1 breaks"));
        // Two failures in a row stay below `unhealthy_after`.
        assert!(supervisor.health().failing().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_service_that_keeps_failing_is_unhealthy_until_it_runs() {
        let shutdown = CancellationToken::new();
        let (supervisor, restarts) = supervisor(&shutdown);
        let broken = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let fault = broken.clone();
        let token = shutdown.clone();
        supervisor.spawn("flaky", move || {
            let broken = fault.load(Ordering::SeqCst);
            let token = token.clone();
            async move {
                if broken {
                    return Err("stream gone".to_string());
                }
                token.cancelled().await;
                Ok(())
            }
        });
        let health = supervisor.health();
        until(|| !health.failing().is_empty()).await;
        assert_eq!(
            health.failing(),
            vec![("flaky".to_string(), "stream gone".to_string())]
        );
        // Backoff doubles: 100, 200, 400, … ms, capped at 2 s.
        let before = restarts.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(20)).await;
        let after = restarts.load(Ordering::SeqCst);
        assert!(
            (before + 8..=before + 12).contains(&after),
            "{before} → {after} restarts in 20 s"
        );
        broken.store(false, Ordering::SeqCst);
        // Still failing until a run has lasted `healthy_after`.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!health.failing().is_empty());
        until(|| health.failing().is_empty()).await;
        assert_eq!(health.status("flaky").unwrap().consecutive_failures, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn returning_before_shutdown_is_a_failure() {
        let shutdown = CancellationToken::new();
        let (supervisor, restarts) = supervisor(&shutdown);
        supervisor.spawn("flaky", || async { Ok::<(), String>(()) });
        until(|| restarts.load(Ordering::SeqCst) >= 3).await;
        let health = supervisor.health();
        assert_eq!(health.failing()[0].1, "stopped before shutdown");
        shutdown.cancel();
        supervisor.close();
        supervisor.wait().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_every_service_without_restarts() {
        let shutdown = CancellationToken::new();
        let (supervisor, restarts) = supervisor(&shutdown);
        let runs = Arc::new(AtomicU32::new(0));
        for name in ["flaky", "steady"] {
            let token = shutdown.clone();
            let runs = runs.clone();
            supervisor.spawn(name, move || {
                runs.fetch_add(1, Ordering::SeqCst);
                let token = token.clone();
                async move {
                    token.cancelled().await;
                    Ok::<(), String>(())
                }
            });
        }
        supervisor.close();
        tokio::time::sleep(Duration::from_secs(1)).await;
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(1), supervisor.wait())
            .await
            .expect("every service stopped");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(restarts.load(Ordering::SeqCst), 0);
    }
}
