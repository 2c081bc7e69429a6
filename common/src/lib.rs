//! Chime's public contract as Rust types.
//!
//! Everything a scheduler, a worker and a client must agree on lives here:
//! job specifications and their validation ([`job`], with the time fields
//! in [`time_rules`]) within the accepted ranges ([`bounds`]), the
//! built-in handlers' payloads ([`payloads`]), schedules ([`schedule`]),
//! firing identities and states ([`firing`]), subject, stream and header names
//! ([`subjects`], [`headers`]), W3C trace context and a firing's trace
//! ([`traceparent`]), the worker protocol messages ([`protocol`]),
//! priority bands ([`band`]), the request/reply API's verbs, requests and
//! replies ([`api`]), the error shape ([`error`]), the warnings a valid
//! request may still draw ([`warning`]) and a typed API client
//! ([`client`]). What every Chime program runs on (connections, the
//! service shape, the supervisor, the NATS topology) is `chime-runtime`.

pub mod api;
pub mod band;
pub mod bounds;
pub mod calendars;
pub mod client;
pub mod concurrency;
pub mod duration;
pub mod error;
pub mod firing;
pub mod headers;
pub mod job;
pub mod labels;
pub mod payloads;
pub mod preview;
pub mod protocol;
pub mod schedule;
pub mod subjects;
pub mod suggest;
pub mod text;
pub mod time_rules;
pub mod traceparent;
pub mod warning;

pub use band::Band;
pub use concurrency::Overlap;
pub use error::{ApiError, ErrorCode, FieldError};
pub use firing::{Firing, FiringId, FiringState, HeldBy};
pub use job::{Job, JobSpec, JobState, Limits, Misfire, RetryPolicy};
pub use subjects::Subjects;
