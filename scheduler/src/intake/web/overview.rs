//! The console's overview: firings per second, lateness, failures, dead
//! letters, workers up and recent alerts, as JSON (`/api/v1/overview`) and
//! as a live stream of server-sent events (`/api/v1/events`).
//!
//! One snapshot is computed at most once per `overview_every` per replica,
//! however many consoles watch, and from bounded reads only.

use super::routes::{authorize, error_response, refusal_response};
use super::Web;
use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chime_common::api::{ListAlertsRequest, Verb};
use chime_common::duration::rfc3339_ms;
use chime_common::protocol::Alert;
use chime_common::ApiError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The span the rates and lateness cover.
const WINDOW: Duration = Duration::from_secs(60);
/// Most firing rows one snapshot reads.
const ROW_CAP: u32 = 20_000;
/// Alerts a snapshot carries.
const RECENT_ALERTS: u32 = 5;
/// How often the event stream sends a snapshot.
const EVENT_EVERY: Duration = Duration::from_secs(2);
/// An event stream ends after this and the browser reconnects, so a
/// session that ended stops receiving.
const STREAM_FOR: Duration = Duration::from_secs(300);

pub fn router() -> Router<Web> {
    Router::new()
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/events", get(events))
}

/// What the overview page shows.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Overview {
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = String)]
    pub at: DateTime<Utc>,
    /// Seconds the figures below cover.
    pub window_seconds: f64,
    /// Firings that started, per second.
    pub started_per_second: f64,
    pub succeeded: u64,
    /// Ended `failed` or `lost`.
    pub failed: u64,
    /// Start lateness (started − due), milliseconds.
    pub lateness_p50_ms: Option<i64>,
    pub lateness_p99_ms: Option<i64>,
    pub executing: i64,
    /// Messages in the dead-letter stream.
    pub dead_letters: u64,
    pub workers_up: usize,
    pub alerts: Vec<Alert>,
}

/// The last snapshot and when it was made.
#[derive(Clone)]
pub struct OverviewCache {
    every: Duration,
    last: Arc<Mutex<Option<(Instant, Overview)>>>,
}

impl OverviewCache {
    pub fn new(every: Duration) -> Self {
        OverviewCache {
            every,
            last: Arc::default(),
        }
    }

    /// The snapshot, recomputed when older than `every`.
    async fn get(&self, web: &Web) -> Result<Overview, ApiError> {
        let mut last = self.last.lock().await;
        if let Some((at, overview)) = last.as_ref() {
            if at.elapsed() < self.every {
                return Ok(overview.clone());
            }
        }
        let overview = compute(web).await?;
        *last = Some((Instant::now(), overview.clone()));
        Ok(overview)
    }
}

async fn compute(web: &Web) -> Result<Overview, ApiError> {
    let now = Utc::now();
    let api = &web.api;
    let activity = api.store.activity(now, WINDOW, ROW_CAP).await?;
    let window_seconds = activity.covered_ms as f64 / 1000.0;
    let percentile = |p: f64| {
        let n = activity.lateness_ms.len();
        (n > 0).then(|| activity.lateness_ms[((n - 1) as f64 * p).round() as usize])
    };
    let dead_letters = match api.jetstream.get_stream(api.subjects.dead_stream()).await {
        Ok(mut stream) => stream.info().await.map(|i| i.state.messages).unwrap_or(0),
        Err(_) => 0,
    };
    let alerts = api
        .alerts(&ListAlertsRequest {
            limit: Some(RECENT_ALERTS),
            ..ListAlertsRequest::default()
        })
        .await
        .unwrap_or_default();
    Ok(Overview {
        at: now,
        window_seconds,
        started_per_second: activity.started as f64 / window_seconds.max(0.001),
        succeeded: activity.succeeded,
        failed: activity.failed,
        lateness_p50_ms: percentile(0.5),
        lateness_p99_ms: percentile(0.99),
        executing: activity.executing,
        dead_letters,
        workers_up: api.workers(None).await.map(|w| w.len()).unwrap_or(0),
        alerts,
    })
}

/// Whether the caller may read the overview: whoever may list firings.
async fn may_read(web: &Web, method: &Method, headers: &HeaderMap) -> Result<(), Response> {
    let verb = Verb::FiringsList;
    authorize(web, method, headers, verb, verb.access())
        .await
        .map(drop)
        .map_err(|refusal| refusal_response(refusal, headers))
}

/// The overview now (viewer).
#[utoipa::path(get, path = "/api/v1/overview", tag = "console",
    responses((status = 200, body = Overview), (status = 401)))]
async fn overview(State(web): State<Web>, method: Method, headers: HeaderMap) -> Response {
    if let Err(refused) = may_read(&web, &method, &headers).await {
        return refused;
    }
    match web.overview.get(&web).await {
        Ok(overview) => Json(overview).into_response(),
        Err(e) => error_response(e),
    }
}

/// Server-sent events: an `overview` event every two seconds (viewer).
#[utoipa::path(get, path = "/api/v1/events", tag = "console",
    responses((status = 200, description = "text/event-stream of `overview` events"),
        (status = 401)))]
async fn events(State(web): State<Web>, method: Method, headers: HeaderMap) -> Response {
    if let Err(refused) = may_read(&web, &method, &headers).await {
        return refused;
    }
    let started = Instant::now();
    let stream = futures::stream::unfold((web, true), move |(web, first)| async move {
        if !first {
            tokio::time::sleep(EVENT_EVERY).await;
        }
        if started.elapsed() > STREAM_FOR {
            return None;
        }
        let event = match web.overview.get(&web).await {
            Ok(overview) => Event::default().event("overview").json_data(&overview),
            Err(e) => Event::default().event("unavailable").json_data(&e),
        };
        Some((event, (web, false)))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
