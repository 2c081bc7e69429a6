//! Chime scheduler library.
//!
//! A replica is a set of small services, one per file:
//! [`api`] (request/reply), [`submit`] (durable submissions), [`slicer`]
//! (claims time slices, see [`claim`]), [`wheel`] (holds staged firings),
//! [`publisher`] (publishes each at its instant), [`immediate`] (puts
//! firings staged outside a slice in the wheel at once), [`worker_reports`] (start
//! decisions and finished events), [`expiry`] (re-queues lost firings),
//! [`housekeeping`] (rescue and retention), [`checkpoint`] (SQLite's
//! write-ahead log into its file), over the [`store`]; [`submit`]
//! and [`worker_reports`] read their consumers through [`pull`]. [`web`]
//! serves the same API over HTTP with the console, [`probes`] the metrics
//! and health endpoints. [`replica`] wires them; [`lease`] elects the
//! single-active services; [`signals`] tells tests what they did;
//! [`unstarted`] spares the publisher marking what it saw start.

pub mod alarm;
pub mod api;
pub mod checkpoint;
pub mod claim;
pub mod clock;
pub mod consumers;
pub mod dead_letter;
pub mod duplicates;
pub mod expiry;
pub mod housekeeping;
pub mod http_server;
pub mod immediate;
pub mod lease;
pub mod limits;
pub mod maintenance;
pub mod metrics;
pub mod probes;
pub mod publisher;
pub mod pull;
pub mod replica;
pub mod replies;
pub mod republish;
pub mod requeue;
pub mod retry;
pub mod signals;
pub mod slicer;
pub mod store;
pub mod submit;
pub mod unstarted;
pub mod web;
pub mod wheel;
pub mod worker_reports;

pub use replica::{Replica, SchedulerConfig};
