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
/// The grammar of typed times, shared with chimectl's (`when.js`).
const WHEN: &str = include_str!("../../../console/when.js");
/// The job form's payload editor, one shape per built-in handler.
const PAYLOAD: &str = include_str!("../../../console/payload.js");
/// A firing's state cell and its own page.
const FIRING: &str = include_str!("../../../console/firing.js");
const STYLE: &str = include_str!("../../../console/style.css");
const ICON: &str = include_str!("../../../console/favicon.svg");

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      img-src 'self'; connect-src 'self'; base-uri 'none'; \
                      form-action 'self'; frame-ancestors 'none'";

pub fn router() -> Router<Web> {
    Router::new()
        .route("/", get(|| file(INDEX, "text/html; charset=utf-8")))
        .route("/app.js", get(|| script(SCRIPT)))
        .route("/when.js", get(|| script(WHEN)))
        .route("/payload.js", get(|| script(PAYLOAD)))
        .route("/firing.js", get(|| script(FIRING)))
        .route("/style.css", get(|| file(STYLE, "text/css; charset=utf-8")))
        .route("/favicon.svg", get(|| file(ICON, "image/svg+xml")))
}

async fn script(body: &'static str) -> Response {
    file(body, "text/javascript; charset=utf-8").await
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
