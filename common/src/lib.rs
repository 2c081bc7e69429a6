//! Chime's public contract as Rust types.
//!
//! Everything a scheduler, a worker and a client must agree on lives here:
//! job specifications and their validation ([`job`], with the time fields
//! in [`time_rules`]) within the accepted
//! ranges ([`bounds`]), schedules ([`schedule`]),
//! firing identities and states ([`firing`]), subject, stream and header names
//! ([`subjects`], [`headers`]), the worker protocol messages ([`protocol`]),
//! the request/reply API's verbs, requests and replies ([`api`]), the error
//! shape ([`error`]), how to connect to NATS ([`connection`]), a typed API
//! client ([`client`]), and the shape every long-running service shares
//! ([`service`], [`supervisor`], [`signal`]).

pub mod api;
pub mod band;
pub mod bounds;
pub mod calendars;
pub mod client;
pub mod concurrency;
pub mod connection;
pub mod duration;
pub mod error;
pub mod firing;
pub mod headers;
pub mod job;
pub mod labels;
pub mod preview;
pub mod protocol;
pub mod schedule;
pub mod secret;
pub mod service;
pub mod signal;
pub mod subjects;
pub mod supervisor;
pub mod text;
pub mod time_rules;
pub mod topology;

pub use band::Band;
pub use concurrency::Overlap;
pub use error::{ApiError, ErrorCode, FieldError};
pub use firing::{Firing, FiringId, FiringState};
pub use job::{Job, JobSpec, JobState, Limits, Misfire, RetryPolicy};
pub use subjects::Subjects;
