//! The accept loop of the scheduler's HTTP servers (the API and console on
//! `--http-addr`, the probes on `--metrics-addr`).
//!
//! `axum::serve` has no bound on connections and no deadline for a
//! request's headers, so a client that opens many connections, or trickles
//! its headers byte by byte (slowloris), holds the server's memory and
//! tasks for as long as it likes. This loop caps open connections (the
//! next waits in the kernel's backlog), gives every request's headers a
//! deadline, and on shutdown stops accepting and lets open requests finish
//! for a bounded time.

use crate::intake::web::throttle::PEER_HEADER;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

/// Bounds on what clients may hold.
#[derive(Debug, Clone)]
pub struct HttpServerConfig {
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
    /// A request's headers must arrive within this, or the connection closes.
    pub header_read_timeout: Duration,
    /// At shutdown, open connections get this long to finish.
    pub shutdown_grace: Duration,
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Binds `addr` and serves `app` until `shutdown`, in a task of its own;
/// returns the bound address.
pub async fn bind_and_serve(
    addr: SocketAddr,
    app: Router,
    config: HttpServerConfig,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(accept_loop(listener, app, config, shutdown));
    Ok((bound, task))
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    config: HttpServerConfig,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, mostly: wait, do not spin.
                    tracing::warn!(%error, "cannot accept an HTTP connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let app = app.clone();
        let shutdown = shutdown.clone();
        let header_read_timeout = config.header_read_timeout;
        connections.spawn(async move {
            let peer = hyper::header::HeaderValue::from_str(&peer.ip().to_string()).ok();
            let service =
                hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    // The client's address, for the login throttle; whatever a
                    // client sent under this name is replaced.
                    let headers = request.headers_mut();
                    headers.remove(PEER_HEADER);
                    if let Some(peer) = &peer {
                        headers.insert(PEER_HEADER, peer.clone());
                    }
                    app.clone().oneshot(request.map(axum::body::Body::new))
                });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.as_mut().await;
                }
            }
            drop(permit);
        });
    }
    connections.close();
    let _ = tokio::time::timeout(config.shutdown_grace, connections.wait()).await;
}
