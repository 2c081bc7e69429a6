//! `http`: one HTTP request per firing.
//!
//! Payload `{"url": "https://…", "method"?: "GET", "headers"?: {"Name": "value"},
//! "body"?: "text" | JSON}`. A JSON body that is not a string is sent as JSON
//! (`Content-Type: application/json` unless set). The request also carries
//! `Chime-Firing-Id`, `Chime-Job-Id`, `Chime-Scheduled-At` and `Chime-Attempt`.
//! A 2xx status is success; the response body's tail is the output. The
//! firing's deadline is the request's timeout.

use crate::context::FiringContext;
use crate::handler::{Handler, HandlerError, HandlerResult};
use crate::output::TailBuffer;
use async_trait::async_trait;
use chime_common::duration::format_time;
use chrono::Utc;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{Method, Url};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Sends the firing's request with a shared connection pool.
#[derive(Debug, Clone)]
pub struct HttpHandler {
    client: reqwest::Client,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpPayload {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<serde_json::Value>,
}

/// A request ready to send.
#[derive(Debug)]
struct Prepared {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
}

impl HttpHandler {
    /// A handler with its own connection pool (rustls, webpki roots).
    pub fn new() -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("chime-worker/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpHandler { client })
    }

    /// A handler using `client`.
    pub fn with_client(client: reqwest::Client) -> Self {
        HttpHandler { client }
    }
}

fn bad(reason: impl std::fmt::Display) -> HandlerError {
    HandlerError::new(format!(
        r#"bad http payload: {reason}; expected {{"url": "https://...", "method"?: "GET", "headers"?: {{...}}, "body"?: "text" or JSON}}"#
    ))
}

fn prepare(ctx: &FiringContext) -> Result<Prepared, HandlerError> {
    let payload: HttpPayload = serde_json::from_value(ctx.payload.clone()).map_err(bad)?;
    let url = Url::parse(&payload.url)
        .map_err(|e| bad(format!("url {:?} is invalid ({e})", payload.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("url {:?} is not http or https", payload.url)));
    }
    let method_name = payload
        .method
        .as_deref()
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let method = Method::from_bytes(method_name.as_bytes())
        .map_err(|_| bad(format!("method {method_name:?} is invalid")))?;
    let mut headers = HeaderMap::new();
    for (name, value) in &payload.headers {
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(format!("header name {name:?} is invalid")))?;
        let header_value = HeaderValue::from_str(value)
            .map_err(|_| bad(format!("the value of header {name} is invalid")))?;
        headers.insert(header_name, header_value);
    }
    let chime = [
        ("chime-firing-id", ctx.firing_id.to_string()),
        ("chime-job-id", ctx.job_id.clone()),
        ("chime-scheduled-at", format_time(ctx.scheduled_at)),
        ("chime-attempt", ctx.attempt.to_string()),
    ];
    for (name, value) in chime {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let body = match payload.body {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => Some(text.into_bytes()),
        Some(json) => {
            headers
                .entry(CONTENT_TYPE)
                .or_insert(HeaderValue::from_static("application/json"));
            Some(serde_json::to_vec(&json).map_err(bad)?)
        }
    };
    Ok(Prepared {
        method,
        url,
        headers,
        body,
    })
}

#[async_trait]
impl Handler for HttpHandler {
    async fn run(&self, ctx: FiringContext) -> HandlerResult {
        let request = prepare(&ctx)?;
        // The worker cuts the run off at the deadline; the request's own
        // timeout is a backstop just after it.
        let timeout =
            (ctx.deadline - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(1);
        let shown_url = request.url.to_string();
        let mut builder = self
            .client
            .request(request.method.clone(), request.url)
            .headers(request.headers)
            .timeout(timeout);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let exchange = async {
            let mut response = builder.send().await.map_err(|e| {
                HandlerError::new(format!(
                    "{} {shown_url} failed: {}",
                    request.method,
                    describe(&e)
                ))
            })?;
            let status = response.status();
            let mut body = TailBuffer::new(ctx.max_output_bytes);
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => body.push(&chunk),
                    Ok(None) => break,
                    Err(e) => {
                        return Err(HandlerError::new(format!(
                            "reading the response of {} {shown_url} failed: {}",
                            request.method,
                            describe(&e)
                        ))
                        .with_output(body.to_text()))
                    }
                }
            }
            let text = body.to_text();
            if status.is_success() {
                Ok(Some(text))
            } else {
                Err(HandlerError::new(
                    format!(
                        "HTTP {} {}",
                        status.as_u16(),
                        status.canonical_reason().unwrap_or("")
                    )
                    .trim_end()
                    .to_string(),
                )
                .with_output(text))
            }
        };
        tokio::select! {
            result = exchange => result,
            _ = ctx.cancel.cancelled() => Err(HandlerError::new("stopped: the request was abandoned")),
        }
    }
}

/// A reqwest error with its causes ("error sending request: connection refused").
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out at the firing's deadline".to_string();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::FiringId;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    fn ctx(payload: serde_json::Value) -> FiringContext {
        let now = Utc::now();
        FiringContext {
            firing_id: FiringId::new("job-1", 1_700_000_000_000, 1),
            job_id: "job-1".into(),
            handler: "http".into(),
            scheduled_at: now,
            due_at: now,
            attempt: 1,
            priority: 5,
            deadline: now + chrono::Duration::seconds(30),
            payload,
            cancel: CancellationToken::new(),
            max_output_bytes: 1024,
            worker_id: "w".into(),
        }
    }

    #[test]
    fn payloads_become_requests() {
        let p = prepare(&ctx(
            json!({"url": "http://example.test/x", "method": "post", "body": {"a": 1}}),
        ))
        .unwrap();
        assert_eq!(p.method, Method::POST);
        assert_eq!(p.headers[CONTENT_TYPE], "application/json");
        assert_eq!(p.headers["chime-firing-id"], "job-1@1700000000000#1");
        assert_eq!(p.body.as_deref(), Some(&b"{\"a\":1}"[..]));
        let p = prepare(&ctx(
            json!({"url": "https://example.test", "body": "raw", "headers": {"X-A": "b"}}),
        ))
        .unwrap();
        assert_eq!(p.method, Method::GET);
        assert_eq!(p.body.as_deref(), Some(&b"raw"[..]));
        assert_eq!(p.headers["x-a"], "b");
        assert!(!p.headers.contains_key(CONTENT_TYPE));
    }

    #[test]
    fn bad_payloads_are_explained() {
        for payload in [
            json!({}),
            json!({"url": "not a url"}),
            json!({"url": "ftp://x"}),
            json!({"url": "http://x", "method": "GE T"}),
            json!({"url": "http://x", "headers": {"bad name": "v"}}),
            json!({"url": "http://x", "nope": 1}),
        ] {
            let error = prepare(&ctx(payload.clone())).unwrap_err();
            assert!(
                error.message.starts_with("bad http payload"),
                "{payload}: {}",
                error.message
            );
        }
    }
}
