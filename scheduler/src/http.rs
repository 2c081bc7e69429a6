//! `/metrics`, `/healthz` and `/readyz` on `--metrics-addr`.

use crate::metrics::Metrics;
use crate::store::Store;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Probe {
    metrics: Metrics,
    store: Store,
    nats: async_nats::Client,
}

async fn render_metrics(State(probe): State<Probe>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        probe.metrics.render(),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready when NATS is connected and the store answers.
async fn readyz(State(probe): State<Probe>) -> (StatusCode, String) {
    if probe.nats.connection_state() != async_nats::connection::State::Connected {
        return (StatusCode::SERVICE_UNAVAILABLE, "NATS not connected".into());
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
    metrics: Metrics,
    store: Store,
    nats: async_nats::Client,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Probe {
            metrics,
            store,
            nats,
        });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    Ok((bound, task))
}
