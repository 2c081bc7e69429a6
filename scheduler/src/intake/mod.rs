//! How jobs and commands come in: the NATS request/reply [`api`], durable
//! submissions ([`submit`]), and the same API over HTTP with the console
//! ([`web`], served by [`http_server`]). [`replies`] answers requesters
//! only on inbox subjects.

pub mod api;
pub mod http_server;
pub mod replies;
pub mod submit;
pub mod web;
