//! Bringing lost work back. Each service runs on one replica at a time
//! (see [`crate::lease`]).
//!
//! [`expiry_monitor`] re-queues firings whose worker vanished or whose deadline
//! passed; [`requeue`] finds executing firings their live worker no longer
//! lists as running; [`republisher`] publishes again a firing whose message
//! is gone from JetStream; [`housekeeping`] rescues staged firings nobody
//! published and enforces retention; [`limit_release`] releases firings
//! held by a concurrency limit when room appears that no finish announced.

pub mod expiry_monitor;
pub mod housekeeping;
pub mod limit_release;
pub mod republisher;
pub mod requeue;
