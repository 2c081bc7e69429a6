//! The `/api/v1/` routes: a table of (method, path, verb, how the request
//! is built from the path, query and body). Each route hands its verb's
//! JSON request to [`Api::serve`], which the NATS API calls too. Status
//! codes follow the error code (CONTRACT.md v1.1).
//!
//! The OpenAPI document describes each route from the annotations in
//! [`docs`]; a test checks that the table and the document name the same
//! routes.

use super::auth;
use super::identity::{Identity, Refusal};
use super::users::Role;
use super::Web;
use crate::intake::api::Caller;
use axum::body::Bytes;
use axum::extract::{Path, RawPathParams, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodFilter, MethodRouter};
use axum::{Json, Router};
use chime_common::api::{Access, Verb};
use chime_common::error::ErrorReply;
use chime_common::traceparent::TRACEPARENT;
use chime_common::{ApiError, ErrorCode};
use chrono::Utc;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Sent by the console with every request, so a 401 does not make the
/// browser open its own Basic login dialog.
pub const CONSOLE_HEADER: &str = "x-chime-console";

/// How a route builds its verb's request.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// From the query string.
    Query,
    /// An empty request.
    Empty,
    /// From the body, a JSON object.
    Body,
    /// The path's parameter as this field.
    Path(&'static str),
    /// The body, with the path's parameter as this field.
    PathBody(&'static str),
}

impl Shape {
    fn request(
        self,
        param: Option<&str>,
        query: Option<String>,
        body: &[u8],
    ) -> Result<Value, ApiError> {
        match self {
            Shape::Query => query_object(query),
            Shape::Empty => Ok(Value::Object(Map::new())),
            Shape::Body => body_object(body).map(Value::Object),
            Shape::Path(key) => with_path_field(b"", key, param.unwrap_or_default()),
            Shape::PathBody(key) => with_path_field(body, key, param.unwrap_or_default()),
        }
    }
}

/// One route: a method and path that call one verb.
struct Route {
    method: Method,
    path: &'static str,
    verb: Verb,
    shape: Shape,
}

const fn route(method: Method, path: &'static str, verb: Verb, shape: Shape) -> Route {
    Route {
        method,
        path,
        verb,
        shape,
    }
}

/// Every route with a verb of its own. The job actions
/// (`/api/v1/jobs/{id}/{action}`) and `/api/v1/verbs/{verb}` name their
/// verb in the path and have handlers of their own.
#[rustfmt::skip]
const ROUTES: [Route; 18] = [
    route(Method::GET,    "/api/v1/jobs",                Verb::JobsList,        Shape::Query),
    route(Method::GET,    "/api/v1/jobs/{id}",           Verb::JobsGet,         Shape::Path("id")),
    route(Method::PUT,    "/api/v1/jobs/{id}",           Verb::JobsPut,         Shape::PathBody("id")),
    route(Method::DELETE, "/api/v1/jobs/{id}",           Verb::JobsDelete,      Shape::Path("id")),
    route(Method::POST,   "/api/v1/preview",             Verb::JobsPreview,     Shape::Body),
    route(Method::GET,    "/api/v1/firings",             Verb::FiringsList,     Shape::Query),
    route(Method::GET,    "/api/v1/firings/{id}",        Verb::FiringsGet,      Shape::Path("id")),
    route(Method::POST,   "/api/v1/firings/{id}/cancel", Verb::FiringsCancel,   Shape::PathBody("id")),
    route(Method::GET,    "/api/v1/workers",             Verb::WorkersList,     Shape::Query),
    route(Method::GET,    "/api/v1/alerts",              Verb::AlertsList,      Shape::Query),
    route(Method::GET,    "/api/v1/audit",               Verb::AuditList,       Shape::Query),
    route(Method::GET,    "/api/v1/calendars",           Verb::CalendarsList,   Shape::Empty),
    route(Method::GET,    "/api/v1/calendars/{id}",      Verb::CalendarsGet,    Shape::Path("id")),
    route(Method::PUT,    "/api/v1/calendars/{id}",      Verb::CalendarsPut,    Shape::PathBody("id")),
    route(Method::DELETE, "/api/v1/calendars/{id}",      Verb::CalendarsDelete, Shape::Path("id")),
    route(Method::GET,    "/api/v1/groups",              Verb::GroupsList,      Shape::Empty),
    route(Method::GET,    "/api/v1/groups/{name}",       Verb::GroupsGet,       Shape::Path("name")),
    route(Method::PUT,    "/api/v1/groups/{name}",       Verb::GroupsPut,       Shape::PathBody("name")),
];

pub fn router() -> Router<Web> {
    let mut paths: BTreeMap<&'static str, MethodRouter<Web>> = BTreeMap::new();
    for route in &ROUTES {
        let filter = MethodFilter::try_from(route.method.clone())
            .expect("every route's method is one axum routes");
        let (verb, shape) = (route.verb, route.shape);
        let handler = move |State(web): State<Web>,
                            method: Method,
                            headers: HeaderMap,
                            params: RawPathParams,
                            RawQuery(query): RawQuery,
                            body: Bytes| async move {
            let param = params.iter().next().map(|(_, value)| value.to_string());
            let request = shape.request(param.as_deref(), query, &body);
            call(&web, &method, &headers, verb, request).await
        };
        let methods = paths.remove(route.path).unwrap_or_default();
        paths.insert(route.path, methods.on(filter, handler));
    }
    paths
        .into_iter()
        .fold(Router::new(), |router, (path, methods)| {
            router.route(path, methods)
        })
        .route("/api/v1/jobs/{id}/{action}", post(job_action))
        .route("/api/v1/verbs/{verb}", post(any_verb))
}

/// The HTTP status of an API error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A failure reply: the NATS API's error object with its status.
pub fn error_response(error: ApiError) -> Response {
    (status_of(error.code), Json(ErrorReply { error })).into_response()
}

/// A refusal before the API: 401 and 403 carry codes of their own
/// (`unauthenticated`, `permission_denied`), which only HTTP has.
pub fn refusal_response(refusal: Refusal, headers: &HeaderMap) -> Response {
    let mut retry_after = None;
    let (status, code, message) = match refusal {
        Refusal::Unauthenticated(m) => (StatusCode::UNAUTHORIZED, "unauthenticated", m),
        Refusal::Forbidden(m) => (StatusCode::FORBIDDEN, "permission_denied", m),
        Refusal::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", m),
        Refusal::Throttled(m, wait) => {
            retry_after = Some(wait.as_secs().max(1));
            (StatusCode::TOO_MANY_REQUESTS, "unavailable", m)
        }
    };
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    let mut response = (status, Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if status == StatusCode::UNAUTHORIZED && !headers.contains_key(CONSOLE_HEADER) {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"chime\", charset=\"UTF-8\""),
        );
    }
    response
}

