//! The web console's files, embedded in the binary at build time
//! (`scheduler/console/`): plain HTML, CSS and JavaScript with no build
//! step, so neither building nor running Chime needs Node.
//!
//! The page holds no data; everything it shows comes from `/api/v1/` with
//! the caller's session, and its strict Content-Security-Policy allows only
//! its own scripts and styles.

use super::Web;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("../../../console/index.html");
const SCRIPT: &str = include_str!("../../../console/app.js");
const STYLE: &str = include_str!("../../../console/style.css");
const ICON: &str = include_str!("../../../console/favicon.svg");

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      img-src 'self'; connect-src 'self'; base-uri 'none'; \
                      form-action 'self'; frame-ancestors 'none'";

pub fn router() -> Router<Web> {
    Router::new()
        .route("/", get(|| file(INDEX, "text/html; charset=utf-8")))
        .route(
            "/app.js",
            get(|| file(SCRIPT, "text/javascript; charset=utf-8")),
        )
        .route("/style.css", get(|| file(STYLE, "text/css; charset=utf-8")))
        .route("/favicon.svg", get(|| file(ICON, "image/svg+xml")))
}

async fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    response
}
