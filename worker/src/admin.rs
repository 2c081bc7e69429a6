//! The worker's HTTP endpoints: `/metrics` (Prometheus text) and `/healthz`
//! (200 while connected to NATS, else 503).

use crate::metrics::Metrics;
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
}

/// Serves `/metrics` and `/healthz` on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    client: Client,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(health))
        .with_state(AdminState { metrics, client });
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
