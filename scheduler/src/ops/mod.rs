//! What keeps a replica observable and its surroundings in order: metrics
//! and probes, dead letters and alerts, the clock offset check, the firing
//! consumers of every group, SQLite checkpoints and maintenance windows,
//! and the spans of each firing's trace.

pub mod alerts;
pub mod checkpointer;
pub mod clock_monitor;
pub mod consumers;
pub mod dead_letter;
pub mod maintenance_windows;
pub mod metrics;
pub mod probes;
pub mod sqlite_holder;
pub mod traces;