/// The body-size and timeout layers answer in plain text; API clients get
/// the same error object as from every other refusal.
pub async fn json_refusals(response: Response) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let error = match response.status() {
        _ if is_json => return response,
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::invalid_request("the request body is larger than this server accepts")
        }
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::REQUEST_TIMEOUT => {
            ApiError::unavailable("the request took too long; retry later")
        }
        _ => return response,
    };
    let status = response.status();
    (status, Json(ErrorReply { error })).into_response()
}

/// Who is calling and whether they may call `verb` this way.
pub async fn authorize(
    web: &Web,
    method: &Method,
    headers: &HeaderMap,
    verb: Verb,
    access: Access,
) -> Result<Identity, Refusal> {
    let identity = auth::identify(web, headers).await?;
    if !identity.role.allows(access) {
        let what = if access > verb.access() {
            format!("{verb} this way (a trigger with a payload of its own needs admin)")
        } else {
            verb.to_string()
        };
        let message = format!(
            "{} may not call {what}: role {} is too low",
            identity.name, identity.role
        );
        audit_refusal(web, &identity.name, verb, &message).await;
        return Err(Refusal::Forbidden(message));
    }
    auth::check_forgery(method, headers, &identity)?;
    Ok(identity)
}

/// Records a request refused for its caller's role: an authenticated user
/// trying what the role does not allow is worth knowing about.
async fn audit_refusal(web: &Web, actor: &str, verb: Verb, message: &str) {
    let record = crate::store::AuditRecord {
        actor,
        via: "http",
        verb: verb.as_str(),
        target: "",
        before_version: None,
        after_version: None,
        outcome: "permission_denied",
        message: Some(message),
    };
    crate::intake::api::record_audit(&web.api.store, &web.api.metrics, &record, Utc::now()).await;
}

