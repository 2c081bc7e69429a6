//! `--http-open`: the console without user accounts, for one developer.
//!
//! Open mode still has a secret: a random token the scheduler prints at
//! start-up in the console's address (`http://127.0.0.1:8080/?token=…`), as
//! Jupyter does. Only whoever started the scheduler sees it, so another
//! local user, or a web page the developer visits, cannot drive the API
//! (with `--allow-shell` workers, that would mean running commands on the
//! machine). The link's token is exchanged once for a cookie
//! (`HttpOnly`, `SameSite=Strict`) and the address bar loses it; scripts
//! send it as `Authorization: Bearer <token>`.

use super::identity::{constant_time_eq, cookie, Identity, Refusal};
use super::users::Role;
use super::Web;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The cookie the link's token is kept in.
pub const OPEN_COOKIE: &str = "chime_open";

/// The identity of whoever holds the token: an administrator.
pub fn identify(web: &Web, headers: &HeaderMap) -> Result<Identity, Refusal> {
    let expected = web.config.open_token.expose().as_bytes();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let sent = bearer
        .map(str::to_string)
        .or_else(|| cookie(headers, OPEN_COOKIE));
    match sent {
        Some(token) if constant_time_eq(token.as_bytes(), expected) => Ok(Identity {
            name: "anonymous".into(),
            role: Role::Admin,
            session: None,
        }),
        _ => Err(Refusal::Unauthenticated(
            "open mode: open the console through the address with ?token= that the scheduler \
             printed at start-up, or send Authorization: Bearer <token>"
                .into(),
        )),
    }
}

/// Middleware: a GET whose query carries the right `token` gets it as a
/// cookie and is sent to the same address without it.
pub async fn exchange_link(State(web): State<Web>, request: Request, next: Next) -> Response {
    if !web.config.open || request.method() != Method::GET {
        return next.run(request).await;
    }
    let query = request.uri().query().unwrap_or("");
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.strip_prefix("token=") {
            Some(value) => token = Some(value),
            None => rest.push(pair),
        }
    }
    let expected = web.config.open_token.expose().as_bytes();
    let Some(token) = token.filter(|t| constant_time_eq(t.as_bytes(), expected)) else {
        return next.run(request).await;
    };
    let mut location = request.uri().path().to_string();
    if !rest.is_empty() {
        location.push('?');
        location.push_str(&rest.join("&"));
    }
    let cookie = format!("{OPEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
    let mut response = StatusCode::SEE_OTHER.into_response();
    for (name, value) in [(header::LOCATION, location), (header::SET_COOKIE, cookie)] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
