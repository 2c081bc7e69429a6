//! The worker's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`
//! (liveness: 200 unless one of its services keeps failing; it does not
//! depend on NATS, since restarting a worker does not bring NATS back) and `/readyz`
//! (200 while connected to NATS, started (every NATS object found), not
//! fenced and not draining: taking firings; else 503 with the reason).

use crate::metrics::Metrics;
use crate::status::WorkerStatus;
use async_nats::connection::State;
use async_nats::Client;
use axum::extract::State as AxumState;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    client: Client,
    status: WorkerStatus,
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    client: Client,
    status: WorkerStatus,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .with_state(AdminState {
            metrics,
            client,
            status,
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

/// Alive unless a service keeps failing (the supervisor restarts it, and
/// restarting the process is the next thing to try).
async fn health(AxumState(state): AxumState<AdminState>) -> impl IntoResponse {
    let failing = state.status.failing();
    if failing.is_empty() {
        return (StatusCode::OK, "ok\n".to_string());
    }
    let lines: Vec<String> = failing
        .iter()
        .map(|(service, error)| format!("service {service} keeps failing: {error}\n"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, lines.concat())
}

async fn ready(AxumState(state): AxumState<AdminState>) -> impl IntoResponse {
    if state.client.connection_state() != State::Connected {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not connected to NATS\n".to_string(),
        );
    }
    match state.status.not_ready() {
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
        None => (StatusCode::OK, "ready\n".to_string()),
    }
}