/// Authorizes, then answers `verb` with `request` as [`Api::serve`] does
/// over NATS.
async fn call(
    web: &Web,
    method: &Method,
    headers: &HeaderMap,
    known: Verb,
    request: Result<Value, ApiError>,
) -> Response {
    let request = match known {
        Verb::JobsTrigger => with_trace_header(request, headers),
        _ => request,
    };
    let body = request.and_then(|v| {
        serde_json::to_vec(&v).map_err(|e| ApiError::internal(format!("cannot encode: {e}")))
    });
    // Authorized before a bad body is reported, so a caller without the
    // role learns nothing from the validation.
    let access = body
        .as_ref()
        .map_or(known.access(), |body| known.access_with(body));
    let identity = match authorize(web, method, headers, known, access).await {
        Ok(identity) => identity,
        Err(refusal) => return refusal_response(refusal, headers),
    };
    let body = match body {
        Ok(body) => body,
        Err(e) => return error_response(e),
    };
    let caller = Caller {
        name: identity.name,
        via: "http",
    };
    match web
        .api
        .serve(&caller, known.as_str(), &body, Utc::now())
        .await
    {
        // A viewer reads jobs without the secrets their payloads may hold.
        Ok(reply) if identity.role == Role::Viewer => Json(reply.redacted()).into_response(),
        Ok(reply) => Json(reply).into_response(),
        Err(e) => error_response(e),
    }
}

/// A trigger with the standard `traceparent` request header (W3C Trace
/// Context over HTTP) as its `traceparent` field, when its body names none;
/// checked as the field is, so a malformed header is refused naming
/// `traceparent`.
fn with_trace_header(
    request: Result<Value, ApiError>,
    headers: &HeaderMap,
) -> Result<Value, ApiError> {
    let Some(value) = headers.get(TRACEPARENT) else {
        return request;
    };
    let mut request = request?;
    if let Value::Object(map) = &mut request {
        if !map.contains_key(TRACEPARENT) {
            let text = value.to_str().map_err(|_| {
                ApiError::invalid(TRACEPARENT, "the traceparent header is not visible ASCII")
            })?;
            map.insert(TRACEPARENT.into(), Value::String(text.to_string()));
        }
    }
    Ok(request)
}

/// The JSON object of a request body (empty means `{}`).
fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid_request(
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::invalid_request(format!(
            "the request is not valid JSON: {e}"
        ))),
    }
}

/// The body with `key` set from the path; a body naming another value is refused.
fn with_path_field(body: &[u8], key: &str, value: &str) -> Result<Value, ApiError> {
    let mut map = body_object(body)?;
    match map.get(key) {
        Some(Value::String(given)) if given != value => {
            return Err(ApiError::invalid(
                key,
                format!("is {given:?} in the body but {value:?} in the path"),
            ));
        }
        Some(Value::String(_)) | None => {}
        Some(_) => return Err(ApiError::invalid(key, "expected a string")),
    }
    map.insert(key.to_string(), Value::String(value.to_string()));
    Ok(Value::Object(map))
}

/// The query string as a request object: `limit` and `count` are numbers,
/// everything else strings; a key given twice is refused.
fn query_object(query: Option<String>) -> Result<Value, ApiError> {
    let mut map = Map::new();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let value = match key.as_ref() {
            "limit" | "count" => match value.parse::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => {
                    return Err(ApiError::invalid(
                        key.as_ref(),
                        format!("expected a whole number, found {value:?}"),
                    ))
                }
            },
            _ => Value::String(value.into_owned()),
        };
        if map.insert(key.to_string(), value).is_some() {
            return Err(ApiError::invalid(key.as_ref(), "is given more than once"));
        }
    }
    Ok(Value::Object(map))
}

