//! Chime worker: pulls firings as threads free up, asks the scheduler to
//! start each, runs its handler under the firing's deadline, and reports how
//! it ended. The wire protocol is in docs/PROTOCOL.md.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use chime_worker::{handlers::HttpHandler, Worker};
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let handle = Worker::builder()
//!     .nats(client)
//!     .group("reports")
//!     .threads(8)
//!     .handler("http", HttpHandler::new()?)
//!     .handler_fn("hello", |ctx| async move { Ok(Some(format!("hello from {}", ctx.firing.firing_id))) })
//!     .build()?
//!     .start()
//!     .await?;
//! // … on SIGTERM:
//! handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Inside, each module imports only those below it:
//!
//! - `builder.rs` checks the settings and handlers and returns a [`Worker`];
//!   `worker.rs` starts it (finds the NATS objects, registers, starts the
//!   services) and `shutdown.rs` holds the running worker's handle and
//!   drains it.
//! - `services/`: the supervised background services. `pull.rs` fetches by
//!   free threads, `heartbeat.rs` registers the worker and renews its lease,
//!   `fence.rs` stops every run when heartbeats fail for the lease,
//!   `cancel.rs` answers cancel requests.
//! - `firing/`: one firing, from delivery to report. `message.rs` reads it,
//!   `dispatch.rs` takes it from receipt to report, `start.rs` asks to start
//!   it, `context.rs` is what the handler sees, `run.rs` runs the handler,
//!   `finish.rs` reports how it ended.
//! - What those share, each passed to whoever needs it: `slots.rs` (the
//!   threads), `running.rs` (the runs, by firing id), `status.rs` (for
//!   `/readyz`), `metrics.rs`, `clock.rs` (the clock offset estimate).
//! - `handler.rs` (the `Handler` trait) and `handlers/` (the built-in ones),
//!   `output.rs` (cleans and bounds what a run printed), `topology.rs` (finds,
//!   never creates, the NATS objects), `admin.rs`, `cli.rs`, `config.rs`.

pub mod admin;
mod builder;
pub mod cli;
pub mod clock;
pub mod config;
mod error;
pub mod firing;
mod handler;
pub mod handlers;
pub mod hardening;
pub mod metrics;
pub mod output;
mod running;
mod services;
mod shutdown;
mod slots;
mod status;
mod topology;
mod worker;

pub use builder::WorkerBuilder;
pub use config::WorkerConfig;
pub use error::WorkerError;
pub use firing::context::FiringContext;
pub use firing::message::FiringDetails;
pub use handler::{FnHandler, Handler, HandlerError, HandlerResult};
pub use metrics::Metrics;
pub use shutdown::{ShutdownReport, WorkerHandle, SHUTDOWN_REASON};
pub use status::WorkerStatus;
pub use worker::Worker;
