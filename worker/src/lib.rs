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
//!     .handler_fn("hello", |ctx| async move { Ok(Some(format!("hello from {}", ctx.firing_id))) })
//!     .build()?
//!     .start()
//!     .await?;
//! // … on SIGTERM:
//! handle.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Inside: `topology.rs` finds (never creates) the NATS objects, `pull.rs`
//! fetches by free threads, `dispatch.rs` takes one message from receipt to
//! report, `start.rs` asks to start, `run.rs` runs a handler, `output.rs`
//! cleans and bounds what it printed, `finish.rs` reports, `heartbeat.rs`
//! and `cancel.rs` talk to the scheduler, `fence.rs` stops every run when
//! heartbeats fail for the lease, `clock.rs` estimates the clock offset,
//! `shutdown.rs` drains.

pub mod admin;
mod builder;
mod cancel;
pub mod cli;
pub mod clock;
pub mod config;
mod context;
mod dispatch;
mod error;
mod fence;
mod finish;
mod handler;
pub mod handlers;
mod heartbeat;
pub mod message;
pub mod metrics;
pub mod output;
mod pull;
mod run;
mod running;
mod shutdown;
mod slots;
mod start;
mod status;
mod topology;
mod worker;

pub use builder::WorkerBuilder;
pub use config::WorkerConfig;
pub use context::FiringContext;
pub use error::WorkerError;
pub use handler::{FnHandler, Handler, HandlerError, HandlerResult};
pub use metrics::Metrics;
pub use shutdown::{ShutdownReport, WorkerHandle, SHUTDOWN_REASON};
pub use status::WorkerStatus;
pub use worker::Worker;
