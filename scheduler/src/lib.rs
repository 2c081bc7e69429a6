//! Chime scheduler library.
//!
//! A replica is a set of small services, laid out along a firing's path:
//!
//! - [`firing`]: slices claimed, firings staged, held on the wheel and
//!   published at their instant;
//! - [`workers`]: start requests decided by the store, finished events
//!   applied, retries scheduled;
//! - [`recovery`]: lost, unlisted, unpublished and held firings brought
//!   back;
//! - [`intake`]: jobs and commands over NATS, submissions and HTTP;
//! - [`ops`]: metrics, probes, alerts, dead letters, the clock, consumers,
//!   checkpoints and maintenance windows;
//! - [`store`]: every state transition, in SQL (PostgreSQL or SQLite).
//!
//! [`replica`] starts them in order from [`config`], with the wiring in
//! [`services`] (a table of the periodic ones); [`nats`] holds the NATS
//! handles they share; [`lease`] elects the single-active services;
//! [`pull`] reads the scheduler's own durable consumers; [`signals`] tells
//! tests what the services did.

pub mod config;
pub mod firing;
pub mod intake;
pub mod lease;
pub mod nats;
pub mod ops;
pub mod pass;
pub mod pull;
pub mod recovery;
pub mod replica;
pub mod services;
pub mod signals;
pub mod store;
pub mod workers;

pub use config::SchedulerConfig;
pub use replica::Replica;
