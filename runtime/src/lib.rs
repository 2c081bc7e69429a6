//! What every Chime program runs on, apart from the contract
//! (`chime-common`) it speaks.
//!
//! How to connect to NATS ([`connection`], with credentials kept out of
//! logs by [`secret`]); how logs are written ([`logging`]); the shape every long-running service shares
//! ([`service`]) and the supervisor that restarts it ([`supervisor`]);
//! events services report for tests to wait on ([`signal`]); and the
//! streams, buckets and consumers Chime makes on NATS ([`topology`]); and
//! the OpenTelemetry export of a firing's spans ([`traces`]).

pub mod connection;
pub mod logging;
pub mod secret;
pub mod service;
pub mod signal;
pub mod supervisor;
pub mod topology;
pub mod traces;
