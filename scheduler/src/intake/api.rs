//! The request/reply API: `chime.api.v1.<verb>`, JSON in, JSON out.
//!
//! Every replica subscribes in one queue group, so any of them answers.
//! Validation comes from `chime-common`; a request that fails validation
//! changes nothing. Failures reply `{"error": {"code", "message", "field"?}}`.

use crate::firing::immediate::Wake;
use crate::intake::replies::{Replies, ReplyKind};
use crate::ops::job_metrics::JobChanges;
use crate::ops::metrics::Metrics;
use crate::ops::traces;
use crate::store::{
    AuditFilter, AuditRecord, FiringFilter, JobFilter, JobSelection, Pause, Store,
    CANCELLED_BY_OPERATOR,
};
use crate::workers::registry::{Registry, Unoffered};
use chime_common::api::{
    requested_page, requested_selector, Access, BackfillReply, BackfillRequest, CalendarReply,
    FiringReply, GroupReply, GroupRequest, IdRequest, JobsReply, ListAlertsReply,
    ListAlertsRequest, ListAuditReply, ListAuditRequest, ListCalendarsReply, ListCalendarsRequest,
    ListFiringsReply, ListFiringsRequest, ListGroupsReply, ListGroupsRequest, ListJobsReply,
    ListJobsRequest, ListWorkersReply, ListWorkersRequest, PauseRequest, PreviewRequest, Reply,
    TriggerReply, TriggerRequest, Verb, BACKFILL_LIMIT_DEFAULT,
};
use chime_common::bounds::{check_group, check_name, MAX_ID_LEN};
use chime_common::calendars::Calendar;
use chime_common::concurrency::GroupLimits;
use chime_common::error::ErrorReply;
use chime_common::job::{if_version, IF_VERSION_FIELD};
use chime_common::preview::Preview;
use chime_common::protocol::{Alert, CancelRequest, WorkerInfo};
use chime_common::traceparent::{TraceParent, TRACEPARENT};
use chime_common::warning::Warning;
use chime_common::{ApiError, ErrorCode, FiringId, JobSpec, Limits, Subjects};
use chime_runtime::traces::FiringAttributes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The longest a put's reply waits for the heartbeats its handler warning
/// is judged by.
const WARNING_READ: std::time::Duration = std::time::Duration::from_millis(500);

/// API settings.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Requests handled at once per replica.
    pub concurrency: usize,
    /// Payload and other limits.
    pub limits: Limits,
    /// Most instants one preview may ask for.
    pub max_preview: u32,
    /// `alerts.list` reads at most this many of the newest alerts to find
    /// the ones it was asked for.
    pub max_alert_scan: u32,
    /// NATS users answered as HTTP viewers are, job payloads redacted,
    /// recognised by their reply inbox `_INBOX.<user>.…`: only that user can
    /// read an answer sent there (docs/SECURITY.md).
    pub read_only_users: Vec<String>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            concurrency: 256,
            limits: Limits::default(),
            max_preview: 1_000,
            max_alert_scan: 1_000,
            read_only_users: vec!["chime-viewer".into()],
        }
    }
}

/// The API service of one replica.
#[derive(Clone)]
pub struct Api {
    pub config: ApiConfig,
    pub store: Store,
    pub nats: async_nats::Client,
    pub subjects: Subjects,
    /// The live workers, from the heartbeat bucket.
    pub workers: Registry,
    pub jetstream: async_nats::jetstream::Context,
    pub metrics: Metrics,
    /// Woken after a trigger or a backfill, so its firings leave at once.
    pub immediate: Wake,
    /// Sends answers to the requesters' inboxes only.
    pub replies: Replies,
    /// Told of each job put or deleted, so this replica's per-job gauges
    /// follow its group or drop its series at once.
    pub job_changes: JobChanges,
}

/// Who sent a request, for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The HTTP user, `anonymous` with `--http-open`, or `nats`.
    pub name: String,
    /// `http` or `nats`.
    pub via: &'static str,
}

impl Caller {
    /// A request over NATS: the server checked the account; the replica
    /// cannot tell which.
    pub fn nats() -> Caller {
        Caller {
            name: "nats".into(),
            via: "nats",
        }
    }

    /// A request over NATS answered at `reply`. With NATS permissions each
    /// user reads only its own inboxes, `_INBOX.<user>.<id>.<n>`, so the
    /// inbox names who can hear the answer: `nats:<user>`. A client may
    /// still name another user's inbox (and never hear the answer), so the
    /// name is what the requester claims within the rights the server
    /// granted it (docs/SECURITY.md). A default inbox (`_INBOX.<id>.<n>`)
    /// names nobody: `nats`.
    pub fn nats_inbox(reply: &str) -> Caller {
        let tokens: Vec<&str> = reply.split('.').collect();
        match tokens.as_slice() {
            ["_INBOX", user, _, _, ..] if user.len() <= 64 => Caller {
                name: format!("nats:{user}"),
                via: "nats",
            },
            _ => Caller::nats(),
        }
    }
}

