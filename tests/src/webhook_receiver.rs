//! A real HTTP receiver for the alert webhooks: an axum server on
//! 127.0.0.1 that records every request it is sent and answers with the
//! status it is told to, stopped when dropped.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// One request as the receiver got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone)]
struct Shared {
    received: Arc<Mutex<Vec<Received>>>,
    status: StatusCode,
}

/// A receiver serving `POST /<any path>` until dropped.
pub struct WebhookReceiver {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    stop: CancellationToken,
}

impl WebhookReceiver {
    /// Serves on `port` of 127.0.0.1, answering every POST with `status`.
    pub async fn start(port: u16, status: u16) -> WebhookReceiver {
        let status = StatusCode::from_u16(status).expect("an HTTP status");
        let received = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            received: received.clone(),
            status,
        };
        let app = Router::new()
            .route("/{*path}", post(record))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("cannot listen on 127.0.0.1:{port}: {e}"));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await;
        });
        WebhookReceiver {
            port,
            received,
            stop,
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn record(
    State(shared): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let headers = headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    shared
        .received
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Received {
            path: uri.path().to_string(),
            headers,
            body: body.to_vec(),
        });
    shared.status
}
