//! What the scheduler answers workers: [`starts`] (start requests, which
//! the store decides) and [`finishes`] (finished events, which end a firing
//! or schedule its retry, with delays from [`retry`]).

pub mod finishes;
pub mod retry;
pub mod starts;
