//! The HTTP API and the web console, on `--http-addr`.
//!
//! Every `/api/v1/` route names a verb of the NATS API and builds the same
//! JSON request from its path, query and body, then calls [`Api::serve`]:
//! one implementation, one validation and one error object underneath both
//! transports. This module adds only what HTTP needs on top: who is calling
//! (`auth.rs`, `users.rs`), login sessions (`session.rs`), status codes
//! (`routes.rs`), the OpenAPI document (`openapi.rs`), the console's live
//! overview (`overview.rs`) and its embedded files (`console.rs`).

pub mod auth;
mod console;
pub mod host;
pub mod identity;
mod open;
mod openapi;
mod overview;
mod routes;
mod session;
pub mod throttle;
pub mod users;

use crate::intake::api::Api;
use crate::intake::http_server::HttpServerConfig;
use axum::http::{header, HeaderValue};
use axum::Router;
use chime_runtime::secret::Secret;
use host::AllowedHosts;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use throttle::{LoginThrottle, ThrottleConfig};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use users::Users;

pub use openapi::document as openapi_document;

/// HTTP settings (`--http-*`).
#[derive(Debug, Clone)]
pub struct WebConfig {
    pub addr: SocketAddr,
    /// Who may log in (`--http-users`).
    pub users: Users,
    /// No user accounts (`--http-open`): loopback addresses only, and
    /// whoever holds `open_token`.
    pub open: bool,
    /// The secret of open mode, printed at start-up in the console's address.
    pub open_token: Secret,
    /// The `Host` names answered (`--http-allowed-hosts`); none given: the
    /// loopback names in open mode, every name otherwise.
    pub allowed_hosts: Option<AllowedHosts>,
    /// How long a console login lasts.
    pub session_ttl: Duration,
    /// A request still unanswered after this is cut off (503).
    pub request_timeout: Duration,
    /// Password checks running at once.
    pub max_verifications: usize,
    /// Requests being answered at once; more wait their turn (within
    /// `request_timeout`), so a flood of reads cannot drain the store's pool.
    pub max_concurrent_requests: usize,
    /// Connections and header deadline.
    pub server: HttpServerConfig,
    /// Wrong passwords allowed per source and per user.
    pub throttle: ThrottleConfig,
    /// How often the overview is recomputed, at most.
    pub overview_every: Duration,
}

impl WebConfig {
    /// Settings for `addr` with no users.
    pub fn new(addr: SocketAddr) -> Self {
        WebConfig {
            addr,
            users: Users::default(),
            open: false,
            open_token: Secret::new(auth::random_token()),
            allowed_hosts: None,
            session_ttl: Duration::from_secs(12 * 3600),
            request_timeout: Duration::from_secs(30),
            max_verifications: 2,
            max_concurrent_requests: 64,
            server: HttpServerConfig::default(),
            throttle: ThrottleConfig::default(),
            overview_every: Duration::from_secs(1),
        }
    }

    /// The `Host` names answered, the mode's default filled in.
    pub fn hosts(&self) -> AllowedHosts {
        match &self.allowed_hosts {
            Some(hosts) => hosts.clone(),
            None if self.open => AllowedHosts::loopback(),
            None => AllowedHosts::any(),
        }
    }

    /// The console's address with open mode's token, as printed at start-up.
    pub fn open_link(&self, bound: SocketAddr) -> String {
        format!("http://{bound}/?token={}", self.open_token.expose())
    }

    /// Checks the settings; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.open && self.open_token.expose().len() < 16 {
            return Err("the --http-open token must be at least 16 characters".into());
        }
        if self.open && !self.addr.ip().is_loopback() {
            return Err(format!(
                "--http-open is refused on {}: it serves the API without login, so only on a \
                 loopback address (127.0.0.1, ::1)",
                self.addr
            ));
        }
        if !self.open && self.users.is_empty() {
            return Err(
                "--http-addr needs --http-users with at least one user (or --http-open on a \
                 loopback address for local development)"
                    .into(),
            );
        }
        if self.session_ttl < Duration::from_secs(60) {
            return Err("--http-session-ttl must be at least 1m".into());
        }
        if self.request_timeout.is_zero()
            || self.max_verifications == 0
            || self.max_concurrent_requests == 0
            || self.server.max_connections == 0
            || self.server.header_read_timeout.is_zero()
        {
            return Err(
                "the HTTP request timeout, verifications, concurrent requests, connections \
                 and header read timeout must be above zero"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct Web {
    pub api: Api,
    pub config: Arc<WebConfig>,
    /// `config.hosts()`, resolved once.
    hosts: Arc<AllowedHosts>,
    users: Arc<Users>,
    verified: Arc<auth::VerifiedCache>,
    throttle: Arc<LoginThrottle>,
    verifications: Arc<Semaphore>,
    overview: overview::OverviewCache,
}

impl Web {
    fn users(&self) -> &Users {
        &self.users
    }
}

/// Binds `config.addr` and serves until `shutdown`; returns the bound address.
pub async fn serve(
    config: WebConfig,
    api: Api,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let body_limit = api
        .config
        .limits
        .max_payload_bytes
        .saturating_add(64 * 1024);
    let timeout = config.request_timeout;
    let server = config.server.clone();
    let concurrency = config.max_concurrent_requests;
    let web = Web {
        hosts: Arc::new(config.hosts()),
        users: Arc::new(config.users.clone()),
        verifications: Arc::new(Semaphore::new(config.max_verifications)),
        verified: Arc::default(),
        throttle: Arc::new(LoginThrottle::new(config.throttle.clone())),
        overview: overview::OverviewCache::new(config.overview_every),
        config: Arc::new(config),
        api,
    };
    let addr = web.config.addr;
    let app = Router::new()
        .merge(routes::router())
        .merge(session::router())
        .merge(overview::router())
        .merge(openapi::router())
        .merge(console::router())
        .layer(axum::middleware::from_fn_with_state(
            web.clone(),
            open::exchange_link,
        ))
        .with_state(web.clone())
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(tower::limit::ConcurrencyLimitLayer::new(concurrency))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
        .layer(axum::middleware::map_response(routes::json_refusals))
        // Outermost: a request for another host is refused before any
        // other layer or route sees it.
        .layer(axum::middleware::from_fn_with_state(web, host::check_host));
    crate::intake::http_server::bind_and_serve(addr, app, server, shutdown).await
}
