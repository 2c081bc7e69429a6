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
//! Inside: `pull.rs` fetches by free threads, `dispatch.rs` takes one
//! message from receipt to report, `start.rs` asks to start, `run.rs` runs a
//! handler, `finish.rs` reports, `heartbeat.rs` and `cancel.rs` talk to the
//! scheduler, `shutdown.rs` drains.

pub mod admin;
mod builder;
mod cancel;
pub mod cli;
pub mod config;
mod context;
mod dispatch;
mod error;
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
mod worker;

pub use builder::WorkerBuilder;
pub use config::WorkerConfig;
pub use context::FiringContext;
pub use error::WorkerError;
pub use handler::{FnHandler, Handler, HandlerError, HandlerResult};
pub use metrics::Metrics;
pub use shutdown::{ShutdownReport, WorkerHandle, SHUTDOWN_REASON};
pub use worker::Worker;