/// Parses a request body (an API request, a worker's start request or
/// finished event) into `T`, naming the offending field on failure; a body
/// that is not JSON, or not of the right shape as a whole, names none.
pub fn parse_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // serde reads a struct from an array too, and would name its items
        // (`[0]`) as the fields at fault. Looked at only on failure: the
        // body is parsed once when it is right.
        if serde_json::from_slice::<Value>(body).is_ok_and(|v| !v.is_object()) {
            return ApiError::invalid_request("the request is not a JSON object");
        }
        let path = e.path().to_string();
        let inner = e.into_inner();
        let text = inner.to_string();
        // serde names unknown and missing fields only in its message.
        let named = text
            .split('`')
            .nth(1)
            .filter(|_| text.starts_with("unknown field") || text.starts_with("missing field"));
        let field = match (named, path.as_str()) {
            (Some(name), "." | "") => name.to_string(),
            // For unknown fields the path already ends with the name.
            (Some(name), p) if p == name || p.ends_with(&format!(".{name}")) => p.to_string(),
            (Some(name), parent) => format!("{parent}.{name}"),
            (None, p) if p != "." => p.to_string(),
            (None, _) => String::new(),
        };
        if inner.is_syntax() || inner.is_eof() {
            ApiError::invalid_request(format!("the request is not valid JSON: {text}"))
        } else {
            ApiError::invalid(field, text)
        }
    })
}

/// `jobs.put`: the spec and its `if_version`, every error of both at once.
fn parse_put(body: &[u8], config: &ApiConfig) -> Result<ApiRequest, ApiError> {
    let body = parse_value(body)?;
    let spec = JobSpec::from_json(&body, &config.limits);
    match (spec, if_version(&body)) {
        (Ok(spec), Ok(expected)) => Ok(ApiRequest::PutJob(Box::new(spec), expected)),
        (spec, expected) => {
            let mut errors = spec.err().unwrap_or_default();
            errors.extend(expected.err());
            Err(ApiError::from_field_errors(errors))
        }
    }
}

/// `jobs.pause` or `jobs.resume`: one job by id, or many by group or selector.
fn parse_pause(verb: Verb, body: &[u8]) -> Result<ApiRequest, ApiError> {
    let req: PauseRequest = parse_request(body)?;
    let pause = match (verb, req.until) {
        (Verb::JobsPause, until) => Pause::Until(until),
        (_, None) => Pause::Resume,
        (_, Some(_)) => return Err(ApiError::invalid("until", "only jobs.pause takes until")),
    };
    let target = match (req.id, req.group, req.selector) {
        (Some(id), None, None) => {
            check_id(&id)?;
            PauseTarget::One(id)
        }
        (Some(_), _, _) => {
            return Err(ApiError::invalid(
                "id",
                "names one job, group and selector choose many: give one or the other",
            ))
        }
        (None, None, None) => {
            return Err(ApiError::invalid(
                "id",
                "is required (or group or selector, to choose many jobs)",
            ))
        }
        (None, group, selector) => PauseTarget::Many(JobSelection {
            selector: requested_selector(selector.as_deref(), "selector")?,
            group,
        }),
    };
    Ok(ApiRequest::SetPaused(target, pause))
}

/// The firing a `firings.get` or `firings.cancel` names.
fn parse_firing_id(body: &[u8]) -> Result<FiringId, ApiError> {
    let req: IdRequest = parse_request(body)?;
    let id: FiringId = req
        .id
        .parse()
        .map_err(|e: String| ApiError::invalid("id", e))?;
    check_name(&id.job_id, MAX_ID_LEN)
        .map_err(|e| ApiError::invalid("id", format!("names no job id that can exist: {e}")))?;
    Ok(id)
}

/// The `traceparent` a trigger carries, checked.
fn given_trace(req: &TriggerRequest) -> Result<Option<TraceParent>, ApiError> {
    req.traceparent
        .as_deref()
        .map(|text| {
            TraceParent::parse(text).map_err(|e| ApiError::invalid(TRACEPARENT, e.to_string()))
        })
        .transpose()
}

fn parse_value(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_request(format!("the request is not valid JSON: {e}")))
}

fn check_id(id: &str) -> Result<(), ApiError> {
    check_name(id, MAX_ID_LEN).map_err(|e| ApiError::invalid("id", e))
}

/// The jobs a pause or resume changes.
#[derive(Debug, Clone)]
pub enum PauseTarget {
    One(String),
    Many(JobSelection),
}

/// A request that passed every check needing no store: what
/// [`Api::handle`] acts on. Public so the fuzz targets (docs/FUZZING.md)
/// exercise exactly the parsing and validation the API applies.
#[derive(Debug, Clone)]
pub enum ApiRequest {
    /// `jobs.put`, with its `if_version`.
    PutJob(Box<JobSpec>, Option<i64>),
    GetJob(String),
    ListJobs(JobFilter),
    DeleteJob(String),
    /// `jobs.pause` or `jobs.resume`.
    SetPaused(PauseTarget, Pause),
    Trigger(TriggerRequest),
    Backfill(BackfillRequest),
    /// `jobs.preview`: the instants, computed; only `exclude` needs the store.
    Preview(Preview),
    ListFirings(FiringFilter),
    /// `firings.get`.
    GetFiring(FiringId),
    /// `firings.cancel`.
    CancelFiring(FiringId),
    ListWorkers(ListWorkersRequest),
    ListAlerts(ListAlertsRequest),
    ListAudit(AuditFilter),
    PutCalendar(Calendar),
    GetCalendar(String),
    DeleteCalendar(String),
    ListCalendars,
    /// `groups.put`: the group's new limits.
    PutGroup(GroupLimits),
    GetGroup(String),
    ListGroups,
}

