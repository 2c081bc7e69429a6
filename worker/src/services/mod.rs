//! The worker's background services, each started once and supervised:
//! `pull.rs` fetches firings as threads free up (holding `open_pull.rs`'s
//! requests open while idle), `heartbeat.rs` registers
//! the worker and renews its lease, `fence.rs` stops every run when the
//! lease runs out, `cancel.rs` answers cancel requests, `offers.rs` takes
//! the broadcast firings addressed to this worker.

pub(crate) mod cancel;
pub(crate) mod fence;
pub(crate) mod heartbeat;
pub(crate) mod offers;
pub(crate) mod open_pull;
pub(crate) mod pull;
