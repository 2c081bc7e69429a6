//! One firing on this worker, in the order it happens: `delivery.rs` is how
//! it arrived (pulled, or offered), `message.rs` reads it, `dispatch.rs` takes it from receipt to report, `start.rs` asks
//! the scheduler to start it, `context.rs` is what its handler sees,
//! `run.rs` runs the handler, `trace.rs` records its `handler` span,
//! `finish.rs` reports how it ended.

pub mod context;
pub(crate) mod delivery;
pub(crate) mod dispatch;
pub(crate) mod finish;
pub mod message;
pub(crate) mod run;
pub(crate) mod start;
pub(crate) mod trace;