impl ApiRequest {
    /// Parses and checks the body of `verb` (as the subject names it, so
    /// an unknown verb is refused here too); `now` is the default `from` of
    /// a preview.
    pub fn parse(
        verb: &str,
        body: &[u8],
        config: &ApiConfig,
        now: DateTime<Utc>,
    ) -> Result<ApiRequest, ApiError> {
        let id_request = || -> Result<String, ApiError> {
            let req: IdRequest = parse_request(body)?;
            check_id(&req.id)?;
            Ok(req.id)
        };
        Ok(match verb.parse::<Verb>()? {
            Verb::JobsPut => parse_put(body, config)?,
            Verb::JobsGet => ApiRequest::GetJob(id_request()?),
            Verb::JobsList => {
                let req: ListJobsRequest = parse_request(body)?;
                ApiRequest::ListJobs(JobFilter {
                    selector: requested_selector(req.selector.as_deref(), "selector")?,
                    group: req.group,
                    state: req.state,
                    limit: requested_page(req.limit)?,
                    after: req.after,
                })
            }
            Verb::JobsDelete => ApiRequest::DeleteJob(id_request()?),
            verb @ (Verb::JobsPause | Verb::JobsResume) => parse_pause(verb, body)?,
            Verb::JobsTrigger => {
                let req: TriggerRequest = parse_request(body)?;
                check_id(&req.id)?;
                given_trace(&req)?;
                if let Some(payload) = &req.payload {
                    let size = serde_json::to_vec(payload)
                        .map(|v| v.len())
                        .unwrap_or(usize::MAX);
                    if size > config.limits.max_payload_bytes {
                        return Err(ApiError::invalid(
                            "payload",
                            format!(
                                "is {size} bytes encoded; the limit is {} bytes",
                                config.limits.max_payload_bytes
                            ),
                        ));
                    }
                }
                ApiRequest::Trigger(req)
            }
            Verb::JobsBackfill => {
                // The range and `limit` are checked by the store, which
                // knows `now` the same way for every caller.
                let req: BackfillRequest = parse_request(body)?;
                check_id(&req.id)?;
                ApiRequest::Backfill(req)
            }
            Verb::JobsPreview => {
                let req: PreviewRequest = parse_request(body)?;
                ApiRequest::Preview(Preview::compute(&req, now, config.max_preview)?)
            }
            Verb::FiringsList => {
                let req: ListFiringsRequest = parse_request(body)?;
                ApiRequest::ListFirings(FiringFilter {
                    job_id: req.job_id,
                    state: req.state,
                    limit: requested_page(req.limit)?,
                    after: req.after,
                })
            }
            Verb::FiringsGet => ApiRequest::GetFiring(parse_firing_id(body)?),
            Verb::FiringsCancel => ApiRequest::CancelFiring(parse_firing_id(body)?),
            Verb::WorkersList => ApiRequest::ListWorkers(parse_request(body)?),
            Verb::AlertsList => {
                let mut req: ListAlertsRequest = parse_request(body)?;
                req.limit = Some(requested_page(req.limit)?);
                ApiRequest::ListAlerts(req)
            }
            Verb::AuditList => {
                let req: ListAuditRequest = parse_request(body)?;
                ApiRequest::ListAudit(AuditFilter {
                    target: req.target,
                    limit: requested_page(req.limit)?,
                    after: req.after,
                })
            }
            Verb::CalendarsPut => ApiRequest::PutCalendar(
                Calendar::from_json(&parse_value(body)?).map_err(ApiError::from_field_errors)?,
            ),
            Verb::CalendarsGet => ApiRequest::GetCalendar(id_request()?),
            Verb::CalendarsDelete => ApiRequest::DeleteCalendar(id_request()?),
            Verb::CalendarsList => {
                let _: ListCalendarsRequest = parse_request(body)?;
                ApiRequest::ListCalendars
            }
            Verb::GroupsPut => ApiRequest::PutGroup(
                GroupLimits::from_json(&parse_value(body)?).map_err(ApiError::from_field_errors)?,
            ),
            Verb::GroupsGet => {
                let req: GroupRequest = parse_request(body)?;
                check_group(&req.name).map_err(|e| ApiError::invalid("name", e))?;
                ApiRequest::GetGroup(req.name)
            }
            Verb::GroupsList => {
                let _: ListGroupsRequest = parse_request(body)?;
                ApiRequest::ListGroups
            }
        })
    }

    /// What the audit trail keeps of a request beyond its target: the
    /// digest of a trigger's own payload, so what ran can be matched later
    /// without the trail holding the payload's secrets.
    pub fn audit_detail(&self) -> Option<String> {
        match self {
            ApiRequest::Trigger(TriggerRequest {
                payload: Some(payload),
                ..
            }) => {
                let bytes = serde_json::to_vec(payload).unwrap_or_default();
                Some(format!(
                    "payload override sha256:{}",
                    chime_common::protocol::payload_sha256(&bytes)
                ))
            }
            _ => None,
        }
    }

