//! What keeps a replica observable and its surroundings in order: metrics
//! and probes, dead letters and alerts, the clock offset check, the firing
//! consumers of every group, SQLite checkpoints and maintenance windows.

pub mod alerts;
pub mod checkpoint;
pub mod clock;
pub mod consumers;
pub mod dead_letter;
pub mod maintenance;
pub mod metrics;
pub mod probes;