/// `pause`, `resume`, `trigger` or `backfill` one job (operator); the body
/// holds the verb's other fields (`payload` and `traceparent` of trigger,
/// `until` of pause, `from`/`to` of backfill).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/{action}", tag = "jobs",
    params(("id" = String, Path),
        ("action" = String, Path, description = "pause, resume, trigger or backfill"),
        ("traceparent" = Option<String>, Header, description = "trigger: W3C Trace Context; \
            the run's firings keep its trace id (the body's `traceparent` field, if given, wins)")),
    request_body(content = Object, description = "the verb's fields besides id"),
    responses((status = 200, description = "`{\"job\"}`, `{\"firing_id\"}` or `{\"firing_ids\"}`"),
        (status = 400, body = ErrorReply), (status = 404, body = ErrorReply),
        (status = 401), (status = 403)))]
async fn job_action(
    State(web): State<Web>,
    method: Method,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let verb = match action.as_str() {
        "pause" => Verb::JobsPause,
        "resume" => Verb::JobsResume,
        "trigger" => Verb::JobsTrigger,
        "backfill" => Verb::JobsBackfill,
        other => {
            return error_response(ApiError::not_found(format!(
                "no job action {other:?}; actions are pause, resume, trigger, backfill"
            )))
        }
    };
    let request = with_path_field(&body, "id", &id);
    call(&web, &method, &headers, verb, request).await
}

/// Any verb of the NATS API by its name, with the NATS request body:
/// verbs without a route of their own (and scripts that speak the NATS
/// API's shapes) use this.
#[utoipa::path(post, path = "/api/v1/verbs/{verb}", tag = "verbs",
    params(("verb" = String, Path, description = "a NATS API verb, such as `jobs.put`"),
        ("traceparent" = Option<String>, Header, description = "jobs.trigger: W3C Trace Context, \
            as the request's `traceparent` field when the body has none")),
    request_body(content = Object, description = "the verb's NATS request"),
    responses((status = 200, description = "the verb's NATS reply"),
        (status = 400, body = ErrorReply), (status = 404, body = ErrorReply),
        (status = 401), (status = 403)))]
async fn any_verb(
    State(web): State<Web>,
    method: Method,
    headers: HeaderMap,
    Path(verb): Path<String>,
    body: Bytes,
) -> Response {
    let verb = match verb.parse::<Verb>() {
        Ok(verb) => verb,
        Err(e) => return error_response(e),
    };
    let request = body_object(&body).map(Value::Object);
    call(&web, &method, &headers, verb, request).await
}

/// The OpenAPI annotations of the table's routes: utoipa reads an
/// annotation off a function, and these functions are never called.
#[expect(dead_code, reason = "only their utoipa annotations are used")]
pub mod docs {
    use chime_common::error::ErrorReply;