    /// What a mutating request names, for the audit trail: a job or
    /// calendar id, or for a pause of many, `group=G` and the selector;
    /// `None` for reads.
    pub fn target(&self) -> Option<String> {
        match self {
            ApiRequest::PutJob(spec, _) => Some(spec.id.clone()),
            ApiRequest::CancelFiring(id) => Some(id.job_id.clone()),
            ApiRequest::DeleteJob(id) | ApiRequest::SetPaused(PauseTarget::One(id), _) => {
                Some(id.clone())
            }
            ApiRequest::SetPaused(PauseTarget::Many(selection), _) => {
                let parts: Vec<String> = selection
                    .group
                    .iter()
                    .map(|g| format!("group={g}"))
                    .chain(selection.selector.iter().map(|s| format!("selector {s}")))
                    .collect();
                Some(parts.join(" "))
            }
            ApiRequest::Trigger(req) => Some(req.id.clone()),
            ApiRequest::Backfill(req) => Some(req.id.clone()),
            ApiRequest::PutCalendar(calendar) => Some(calendar.id.clone()),
            ApiRequest::DeleteCalendar(id) => Some(id.clone()),
            ApiRequest::PutGroup(limits) => Some(format!("group={}", limits.name)),
            ApiRequest::GetCalendar(_)
            | ApiRequest::ListCalendars
            | ApiRequest::GetGroup(_)
            | ApiRequest::ListGroups => None,
            ApiRequest::GetJob(_)
            | ApiRequest::ListJobs(_)
            | ApiRequest::Preview(_)
            | ApiRequest::ListFirings(_)
            | ApiRequest::GetFiring(_)
            | ApiRequest::ListWorkers(_)
            | ApiRequest::ListAlerts(_)
            | ApiRequest::ListAudit(_) => None,
        }
    }
}

impl Api {
    /// Answers one request from `caller`, over NATS or HTTP alike: the reply
    /// to `verb` given `body`, counted in `chime_api_requests_total`. A
    /// mutating request is recorded in the audit trail with the job's
    /// version before and after, whatever its outcome (a refused one under
    /// the `id` its body named, if any).
    pub async fn serve(
        &self,
        caller: &Caller,
        verb: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Reply, ApiError> {
        let result = self.serve_recorded(caller, verb, body, now).await;
        let label = verb.parse::<Verb>().map_or("unknown", Verb::as_str);
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.code.as_str(),
        };
        self.metrics
            .api_requests
            .with_label_values(&[label, outcome])
            .inc();
        if let Err(error) = &result {
            if error.code == chime_common::ErrorCode::Internal {
                tracing::error!(verb, via = caller.via, error = %error, "API request failed");
            }
        }
        result
    }

