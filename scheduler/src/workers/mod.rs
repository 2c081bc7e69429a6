//! What the scheduler answers workers: [`starts`] (start requests, which
//! the store decides) and [`finishes`] (finished events, which end a firing
//! or schedule its retry, with delays from [`retry`]); and what it knows of
//! them: [`registry`] (the live workers and the handlers they offer).

pub mod finishes;
pub mod registry;
pub mod retry;
pub mod starts;