    /// List jobs, newest first.
    #[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs",
        params(
            ("group" = Option<String>, Query, description = "only this group"),
            ("state" = Option<String>, Query, description = "active, paused or completed"),
            ("selector" = Option<String>, Query, description = "label selector, `team=data,env!=dev`"),
            ("limit" = Option<u32>, Query, description = "page size, 1 to 1000, default 100"),
            ("after" = Option<String>, Query, description = "`next` of the previous page"),
        ),
        responses(
            (status = 200, body = chime_common::api::ListJobsReply),
            (status = 400, body = ErrorReply), (status = 401), (status = 403),
        ))]
    pub fn list_jobs() {}

    /// One job.
    #[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
        params(("id" = String, Path)),
        responses((status = 200, body = chime_common::api::JobReply),
            (status = 404, body = ErrorReply), (status = 401), (status = 403)))]
    pub fn get_job() {}

    /// Creates or replaces a job (admin). The body is a JobSpec; its `id`, if
    /// given, must be the path's.
    #[utoipa::path(put, path = "/api/v1/jobs/{id}", tag = "jobs",
        params(("id" = String, Path)),
        request_body = chime_common::JobSpec,
        responses((status = 200, body = chime_common::api::JobReply),
            (status = 400, body = ErrorReply), (status = 409, body = ErrorReply),
            (status = 401), (status = 403)))]
    pub fn put_job() {}

    /// Deletes a job (admin); the reply is its last state.
    #[utoipa::path(delete, path = "/api/v1/jobs/{id}", tag = "jobs",
        params(("id" = String, Path)),
        responses((status = 200, body = chime_common::api::JobReply),
            (status = 404, body = ErrorReply), (status = 401), (status = 403)))]
    pub fn delete_job() {}

    /// The next instants of a schedule.
    #[utoipa::path(post, path = "/api/v1/preview", tag = "jobs",
        request_body = chime_common::api::PreviewRequest,
        responses((status = 200, body = chime_common::api::PreviewReply),
            (status = 400, body = ErrorReply), (status = 401)))]
    pub fn preview() {}

    /// Firing history, newest first.
    #[utoipa::path(get, path = "/api/v1/firings", tag = "firings",
        params(
            ("job_id" = Option<String>, Query), ("state" = Option<String>, Query),
            ("limit" = Option<u32>, Query), ("after" = Option<String>, Query),
        ),
        responses((status = 200, body = chime_common::api::ListFiringsReply),
            (status = 400, body = ErrorReply), (status = 401)))]
    pub fn list_firings() {}

    /// One firing, its whole output and error included.
    #[utoipa::path(get, path = "/api/v1/firings/{id}", tag = "firings",
        params(("id" = String, Path, description = "the firing id, `#` written `%23`")),
        responses((status = 200, description = "`{\"firing\": Firing}`"),
            (status = 400, body = ErrorReply), (status = 404, body = ErrorReply), (status = 401)))]
    pub fn get_firing() {}

    /// Cancels a firing (operator).
    #[utoipa::path(post, path = "/api/v1/firings/{id}/cancel", tag = "firings",
        params(("id" = String, Path)),
        responses((status = 200, description = "`{\"firing\": Firing}`"),
            (status = 404, body = ErrorReply), (status = 401), (status = 403)))]
    pub fn cancel_firing() {}

    /// Live workers.
    #[utoipa::path(get, path = "/api/v1/workers", tag = "workers",
        params(("group" = Option<String>, Query)),
        responses((status = 200, body = chime_common::api::ListWorkersReply), (status = 401)))]
    pub fn list_workers() {}

    /// Recent alerts, newest first.
    #[utoipa::path(get, path = "/api/v1/alerts", tag = "alerts",
        params(("kind" = Option<String>, Query), ("job_id" = Option<String>, Query),
            ("limit" = Option<u32>, Query)),
        responses((status = 200, body = chime_common::api::ListAlertsReply),
            (status = 400, body = ErrorReply), (status = 401)))]
    pub fn list_alerts() {}

    /// The audit trail of mutating requests, newest first.
    #[utoipa::path(get, path = "/api/v1/audit", tag = "audit",
        params(("target" = Option<String>, Query, description = "only this job or firing"),
            ("limit" = Option<u32>, Query), ("after" = Option<String>, Query)),
        responses((status = 200, body = chime_common::api::ListAuditReply),
            (status = 400, body = ErrorReply), (status = 401)))]
    pub fn list_audit() {}

    /// Every calendar.
    #[utoipa::path(get, path = "/api/v1/calendars", tag = "calendars",
        responses((status = 200, body = chime_common::api::ListCalendarsReply), (status = 401)))]
    pub fn list_calendars() {}

    /// One calendar.
    #[utoipa::path(get, path = "/api/v1/calendars/{id}", tag = "calendars",
        params(("id" = String, Path)),
        responses((status = 200, body = chime_common::api::CalendarReply),
            (status = 404, body = ErrorReply), (status = 401)))]
    pub fn get_calendar() {}

    /// Creates or replaces a calendar (admin): `{"dates": ["YYYY-MM-DD"], "weekdays"?}`.
    #[utoipa::path(put, path = "/api/v1/calendars/{id}", tag = "calendars",
        params(("id" = String, Path)),
        request_body(content = Object, description = "`{\"dates\": [..], \"weekdays\"?: [..]}`"),
        responses((status = 200, body = chime_common::api::CalendarReply),
            (status = 400, body = ErrorReply), (status = 401), (status = 403)))]
    pub fn put_calendar() {}

    /// Deletes a calendar no job excludes (admin).
    #[utoipa::path(delete, path = "/api/v1/calendars/{id}", tag = "calendars",
        params(("id" = String, Path)),
        responses((status = 200, body = chime_common::api::CalendarReply),
            (status = 404, body = ErrorReply), (status = 409, body = ErrorReply),
            (status = 401), (status = 403)))]
    pub fn delete_calendar() {}

    /// Every group with a limit, a job, or firings running or held.
    #[utoipa::path(get, path = "/api/v1/groups", tag = "groups",
        responses((status = 200, body = chime_common::api::ListGroupsReply), (status = 401)))]
    pub fn list_groups() {}

    /// One group: its limits, and what runs and is held in it.
    #[utoipa::path(get, path = "/api/v1/groups/{name}", tag = "groups",
        params(("name" = String, Path)),
        responses((status = 200, body = chime_common::api::GroupReply),
            (status = 400, body = ErrorReply), (status = 401)))]
    pub fn get_group() {}

    /// Sets a group's limits (admin): `{"max_concurrent"?, "max_per_second"?}`;
    /// a limit left out is removed.
    #[utoipa::path(put, path = "/api/v1/groups/{name}", tag = "groups",
        params(("name" = String, Path)),
        request_body(content = Object, description = "`{\"max_concurrent\"?: N, \"max_per_second\"?: N}`"),
        responses((status = 200, body = chime_common::api::GroupReply),
            (status = 400, body = ErrorReply), (status = 401), (status = 403)))]
    pub fn put_group() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_fields_must_agree_with_the_body() {
        let v = with_path_field(br#"{"handler": "x"}"#, "id", "a").unwrap();
        assert_eq!(v, serde_json::json!({"handler": "x", "id": "a"}));
        let e = with_path_field(br#"{"id": "b"}"#, "id", "a").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("id"));
        let e = with_path_field(b"[1]", "id", "a").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(with_path_field(b"  ", "id", "a").is_ok());
    }

    /// The route table and the OpenAPI document name the same routes.
    #[test]
    fn every_route_is_documented_and_every_documented_route_is_served() {
        let document = super::super::openapi::document();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, item) in &document.paths.paths {
            let methods = [
                ("GET", item.get.is_some()),
                ("PUT", item.put.is_some()),
                ("POST", item.post.is_some()),
                ("DELETE", item.delete.is_some()),
            ];
            for (method, present) in methods {
                if present && path.starts_with("/api/v1/") {
                    documented.push((method.to_string(), path.clone()));
                }
            }
        }
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        // Served by handlers of their own, here and in the console's modules.
        for (method, path) in [
            ("POST", "/api/v1/jobs/{id}/{action}"),
            ("POST", "/api/v1/verbs/{verb}"),
        ] {
            served.push((method.into(), path.into()));
        }
        let console: Vec<_> = documented
            .iter()
            .filter(|(_, path)| {
                ["/api/v1/session", "/api/v1/overview", "/api/v1/events"]
                    .iter()
                    .any(|p| path.starts_with(p))
            })
            .cloned()
            .collect();
        served.extend(console);
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
    }

    #[test]
    fn queries_become_requests() {
        let v = query_object(Some("group=g&limit=5".into())).unwrap();
        assert_eq!(v, serde_json::json!({"group": "g", "limit": 5}));
        let e = query_object(Some("limit=ten".into())).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("limit"));
        let e = query_object(Some("group=a&group=b".into())).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("group"));
        assert_eq!(query_object(None).unwrap(), serde_json::json!({}));
    }
}