    async fn serve_recorded(
        &self,
        caller: &Caller,
        verb: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Reply, ApiError> {
        let mutating = verb
            .parse::<Verb>()
            .is_ok_and(|v| v.access() != Access::Read);
        let (target, before, detail, result) =
            match ApiRequest::parse(verb, body, &self.config, now) {
                Ok(request) => {
                    let Some(target) = request.target() else {
                        return self.execute(request, now).await;
                    };
                    let detail = request.audit_detail();
                    let before = self.version_of(&target).await;
                    (target, before, detail, self.execute(request, now).await)
                }
                // A refused change is recorded too, under the id it named, if any.
                Err(e) if mutating => {
                    let named = serde_json::from_slice::<Value>(body)
                        .ok()
                        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
                        .unwrap_or_default();
                    let before = self.version_of(&named).await;
                    (named, before, None, Err(e))
                }
                Err(e) => return Err(e),
            };
        let after = self.version_of(&target).await;
        let (outcome, message) = match (&result, detail) {
            (Ok(_), detail) => ("ok", detail),
            (Err(e), None) => (e.code.as_str(), Some(e.message.clone())),
            (Err(e), Some(detail)) => (e.code.as_str(), Some(format!("{}; {detail}", e.message))),
        };
        let record = AuditRecord {
            actor: &caller.name,
            via: caller.via,
            verb,
            target: &target,
            before_version: before,
            after_version: after,
            outcome,
            message: message.as_deref(),
        };
        record_audit(&self.store, &self.metrics, &record, now).await;
        result
    }

    /// The stored version of job `id`, if it exists and can be read.
    async fn version_of(&self, id: &str) -> Option<i64> {
        self.store
            .get_job(id)
            .await
            .ok()
            .flatten()
            .map(|j| j.version)
    }

    /// Answers one request without recording it: what [`Api::serve`] does
    /// underneath, for the fuzz targets and the tests of single verbs.
    pub async fn handle(
        &self,
        verb: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Reply, ApiError> {
        let request = ApiRequest::parse(verb, body, &self.config, now)?;
        self.execute(request, now).await
    }

    async fn execute(&self, request: ApiRequest, now: DateTime<Utc>) -> Result<Reply, ApiError> {
        match request {
            ApiRequest::PutJob(spec, expected) => self.put_job(&spec, expected, now).await,
            ApiRequest::GetJob(id) => {
                let job = self
                    .store
                    .get_job(&id)
                    .await?
                    .ok_or_else(|| not_found(&id))?;
                let mut job = [job];
                self.store.mark_last_success(&mut job).await?;
                let [job] = job;
                Ok(Reply::job(job))
            }
            ApiRequest::ListJobs(filter) => {
                let mut page = self.store.list_jobs(&filter).await?;
                self.store.mark_last_success(&mut page.items).await?;
                Ok(Reply::Jobs(ListJobsReply {
                    jobs: page.items,
                    next: page.next,
                }))
            }
            ApiRequest::DeleteJob(id) => self.delete_job(&id, now).await,
            ApiRequest::SetPaused(PauseTarget::One(id), pause) => {
                let job = self
                    .store
                    .set_paused(&id, pause, now)
                    .await?
                    .ok_or_else(|| not_found(&id))?;
                Ok(Reply::job(job))
            }
            ApiRequest::SetPaused(PauseTarget::Many(selection), pause) => {
                let jobs = self.store.set_paused_many(&selection, pause, now).await?;
                Ok(Reply::JobsChanged(JobsReply { jobs }))
            }
            ApiRequest::Trigger(req) => self.trigger(req, now).await,
            ApiRequest::Backfill(req) => self.backfill(&req, now).await,
            ApiRequest::Preview(preview) => self.preview(&preview).await,
            ApiRequest::ListFirings(filter) => {
                let page = self.store.list_firings(&filter).await?;
                Ok(Reply::Firings(ListFiringsReply {
                    firings: page.items,
                    next: page.next,
                }))
            }
            ApiRequest::GetFiring(id) => {
                let firing = self
                    .store
                    .get_firing(&id)
                    .await?
                    .ok_or_else(|| ApiError::not_found(format!("no firing with id {id}")))?;
                Ok(Reply::Firing(Box::new(FiringReply { firing })))
            }
            ApiRequest::CancelFiring(id) => self.cancel_firing(&id, now).await,
            ApiRequest::ListWorkers(req) => {
                let workers = self.workers(req.group.as_deref()).await?;
                Ok(Reply::Workers(ListWorkersReply { workers }))
            }
            ApiRequest::ListAlerts(req) => Ok(Reply::Alerts(ListAlertsReply {
                alerts: self.alerts(&req).await?,
            })),
            ApiRequest::ListAudit(filter) => {
                let page = self.store.list_audit(&filter).await?;
                Ok(Reply::Audit(ListAuditReply {
                    entries: page.items,
                    next: page.next,
                }))
            }
            ApiRequest::PutCalendar(calendar) => Ok(Reply::Calendar(CalendarReply {
                calendar: self.store.put_calendar(&calendar, now).await?,
            })),
            ApiRequest::GetCalendar(id) => Ok(Reply::Calendar(CalendarReply {
                calendar: self
                    .store
                    .get_calendar(&id)
                    .await?
                    .ok_or_else(|| no_calendar(&id))?,
            })),
            ApiRequest::DeleteCalendar(id) => Ok(Reply::Calendar(CalendarReply {
                calendar: self
                    .store
                    .delete_calendar(&id)
                    .await?
                    .ok_or_else(|| no_calendar(&id))?,
            })),
            ApiRequest::ListCalendars => Ok(Reply::Calendars(ListCalendarsReply {
                calendars: self.store.list_calendars().await?,
            })),
            ApiRequest::PutGroup(limits) => Ok(Reply::Group(GroupReply {
                group: self.store.put_group_limits(&limits, now).await?,
            })),
            ApiRequest::GetGroup(name) => Ok(Reply::Group(GroupReply {
                group: self.store.get_group(&name).await?,
            })),
            ApiRequest::ListGroups => Ok(Reply::Groups(ListGroupsReply {
                groups: self.store.list_groups().await?,
            })),
        }
    }

    /// `jobs.put`: a conflict with `if_version` names that field.
    async fn put_job(
        &self,
        spec: &JobSpec,
        expected: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Reply, ApiError> {
        let job =
            self.store
                .put_job_if(spec, expected, now)
                .await
                .map_err(|e| match ApiError::from(e) {
                    e if e.code == ErrorCode::Conflict && expected.is_some() => ApiError {
                        field: Some(IF_VERSION_FIELD.to_string()),
                        ..e
                    },
                    e => e,
                })?;
        self.job_changes.changed(&spec.id);
        let mut warnings = spec.warnings();
        warnings.extend(long_past_warning(&job));
        warnings.extend(self.handler_warning(spec).await);
        Ok(Reply::put(job, warnings))
    }

    /// The put warning for a job whose handler no live worker of its group
    /// offers, by the heartbeats of at most a second ago; none when the
    /// heartbeat bucket cannot be read within [`WARNING_READ`] (the put
    /// itself succeeded, and its reply must not wait on a warning).
    async fn handler_warning(&self, spec: &JobSpec) -> Option<Warning> {
        let workers = tokio::time::timeout(WARNING_READ, self.workers.recent())
            .await
            .ok()?
            .ok()?;
        match Unoffered::judge(&spec.group, &spec.handler, &workers)? {
            Unoffered::NoWorker => Some(Warning::new(
                "group",
                format!(
                    "no worker of group {:?} is alive: the job's firings wait, published, \
                     until one starts (is the group's name right?)",
                    spec.group
                ),
            )),
            unoffered @ Unoffered::NotOffered(_) => Some(Warning::new(
                "handler",
                format!(
                    "{}: a worker of the group fails its firings at start (is the handler's \
                     name right, or do the group's workers need --handlers or --allow-shell?)",
                    unoffered.describe(&spec.group, &spec.handler)
                ),
            )),
        }
    }

    /// A trigger's own payload, checked against the job's handler as a put
    /// checks a job's payload; `not_found` without the job.
    async fn check_trigger_payload(&self, id: &str, payload: &Value) -> Result<(), ApiError> {
        let job = self.store.get_job(id).await?.ok_or_else(|| not_found(id))?;
        chime_common::payloads::check(&job.spec.handler, payload, "payload")
            .map_err(ApiError::from_field_errors)
    }

    /// `jobs.delete`, cancelling what still runs of the job.
    async fn delete_job(&self, id: &str, now: DateTime<Utc>) -> Result<Reply, ApiError> {
        let deleted = self
            .store
            .delete_job(id, now)
            .await?
            .ok_or_else(|| not_found(id))?;
        self.job_changes.changed(id);
        for running in &deleted.cancel {
            self.cancel(&running.worker_id, &running.firing_id, "job deleted")
                .await;
        }
        Ok(Reply::job(deleted.job))
    }

    /// `jobs.trigger`: one run now, in the trace the request carries (its
    /// `traceparent`), else in a trace of its own that begins with the
    /// request. Either way the request's `trigger` span is the parent of
    /// the run's spans, and what the run's firings store.
    async fn trigger(&self, req: TriggerRequest, now: DateTime<Utc>) -> Result<Reply, ApiError> {
        if let Some(payload) = &req.payload {
            self.check_trigger_payload(&req.id, payload).await?;
        }
        let given = given_trace(&req)?;
        let trace = given
            .as_ref()
            .map_or_else(TraceParent::fresh, TraceParent::child);
        let triggered = self
            .store
            .trigger_in_trace(&req.id, req.payload, Some(&trace), now)
            .await;
        let (firing_id, error) = match &triggered {
            Ok(Some(id)) => (Some(id.to_string()), None),
            Ok(None) => (None, Some(not_found(&req.id).message)),
            Err(e) => (None, Some(e.to_string())),
        };
        let attributes = FiringAttributes {
            firing_id,
            job_id: Some(req.id.clone()),
            attempt: Some(1),
            ..FiringAttributes::default()
        };
        let span = (now, Utc::now());
        traces::request("trigger", &trace, given.as_ref(), span, attributes, error);
        let id = triggered?.ok_or_else(|| not_found(&req.id))?;
        self.immediate.wake();
        Ok(Reply::Trigger(TriggerReply {
            firing_id: id.to_string(),
        }))
    }

    /// `jobs.backfill`: the firings staged, published at once; with
    /// `dry_run`, those that would be. Both say how many the job's overlap
    /// policy will skip.
    async fn backfill(&self, req: &BackfillRequest, now: DateTime<Utc>) -> Result<Reply, ApiError> {
        let backfilled = self
            .store
            .backfill_with(
                &req.id,
                req.from,
                req.to,
                req.limit.unwrap_or(BACKFILL_LIMIT_DEFAULT),
                req.dry_run,
                now,
            )
            .await?
            .ok_or_else(|| not_found(&req.id))?;
        if !req.dry_run {
            self.immediate.wake();
        }
        let count = u32::try_from(backfilled.firing_ids.len()).unwrap_or(u32::MAX);
        let spec = &backfilled.spec;
        let (skipped_by_overlap, warnings) =
            match spec.concurrency.backfill_warning(spec.overlap, count) {
                Some((lost, message)) => (lost, vec![Warning::new("overlap", message)]),
                None => (0, Vec::new()),
            };
        Ok(Reply::Backfill(BackfillReply {
            firing_ids: backfilled
                .firing_ids
                .iter()
                .map(ToString::to_string)
                .collect(),
            skipped_by_overlap,
            warnings,
            dry_run: req.dry_run,
        }))
    }

    /// `jobs.preview`: the instants less the excluded calendars' dates.
    async fn preview(&self, preview: &Preview) -> Result<Reply, ApiError> {
        let calendars = self.store.calendars(&preview.exclude).await?;
        if let Some((i, id)) = preview
            .exclude
            .iter()
            .enumerate()
            .find(|(_, id)| !calendars.iter().any(|c| &c.id == *id))
        {
            return Err(ApiError::invalid(
                format!("exclude[{i}]"),
                format!("no calendar {id:?}"),
            ));
        }
        Ok(Reply::Preview(preview.reply(&calendars)))
    }

    /// `firings.cancel`, telling the worker that runs it.
    async fn cancel_firing(&self, id: &FiringId, now: DateTime<Utc>) -> Result<Reply, ApiError> {
        let outcome = self
            .store
            .cancel_firing(id, now)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no firing with id {id}")))?;
        if let Some(running) = &outcome.running {
            self.cancel(
                &running.worker_id,
                &running.firing_id,
                CANCELLED_BY_OPERATOR,
            )
            .await;
        }
        Ok(Reply::Firing(Box::new(FiringReply {
            firing: outcome.firing,
        })))
    }

    /// The newest alerts matching `req`, newest first, read backwards from
    /// the end of the alert stream: at most `max_alert_scan` messages are
    /// read, so a rare kind older than that is not found.
    pub async fn alerts(&self, req: &ListAlertsRequest) -> Result<Vec<Alert>, ApiError> {
        let unavailable = |e: &dyn std::fmt::Display| {
            ApiError::unavailable(format!("cannot read the alert stream: {e}"))
        };
        let limit = req.limit.unwrap_or(chime_common::api::DEFAULT_PAGE) as usize;
        let mut stream = self
            .jetstream
            .get_stream(self.subjects.alerts_stream())
            .await
            .map_err(|e| unavailable(&e))?;
        let state = stream
            .info()
            .await
            .map_err(|e| unavailable(&e))?
            .state
            .clone();
        let oldest = state.first_sequence.max(
            state
                .last_sequence
                .saturating_sub(u64::from(self.config.max_alert_scan))
                + 1,
        );
        let mut alerts = Vec::new();
        let mut seq = state.last_sequence;
        while seq >= oldest && seq > 0 && alerts.len() < limit {
            // A sequence removed by the stream's limits is skipped.
            if let Ok(message) = stream.get_raw_message(seq).await {
                if let Ok(alert) = serde_json::from_slice::<Alert>(&message.payload) {
                    let wanted = req.kind.is_none_or(|k| k == alert.kind)
                        && req.job_id.as_ref().is_none_or(|j| *j == alert.job_id);
                    if wanted {
                        alerts.push(alert);
                    }
                }
            }
            seq -= 1;
        }
        Ok(alerts)
    }

    /// Live workers from the heartbeat bucket, optionally of one group.
    pub async fn workers(&self, group: Option<&str>) -> Result<Vec<WorkerInfo>, ApiError> {
        let mut workers =
            self.workers.live().await.map_err(|e| {
                ApiError::unavailable(format!("cannot read the worker registry: {e}"))
            })?;
        workers.retain(|info| group.is_none_or(|g| g == info.group));
        workers.sort_by(|a, b| b.started_at.cmp(&a.started_at).then(a.id.cmp(&b.id)));
        Ok(workers)
    }

    /// Asks a worker to cancel a running firing.
    pub async fn cancel(&self, worker_id: &str, firing_id: &chime_common::FiringId, reason: &str) {
        let request = CancelRequest {
            firing_id: firing_id.clone(),
            reason: reason.to_string(),
        };
        if let Ok(body) = serde_json::to_vec(&request) {
            if let Err(e) = self
                .nats
                .publish(self.subjects.cancel(worker_id), body.into())
                .await
            {
                tracing::warn!(worker_id, %firing_id, error = %e, "cannot send cancel request");
            }
        }
    }

    /// Joins the replicas' queue group for API requests.
    ///
    /// Separate from [`Api::run`] so a replica is subscribed (and has
    /// flushed the subscription to the server) before it reports ready: a
    /// request sent right after start-up must find a responder.
    pub async fn subscribe(&self) -> Result<async_nats::Subscriber, async_nats::SubscribeError> {
        self.nats
            .queue_subscribe(self.subjects.api_wildcard(), "chime-api".to_string())
            .await
    }

    /// Serves the requests of `requests` (from [`Api::subscribe`]) until `shutdown`.
    pub async fn run(self, mut requests: async_nats::Subscriber, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        loop {
            let message = tokio::select! {
                m = requests.next() => match m { Some(m) => m, None => break },
                _ = shutdown.cancelled() => break,
            };
            let Some(reply) = message.reply.clone() else {
                continue;
            };
            if !self.replies.accepts(ReplyKind::Api, &reply) {
                continue;
            }
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let api = self.clone();
            let verb = self
                .subjects
                .api_verb(message.subject.as_str())
                .unwrap_or("")
                .to_string();
            tokio::spawn(async move {
                let caller = Caller::nats_inbox(&reply);
                let read_only = api
                    .config
                    .read_only_users
                    .iter()
                    .any(|user| caller.name.strip_prefix("nats:") == Some(user.as_str()));
                let result = api
                    .serve(&caller, &verb, &message.payload, Utc::now())
                    .await;
                let body = match result {
                    Ok(reply) if read_only => serde_json::to_vec(&reply.redacted()),
                    Ok(reply) => serde_json::to_vec(&reply),
                    Err(error) => serde_json::to_vec(&ErrorReply { error }),
                };
                if let Ok(body) = body {
                    api.replies.send(ReplyKind::Api, reply, body.into()).await;
                }
                drop(permit);
            });
        }
    }
}

/// Records an audit entry. The change it records is made: losing its
/// audit line must not undo or fail it, but it must be seen (counted in
/// `chime_store_errors_total{op="audit"}` and logged).
pub async fn record_audit(
    store: &Store,
    metrics: &Metrics,
    record: &AuditRecord<'_>,
    now: DateTime<Utc>,
) {
    if let Err(e) = store.record_audit(record, now).await {
        metrics.store_errors.with_label_values(&["audit"]).inc();
        tracing::error!(
            verb = record.verb,
            target = record.target,
            error = %e,
            "cannot record an audit entry"
        );
    }
}

/// The put warning for a one-shot whose time was already further in the
/// past than its `misfire_threshold`: stored completed, it never fires.
fn long_past_warning(job: &chime_common::Job) -> Option<Warning> {
    let chime_common::schedule::ScheduleSpec::At { at } = job.spec.schedule else {
        return None;
    };
    (job.state == chime_common::JobState::Completed).then(|| {
        Warning::new(
            "schedule.at",
            format!(
                "{} was more than misfire_threshold ({}) ago: the job is stored completed \
                 and does not fire (jobs.trigger runs it now)",
                at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                chime_common::duration::format_duration(job.spec.misfire_threshold)
            ),
        )
    })
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("no job with id {id:?}"))
}

fn no_calendar(id: &str) -> ApiError {
    ApiError::not_found(format!("no calendar with id {id:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nats_caller_is_named_by_the_user_its_inbox_names() {
        assert_eq!(
            Caller::nats_inbox("_INBOX.chime-admin.Nf3k2.7").name,
            "nats:chime-admin"
        );
        assert_eq!(Caller::nats_inbox("_INBOX.Nf3k2.7").name, "nats");
        assert_eq!(Caller::nats_inbox("_INBOX.x").name, "nats");
    }

    #[test]
    fn request_errors_name_the_field() {
        let e = parse_request::<IdRequest>(br#"{"id": "a", "colour": 1}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("colour"));
        let e = parse_request::<IdRequest>(br#"{}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("id"));
        let e = parse_request::<ListJobsRequest>(br#"{"limit": "ten"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("limit"));
        let e = parse_request::<IdRequest>(b"{not json").unwrap_err();
        assert_eq!(e.code, chime_common::ErrorCode::InvalidArgument);
        assert!(parse_request::<ListJobsRequest>(b"").is_ok());
    }

    fn refused(verb: &str, body: &str) -> ApiError {
        match ApiRequest::parse(verb, body.as_bytes(), &ApiConfig::default(), Utc::now()) {
            Err(e) => e,
            Ok(accepted) => panic!("{verb} {body}: accepted as {accepted:?}"),
        }
    }

    #[test]
    fn operations_requests_are_checked_naming_the_field() {
        let e = refused("jobs.list", r#"{"selector": "team=data,,x"}"#);
        assert_eq!(e.field.as_deref(), Some("selector"));
        assert_eq!(
            refused("jobs.list", r#"{"selector": ""}"#).field.as_deref(),
            Some("selector")
        );
        let e = refused(
            "jobs.put",
            r#"{"id": "a", "schedule": {"every": "1m"}, "handler": "h", "if_version": -1}"#,
        );
        assert_eq!(e.field.as_deref(), Some("if_version"));
        let e = refused(
            "jobs.put",
            r#"{"id": "a", "handler": "h", "if_version": "x"}"#,
        );
        let fields: Vec<&str> = e.details.iter().map(|d| d.field.as_str()).collect();
        assert!(
            fields.contains(&"schedule") && fields.contains(&"if_version"),
            "{fields:?}"
        );
        for bad in [
            r#"{"id": "nope"}"#,
            r#"{"id": "a b@1#1"}"#,
            r#"{"id": 5}"#,
            r#"{}"#,
        ] {
            assert_eq!(
                refused("firings.cancel", bad).field.as_deref(),
                Some("id"),
                "{bad}"
            );
        }
        let ok = ApiRequest::parse(
            "firings.cancel",
            br#"{"id": "nightly@1700000000000#2"}"#,
            &ApiConfig::default(),
            Utc::now(),
        );
        assert!(
            matches!(ok, Ok(ApiRequest::CancelFiring(ref id)) if id.attempt == 2),
            "{ok:?}"
        );
    }

    #[test]
    fn pause_and_backfill_requests_are_checked_naming_the_field() {
        for (verb, body, field) in [
            ("jobs.pause", r#"{}"#, "id"),
            ("jobs.pause", r#"{"id": "a", "group": "g"}"#, "id"),
            ("jobs.pause", r#"{"id": "a b"}"#, "id"),
            (
                "jobs.pause",
                r#"{"group": "g", "selector": "a=,="}"#,
                "selector",
            ),
            ("jobs.pause", r#"{"id": "a", "until": "soon"}"#, "until"),
            (
                "jobs.resume",
                r#"{"id": "a", "until": "2099-01-01T00:00:00Z"}"#,
                "until",
            ),
            ("jobs.resume", r#"{"selector": "x", "colour": 1}"#, "colour"),
            (
                "jobs.backfill",
                r#"{"id": "a", "from": "2020-01-01T00:00:00Z"}"#,
                "to",
            ),
            (
                "jobs.backfill",
                r#"{"id": "a", "from": 5, "to": "2020-01-01T00:00:00Z"}"#,
                "from",
            ),
            (
                "jobs.backfill",
                r#"{"id": "a", "from": "2020-01-01T00:00:00Z", "to": "2020-01-02T00:00:00Z", "limit": -1}"#,
                "limit",
            ),
        ] {
            assert_eq!(
                refused(verb, body).field.as_deref(),
                Some(field),
                "{verb} {body}"
            );
        }
        let many = ApiRequest::parse(
            "jobs.pause",
            br#"{"group": "g", "selector": "team=data", "until": "2099-01-01T00:00:00Z"}"#,
            &ApiConfig::default(),
            Utc::now(),
        );
        assert!(
            matches!(
                many,
                Ok(ApiRequest::SetPaused(
                    PauseTarget::Many(JobSelection {
                        group: Some(_),
                        selector: Some(_)
                    }),
                    Pause::Until(Some(_))
                ))
            ),
            "{many:?}"
        );
    }
}
