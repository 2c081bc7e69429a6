//! The `Host` check that runs before anything else.
//!
//! A web page on another site can make a browser talk to a console on the
//! user's machine by pointing its own name at 127.0.0.1 (DNS rebinding):
//! the browser then sends the page's name as `Host` and as `Origin`, so an
//! Origin check alone passes. Refusing every `Host` that is not one of this
//! server's names (`--http-allowed-hosts`; loopback names by default with
//! `--http-open`) closes that door before a request reaches any route.

use super::Web;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chime_common::error::ErrorReply;
use chime_common::ApiError;

/// The names a console on a loopback address answers to by default.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The `Host` names the HTTP API answers; empty: every name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// Every host name: a server behind a proxy that checks names itself.
    pub fn any() -> Self {
        AllowedHosts::default()
    }

    /// The loopback names.
    pub fn loopback() -> Self {
        AllowedHosts {
            names: LOOPBACK_HOSTS.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// A comma-separated list of names (`chime.example.com,localhost`); an
    /// IPv6 address is written in brackets.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut names = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let valid = name.len() <= 253
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b));
            if !valid {
                return Err(format!(
                    "--http-allowed-hosts: {name:?} is not a host name (letters, digits, \
                     '-' and '.', or an address; no port)"
                ));
            }
            names.push(name.to_ascii_lowercase());
        }
        if names.is_empty() {
            return Err("--http-allowed-hosts: give at least one host name".into());
        }
        Ok(AllowedHosts { names })
    }

    pub fn is_any(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether a request whose `Host` is `host` (with or without a port)
    /// may be answered.
    pub fn allows(&self, host: &str) -> bool {
        if self.is_any() {
            return true;
        }
        let name = strip_port(host).to_ascii_lowercase();
        self.names.contains(&name)
    }
}

/// `name:port` → `name`, `[::1]:8080` → `[::1]`; a bare IPv6 address in
/// brackets keeps them.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Middleware: 421 Misdirected Request for a `Host` this server does not
/// answer, or none at all.
pub async fn check_host(State(web): State<Web>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .unwrap_or("");
    if web.hosts.allows(host) {
        return next.run(request).await;
    }
    let shown: String = host.chars().take(64).collect();
    tracing::warn!(host = %shown, "refused an HTTP request for a host this server does not answer");
    let error = ApiError::invalid(
        "Host",
        format!(
            "this server does not answer for host {shown:?}; its names are set with \
             --http-allowed-hosts"
        ),
    );
    (StatusCode::MISDIRECTED_REQUEST, Json(ErrorReply { error })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_matched_by_name_without_port() {
        let loopback = AllowedHosts::loopback();
        for (host, ok) in [
            ("127.0.0.1:8080", true),
            ("localhost", true),
            ("LOCALHOST:1", true),
            ("[::1]:8080", true),
            ("[::1]", true),
            ("rebind.example:8080", false),
            ("127.0.0.1.nip.io:8080", false),
            ("", false),
            ("localhost:8080:9", false),
        ] {
            assert_eq!(loopback.allows(host), ok, "{host:?}");
        }
        assert!(AllowedHosts::any().allows("anything.example"));
        let named = AllowedHosts::parse(" chime.example.com , localhost").unwrap();
        assert!(named.allows("chime.example.com:443"));
        assert!(!named.allows("evil.example.com"));
        assert!(AllowedHosts::parse("a b").is_err());
        assert!(AllowedHosts::parse(" , ").is_err());
    }
}
