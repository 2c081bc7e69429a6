//! Console login: `POST /api/v1/session` checks a password and sets the
//! session cookie, `GET` says who is logged in (and hands the page its
//! CSRF token), `DELETE` logs out.
//!
//! The cookie is `HttpOnly` (scripts cannot read it) and `SameSite=Strict`
//! (other sites' pages do not send it); `Secure` when a TLS proxy in front
//! says `X-Forwarded-Proto: https`. The store keeps only the token's hash.

use super::auth::{self, SESSION_COOKIE};
use super::identity::{Identity, Refusal};
use super::routes::{error_response, refusal_response};
use super::users::Role;
use super::Web;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde::{Deserialize, Serialize};

pub fn router() -> Router<Web> {
    Router::new().route("/api/v1/session", get(whoami).post(login).delete(logout))
}

/// A login request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub user: String,
    pub password: String,
}

/// Who is logged in.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionReply {
    pub user: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    /// Send back in `X-Chime-CSRF` with every POST, PUT and DELETE.
    pub csrf: String,
    /// Whether the server runs with `--http-open` (no login).
    pub open: bool,
}

/// Logs in and sets the session cookie.
#[utoipa::path(post, path = "/api/v1/session", tag = "session",
    request_body = LoginRequest,
    responses((status = 200, body = SessionReply), (status = 400), (status = 401)))]
pub async fn login(State(web): State<Web>, headers: HeaderMap, body: Bytes) -> Response {
    // A login form on another site must not log a browser in here.
    let nobody = Identity {
        name: String::new(),
        role: Role::Viewer,
        session: None,
    };
    if let Err(refusal) = auth::check_forgery(&Method::POST, &headers, &nobody) {
        return refusal_response(refusal, &headers);
    }
    let request: LoginRequest = match crate::intake::api::parse_request(&body) {
        Ok(request) => request,
        Err(e) => return error_response(e),
    };
    let role = match auth::verify_password(&web, &headers, &request.user, &request.password).await {
        Ok(role) => role,
        Err(refusal) => return refusal_response(refusal, &headers),
    };
    let token = auth::random_token();
    let csrf = auth::random_token();
    let now = Utc::now();
    let ttl =
        chrono::Duration::from_std(web.config.session_ttl).unwrap_or(chrono::Duration::hours(12));
    if let Err(e) = web
        .api
        .store
        .create_session(
            &auth::token_key(&token),
            &request.user,
            &csrf,
            now,
            now + ttl,
        )
        .await
    {
        return error_response(e.into());
    }
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        ttl.num_seconds(),
        if secure { "; Secure" } else { "" }
    );
    let mut response = Json(SessionReply {
        user: request.user,
        role: role.to_string(),
        csrf,
        open: false,
    })
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Who is logged in: 401 when nobody is.
#[utoipa::path(get, path = "/api/v1/session", tag = "session",
    responses((status = 200, body = SessionReply), (status = 401)))]
pub async fn whoami(State(web): State<Web>, headers: HeaderMap) -> Response {
    match auth::identify(&web, &headers).await {
        Ok(identity) => Json(SessionReply {
            user: identity.name,
            role: identity.role.to_string(),
            csrf: identity.session.map(|s| s.csrf).unwrap_or_default(),
            open: web.config.open,
        })
        .into_response(),
        Err(refusal) => refusal_response(refusal, &headers),
    }
}

/// Logs out: the session ends on every replica and the cookie is cleared.
#[utoipa::path(delete, path = "/api/v1/session", tag = "session",
    responses((status = 204), (status = 401), (status = 403)))]
pub async fn logout(State(web): State<Web>, headers: HeaderMap) -> Response {
    let identity = match auth::identify(&web, &headers).await {
        Ok(identity) => identity,
        Err(refusal) => return refusal_response(refusal, &headers),
    };
    if let Err(refusal) = auth::check_forgery(&Method::DELETE, &headers, &identity) {
        return refusal_response(refusal, &headers);
    }
    if let Some(session) = &identity.session {
        if let Err(e) = web.api.store.delete_session(&session.key).await {
            return refusal_response(Refusal::Unavailable(e.to_string()), &headers);
        }
    }
    let clear = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
