//! `/metrics`, `/healthz` and `/readyz` on `--metrics-addr`.

use crate::intake::http_server::HttpServerConfig;
use crate::ops::clock_monitor::ClockStatus;
use crate::ops::metrics::Metrics;
use crate::store::Store;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use chime_runtime::supervisor::Health;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

/// What the endpoints report on.
#[derive(Clone)]
pub struct Probe {
    pub metrics: Metrics,
    pub store: Store,
    pub nats: async_nats::Client,
    /// Supervised services that keep failing make `/healthz` fail.
    pub health: Health,
    /// A clock off the database's makes `/readyz` fail.
    pub clock: ClockStatus,
}

async fn render_metrics(State(probe): State<Probe>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        probe.metrics.render(),
    )
}

/// Alive unless a supervised service keeps failing (restarted again and
/// again): then 503 naming the services and their last errors.
async fn healthz(State(probe): State<Probe>) -> (StatusCode, String) {
    let failing = probe.health.failing();
    if failing.is_empty() {
        return (StatusCode::OK, "ok".into());
    }
    let services: Vec<String> = failing
        .into_iter()
        .map(|(service, error)| format!("service {service} keeps failing: {error}"))
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, services.join("\n"))
}

/// Ready when NATS is connected, the store answers and the clock is in sync
/// with the database's.
async fn readyz(State(probe): State<Probe>) -> (StatusCode, String) {
    if probe.nats.connection_state() != async_nats::connection::State::Connected {
        return (StatusCode::SERVICE_UNAVAILABLE, "NATS not connected".into());
    }
    if !probe.clock.in_sync() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "clock off the database's by {:.3}s",
                probe.clock.offset().num_milliseconds() as f64 / 1000.0
            ),
        );
    }
    match probe.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready".into()),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {e}"),
        ),
    }
}

/// Binds `addr` and serves until `shutdown`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    probe: Probe,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probe);
    crate::intake::http_server::bind_and_serve(addr, app, HttpServerConfig::default(), shutdown)
        .await
}
