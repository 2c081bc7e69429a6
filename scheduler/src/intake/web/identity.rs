//! Who a request comes from, as every way of identifying a caller reports
//! it (passwords and console logins in `auth.rs`, the open console's token in
//! `open.rs`).

use super::users::Role;
use axum::http::{header, HeaderMap};
use std::time::Duration;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub role: Role,
    /// Set when the caller came with a session cookie.
    pub session: Option<SessionToken>,
}

/// The parts of a session a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionToken {
    /// SHA-256 of the cookie's token: the session's key in the store.
    pub key: String,
    pub csrf: String,
}

/// Why a request is refused before it reaches the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no or bad credentials.
    Unauthenticated(String),
    /// 403: the role is too low, or a browser request failed the CSRF checks.
    Forbidden(String),
    /// 503: the session store cannot be read.
    Unavailable(String),
    /// 429: too many wrong passwords from this source or for this user;
    /// try again after the duration.
    Throttled(String, Duration),
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of cookie `name`, if sent.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}
