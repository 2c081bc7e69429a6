//! The worker's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`
//! (200 while connected to NATS, else 503: restart me if it stays so) and
//! `/readyz` (200 while also started and not draining: taking firings).

use crate::metrics::Metrics;
use async_nats::connection::State;
use async_nats::Client;
use axum::extract::State as AxumState;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Whether the worker is taking firings: set once it has started, cleared
/// when it begins to drain.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the worker as taking firings (`true`) or not (`false`).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    client: Client,
    readiness: Readiness,
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    client: Client,
    readiness: Readiness,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .with_state(AdminState {
            metrics,
            client,
            readiness,
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}

async fn render_metrics(AxumState(state): AxumState<AdminState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

async fn health(AxumState(state): AxumState<AdminState>) -> impl IntoResponse {
    match state.client.connection_state() {
        State::Connected => (StatusCode::OK, "ok\n"),
        State::Pending | State::Disconnected => {
            (StatusCode::SERVICE_UNAVAILABLE, "not connected to NATS\n")
        }
    }
}

async fn ready(AxumState(state): AxumState<AdminState>) -> impl IntoResponse {
    if state.client.connection_state() != State::Connected {
        return (StatusCode::SERVICE_UNAVAILABLE, "not connected to NATS\n");
    }
    if !state.readiness.get() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not taking firings (starting or draining)\n",
        );
    }
    (StatusCode::OK, "ready\n")
}
