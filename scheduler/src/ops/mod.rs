//! What keeps a replica observable and its surroundings in order: metrics
//! and probes (with the per-job gauges), dead letters and alerts (with their
//! webhooks), the clock offset check, the firing consumers of every group,
//! SQLite checkpoints, maintenance windows, and the spans of each firing's trace.

pub mod alerts;
pub mod checkpointer;
pub mod clock_monitor;
pub mod consumers;
pub mod dead_letter;
pub mod job_metrics;
pub mod maintenance_windows;
pub mod metrics;
pub mod probes;
pub mod sqlite_holder;
pub mod traces;
pub mod webhooks;
