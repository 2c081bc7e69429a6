//! `Worker::builder()`: settings, handlers, validation. Building checks
//! everything that can be checked without NATS; `Worker::start` (in
//! `worker.rs`) then finds the NATS objects and runs.

use crate::config::WorkerConfig;
use crate::error::WorkerError;
use crate::firing::context::FiringContext;
use crate::handler::{FnHandler, Handler, HandlerResult, Handlers};
use crate::metrics::Metrics;
use crate::status::WorkerStatus;
use crate::worker::Worker;
use async_nats::Client;
use chime_common::bounds::MAX_ID_LEN;
use chime_common::Subjects;
use chime_runtime::topology::TopologyConfig;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

impl Worker {
    /// A builder with the defaults of [`WorkerConfig`].
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::default()
    }
}

/// Builds a [`Worker`]; every setting has a default except the NATS client.
///
/// ```no_run
/// # async fn example(client: async_nats::Client) -> Result<(), chime_worker::WorkerError> {
/// use chime_worker::Worker;
/// let worker = Worker::builder()
///     .nats(client)
///     .group("reports")
///     .threads(4)
///     .handler_fn("echo", |ctx| async move { Ok(Some(ctx.firing.payload.to_string())) })
///     .build()?;
/// let handle = worker.start().await?;
/// // ...
/// handle.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct WorkerBuilder {
    client: Option<Client>,
    config: WorkerConfig,
    subjects: Subjects,
    topology_config: TopologyConfig,
    handlers: Handlers,
    metrics: Option<Metrics>,
    /// The first problem met while adding handlers, reported by `build`.
    error: Option<WorkerError>,
}

impl WorkerBuilder {
    /// The NATS connection (required).
    pub fn nats(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Replaces every setting at once.
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// The group whose firings to run (default `default`).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.config.group = group.into();
        self
    }

    /// Firings run at once (default: the number of CPUs).
    pub fn threads(mut self, threads: usize) -> Self {
        self.config.threads = threads;
        self
    }

    /// Subject names (default prefix `chime`).
    pub fn subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// The settings schedulers create the NATS objects with; a worker only
    /// uses `worker_ttl`, to check its heartbeat timings at build (at start
    /// it checks them again against the heartbeat bucket's real TTL).
    pub fn topology_config(mut self, config: TopologyConfig) -> Self {
        self.topology_config = config;
        self
    }

    /// Registers `handler` under `name` (what a job's `handler` field names).
    pub fn handler(mut self, name: impl Into<String>, handler: impl Handler) -> Self {
        self.add(name.into(), Arc::new(handler));
        self
    }

    /// Registers an async closure under `name`.
    pub fn handler_fn<F, Fut>(self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(FiringContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.handler(name, FnHandler(f))
    }

    /// Idle fallback wake-up (default 1 s).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// How long a firing that was not started comes back after (default 1 s).
    pub fn nak_delay(mut self, delay: Duration) -> Self {
        self.config.nak_delay = delay;
        self
    }

    /// Heartbeat period (default 2 s).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat_interval = interval;
        self
    }

    /// How long a shutdown waits for running firings before cancelling them (default 30 s).
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.config.drain_grace = grace;
        self
    }

    /// How long a shutdown retries unsent finished events (default 10 s).
    pub fn flush_grace(mut self, grace: Duration) -> Self {
        self.config.flush_grace = grace;
        self
    }

    /// Output tail kept per firing (default 64 KiB).
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.config.max_output_bytes = bytes;
        self
    }

    /// The worker id (default `<hostname>-<8 random hex>`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.config.worker_id = id.into();
        self
    }

    /// How long a start request waits for its reply (default 5 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.config.start_timeout = timeout;
        self
    }

    /// How long a stopped handler may take to return before it is dropped (default 1 s).
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.config.stop_grace = grace;
        self
    }

    /// The worker fences itself after the heartbeat key TTL minus this
    /// without an acknowledged heartbeat (default 2 s; see [`WorkerConfig::fence_margin`]).
    pub fn fence_margin(mut self, margin: Duration) -> Self {
        self.config.fence_margin = margin;
        self
    }

    /// Reports into `metrics` instead of a fresh registry labelled with the group.
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn add(&mut self, name: String, handler: Arc<dyn Handler>) {
        if self.error.is_some() {
            return;
        }
        if let Err(reason) = check_handler_name(&name) {
            self.error = Some(WorkerError::InvalidHandlerName { name, reason });
        } else if !self.handlers.insert(name.clone(), handler) {
            self.error = Some(WorkerError::DuplicateHandler(name));
        }
    }

    /// Validates everything and returns the worker.
    pub fn build(self) -> Result<Worker, WorkerError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        self.config.validate(self.topology_config.worker_ttl)?;
        Subjects::validate_prefix(self.subjects.prefix()).map_err(|reason| {
            WorkerError::InvalidSetting {
                setting: "subject prefix",
                reason,
            }
        })?;
        let client = self.client.ok_or(WorkerError::NoNats)?;
        let metrics = self
            .metrics
            .unwrap_or_else(|| Metrics::new(&self.config.group));
        Ok(Worker {
            config: self.config,
            client,
            subjects: self.subjects,
            handlers: self.handlers,
            metrics,
            status: WorkerStatus::default(),
        })
    }
}

/// A handler name is a job's `handler`: 1–128 characters, carried in a header (no control characters).
fn check_handler_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_ID_LEN {
        return Err(format!("must be 1 to {MAX_ID_LEN} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    if name.trim() != name {
        return Err("must not start or end with whitespace".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_names_are_checked() {
        check_handler_name("shell").unwrap();
        check_handler_name("reports/v2 daily").unwrap();
        assert!(check_handler_name("").is_err());
        assert!(check_handler_name(" x").is_err());
        assert!(check_handler_name("a\nb").is_err());
        assert!(check_handler_name(&"x".repeat(129)).is_err());
    }

    #[test]
    fn zero_threads_is_refused() {
        let error = WorkerBuilder::default().threads(0).build().err().unwrap();
        assert!(matches!(error, WorkerError::ZeroThreads));
    }

    #[test]
    fn a_builder_without_nats_or_with_duplicates_says_so() {
        let error = WorkerBuilder::default().build().err().unwrap();
        assert!(matches!(error, WorkerError::NoNats));
        let error = WorkerBuilder::default()
            .handler_fn("a", |_| async { Ok(None) })
            .handler_fn("a", |_| async { Ok(None) })
            .build()
            .err()
            .unwrap();
        assert_eq!(error.to_string(), "handler \"a\" is registered twice");
    }
}
