//! The request/reply API's wire contract (CONTRACT.md, docs/API.md): its
//! verbs, the request and reply of each, and the page rules of the lists.
//!
//! The scheduler's API service, the typed [`Client`](crate::client::Client)
//! and `chimectl` all speak through these types, so a verb's name or a
//! reply's shape is written once.

pub use crate::calendars::{CalendarReply, ListCalendarsReply};
use crate::concurrency::Group;
use crate::duration::{rfc3339_ms, rfc3339_ms_opt};
use crate::error::ApiError;
use crate::firing::{Firing, FiringState};
use crate::job::{Job, JobState};
use crate::protocol::{Alert, AlertKind, WorkerInfo};
use crate::schedule::DstMark;
use crate::warning::Warning;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::str::FromStr;

/// A verb of the API: the last part of its subject, `chime.api.v1.<verb>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    JobsPut,
    JobsGet,
    JobsList,
    JobsDelete,
    JobsPause,
    JobsResume,
    JobsTrigger,
    JobsBackfill,
    JobsPreview,
    FiringsList,
    /// One firing, its whole output and error included.
    FiringsGet,
    FiringsCancel,
    WorkersList,
    CalendarsPut,
    CalendarsGet,
    CalendarsDelete,
    CalendarsList,
    GroupsPut,
    GroupsGet,
    GroupsList,
    /// Recent alerts from the alert stream (extension).
    AlertsList,
    /// The audit trail of mutating requests (extension).
    AuditList,
}

/// What a verb does, which decides the role a caller needs over HTTP
/// (CONTRACT.md v1.1: `viewer` reads, `operator` also pauses, resumes,
/// triggers, cancels and backfills, `admin` also puts and deletes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// Reads only.
    Read,
    /// Drives existing jobs and firings.
    Operate,
    /// Creates, changes and deletes definitions.
    Administer,
}

impl Verb {
    /// Every verb, in the contract's order.
    pub const ALL: [Verb; 22] = [
        Verb::JobsPut,
        Verb::JobsGet,
        Verb::JobsList,
        Verb::JobsDelete,
        Verb::JobsPause,
        Verb::JobsResume,
        Verb::JobsTrigger,
        Verb::JobsBackfill,
        Verb::JobsPreview,
        Verb::FiringsList,
        Verb::FiringsGet,
        Verb::FiringsCancel,
        Verb::WorkersList,
        Verb::AlertsList,
        Verb::AuditList,
        Verb::CalendarsPut,
        Verb::CalendarsGet,
        Verb::CalendarsDelete,
        Verb::CalendarsList,
        Verb::GroupsPut,
        Verb::GroupsGet,
        Verb::GroupsList,
    ];

    /// What calling this verb does.
    pub fn access(self) -> Access {
        match self {
            Verb::JobsGet
            | Verb::JobsList
            | Verb::JobsPreview
            | Verb::FiringsList
            | Verb::FiringsGet
            | Verb::WorkersList
            | Verb::AlertsList
            | Verb::AuditList
            | Verb::CalendarsGet
            | Verb::CalendarsList
            | Verb::GroupsGet
            | Verb::GroupsList => Access::Read,
            Verb::JobsPause
            | Verb::JobsResume
            | Verb::JobsTrigger
            | Verb::JobsBackfill
            | Verb::FiringsCancel => Access::Operate,
            Verb::JobsPut
            | Verb::JobsDelete
            | Verb::CalendarsPut
            | Verb::CalendarsDelete
            | Verb::GroupsPut => Access::Administer,
        }
    }

    /// What calling this verb with `body` does. A trigger that replaces the
    /// job's payload decides what runs (a shell job's command, an http
    /// job's URL and headers), which is the administrator's right, not the
    /// operator's.
    pub fn access_with(self, body: &[u8]) -> Access {
        if self == Verb::JobsTrigger && replaces_payload(body) {
            return Access::Administer;
        }
        self.access()
    }

    /// The wire name, also the `verb` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::JobsPut => "jobs.put",
            Verb::JobsGet => "jobs.get",
            Verb::JobsList => "jobs.list",
            Verb::JobsDelete => "jobs.delete",
            Verb::JobsPause => "jobs.pause",
            Verb::JobsResume => "jobs.resume",
            Verb::JobsTrigger => "jobs.trigger",
            Verb::JobsBackfill => "jobs.backfill",
            Verb::JobsPreview => "jobs.preview",
            Verb::FiringsList => "firings.list",
            Verb::FiringsGet => "firings.get",
            Verb::FiringsCancel => "firings.cancel",
            Verb::WorkersList => "workers.list",
            Verb::AlertsList => "alerts.list",
            Verb::AuditList => "audit.list",
            Verb::CalendarsPut => "calendars.put",
            Verb::CalendarsGet => "calendars.get",
            Verb::CalendarsDelete => "calendars.delete",
            Verb::CalendarsList => "calendars.list",
            Verb::GroupsPut => "groups.put",
            Verb::GroupsGet => "groups.get",
            Verb::GroupsList => "groups.list",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Verb {
    type Err = ApiError;

    /// An unknown verb is `not_found`, with the verbs there are, as the API replies.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Verb::ALL
            .into_iter()
            .find(|verb| verb.as_str() == s)
            .ok_or_else(|| {
                let verbs: Vec<&str> = Verb::ALL.iter().map(|v| v.as_str()).collect();
                ApiError::not_found(format!("no API verb {s:?}; verbs are {}", verbs.join(", ")))
            })
    }
}

/// Page size of a list request that names none.
pub const DEFAULT_PAGE: u32 = 100;
/// Largest page size of a list request.
pub const MAX_PAGE: u32 = 1000;

/// The page size a list request asks for: the default when absent; a size
/// outside 1 to [`MAX_PAGE`] is refused, naming `limit`.
pub fn requested_page(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        n => Err(ApiError::invalid(
            "limit",
            format!("must be from 1 to {MAX_PAGE}, found {n}"),
        )),
    }
}

/// The page size a store read uses: 0 means the default, and it never
/// reads more than [`MAX_PAGE`] rows even for a caller that skipped
/// [`requested_page`].
pub fn page_limit(limit: u32) -> u32 {
    match limit {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

/// `{"job": Job, "warnings"?}`: the reply of put, get, delete, pause and
/// resume; only a put has warnings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobReply {
    pub job: Job,
    /// What the put spec likely does not mean though it is valid (a
    /// handler no live worker of the group offers, numbered days of the
    /// week in a 6-field cron expression); written only when there are some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// `{"id"}`: the request of get, delete, pause, resume.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdRequest {
    pub id: String,
}

/// `jobs.pause` / `jobs.resume` request: `{"id"}` for one job, or
/// `{"group"?, "selector"?}` for every job they choose; a pause may end by
/// itself at `until`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A label selector (`crate::labels`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Pause only: the jobs resume by themselves at this instant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub until: Option<DateTime<Utc>>,
}

/// The reply of a pause or resume of many jobs: each job afterwards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsReply {
    pub jobs: Vec<Job>,
}

/// `jobs.list` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListJobsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    /// A label selector (`crate::labels`): only the jobs it matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// A request's `selector`, parsed; refused naming `field`.
pub fn requested_selector(
    text: Option<&str>,
    field: &str,
) -> Result<Option<crate::labels::Selector>, ApiError> {
    text.map(|t| {
        t.parse()
            .map_err(|e| ApiError::invalid(field, format!("is not a label selector: {e}")))
    })
    .transpose()
}

/// `jobs.list` reply. `next` is `null` on the last page (the server has
/// always written it), absent is read the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListJobsReply {
    pub jobs: Vec<Job>,
    #[serde(default)]
    pub next: Option<String>,
}

/// `jobs.trigger` request.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    pub id: String,
    /// Replaces the job's payload for this run only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// W3C `traceparent`: the run's firings (every attempt and shard) keep
    /// its trace id instead of starting a trace of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Whether a `jobs.trigger` body carries a payload of its own (a body
/// that is not JSON is refused later, by the verb).
fn replaces_payload(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("payload").map(|p| !p.is_null()))
        .unwrap_or(false)
}

/// `jobs.trigger` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TriggerReply {
    pub firing_id: String,
}

/// `jobs.backfill` request: one firing per schedule instant in
/// `[from, to)`, the earliest `limit` of them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    pub id: String,
    #[serde(with = "rfc3339_ms")]
    pub from: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub to: DateTime<Utc>,
    /// Default [`BACKFILL_LIMIT_DEFAULT`], at most [`BACKFILL_LIMIT_MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Stage nothing: reply with the firings a backfill would stage, and
    /// its warnings, so they can be read before anything runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// Instants one backfill stages when the request names no `limit`.
pub const BACKFILL_LIMIT_DEFAULT: u32 = 1_000;
/// The largest `limit` a backfill accepts: one transaction's worth of rows.
pub const BACKFILL_LIMIT_MAX: u32 = 10_000;

/// `jobs.backfill` reply: the firings staged (or, for a dry run, that
/// would be), oldest instant first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackfillReply {
    pub firing_ids: Vec<String>,
    /// How many of them the job's `overlap` policy will skip (`forbid`,
    /// `queue` past its `queue_limit`) or cancel (`replace`) because the
    /// others run at the same time: at most this many, since a firing that
    /// finishes before the next starts frees its slot. Written only when
    /// not zero, with a warning that says why.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_by_overlap: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// A dry run: nothing was staged. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `jobs.preview` request. `dst`, `jitter` and `exclude` are the job fields
/// of the same names, checked as `jobs.put` checks them; `id` is needed for
/// `H` and `jitter`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreviewRequest {
    pub schedule: Value,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub from: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Value>,
}

/// `jobs.preview` reply: RFC 3339 instants and, parallel to them, what
/// happened to each (`null`: nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreviewReply {
    pub times: Vec<String>,
    /// Absent from servers before v1.1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Option<PreviewMark>>,
    /// What the schedule likely does not mean (numbered days of the week
    /// in a 6-field cron expression); written only when there are some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// Why a previewed instant is not simply its local time, once, fired.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreviewMark {
    /// Moved out of a spring-forward gap, or one of two firings of a
    /// repeated local time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstMark>,
    /// The calendar whose date excludes it: the instant is recorded
    /// `skipped`, not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
}

impl PreviewMark {
    /// The mark of an instant, `None` when there is nothing to say.
    pub fn of(dst: Option<DstMark>, excluded: Option<String>) -> Option<PreviewMark> {
        (dst.is_some() || excluded.is_some()).then_some(PreviewMark { dst, excluded })
    }

    /// A few words for a terminal: `shifted`, `repeated`, `excluded by ID`.
    pub fn describe(&self) -> String {
        let mut words: Vec<String> = self.dst.iter().map(|m| m.as_str().to_string()).collect();
        if let Some(id) = &self.excluded {
            words.push(format!("excluded by {id}"));
        }
        words.join(", ")
    }
}

/// `firings.list` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFiringsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<FiringState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// `firings.list` reply; `next` as in [`ListJobsReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListFiringsReply {
    pub firings: Vec<Firing>,
    #[serde(default)]
    pub next: Option<String>,
}

/// `firings.get` reply, and `firings.cancel`'s: the firing afterwards
/// (`cancelled`, or `executing` until its worker reports the cancel).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FiringReply {
    pub firing: Firing,
}
/// `calendars.list` request: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCalendarsRequest {}

/// `workers.list` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWorkersRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// `workers.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListWorkersReply {
    pub workers: Vec<WorkerInfo>,
}

/// `alerts.list` request: the newest alerts first, optionally of one kind or job.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAlertsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<AlertKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `alerts.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListAlertsReply {
    pub alerts: Vec<Alert>,
}

/// `audit.list` request: the newest entries first, optionally of one job.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAuditRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// One mutating request as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Time-ordered id, also the page cursor.
    pub id: String,
    #[serde(with = "rfc3339_ms")]
    pub at: DateTime<Utc>,
    /// Who: the HTTP user, `anonymous` with `--http-open`, or `nats` for a
    /// request over NATS (whose account NATS itself checked).
    pub actor: String,
    /// `http` or `nats`.
    pub via: String,
    pub verb: String,
    /// The job or firing the request named.
    pub target: String,
    /// The job's version before and after (absent where there was no job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_version: Option<i64>,
    /// `ok` or the error code.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `audit.list` reply; `next` as in [`ListJobsReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListAuditReply {
    pub entries: Vec<AuditEntry>,
    #[serde(default)]
    pub next: Option<String>,
}

/// `groups.get` request: the group's name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupRequest {
    pub name: String,
}

/// `groups.list` request: no fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListGroupsRequest {}

/// `groups.put` and `groups.get` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupReply {
    pub group: Group,
}

/// `groups.list` reply: every group with a limit, a job, or firings
/// running or held, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListGroupsReply {
    pub groups: Vec<Group>,
}

/// A successful reply of any verb, as the server sends it: each variant
/// writes exactly its verb's reply object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// Boxed: a job is far larger than the other replies.
    Job(Box<JobReply>),
    Jobs(ListJobsReply),
    /// A pause or resume of many jobs.
    JobsChanged(JobsReply),
    Trigger(TriggerReply),
    Backfill(BackfillReply),
    Preview(PreviewReply),
    Firings(ListFiringsReply),
    Firing(Box<FiringReply>),
    Workers(ListWorkersReply),
    Alerts(ListAlertsReply),
    Audit(ListAuditReply),
    Calendar(CalendarReply),
    Calendars(ListCalendarsReply),
    Group(GroupReply),
    Groups(ListGroupsReply),
}

impl Reply {
    /// `{"job": job}`.
    pub fn job(job: Job) -> Reply {
        Reply::put(job, Vec::new())
    }

    /// `{"job": job, "warnings"?}`: a put's reply.
    pub fn put(job: Job, warnings: Vec<Warning>) -> Reply {
        Reply::Job(Box::new(JobReply { job, warnings }))
    }

    /// The reply as a read-only caller sees it: each job's payload (an
    /// http job's headers, a shell job's environment: where credentials
    /// live) replaced by `{"redacted": "sha256:<hex>"}`, its digest, so a
    /// change still shows without its content.
    pub fn redacted(mut self) -> Reply {
        let jobs: Vec<&mut Job> = match &mut self {
            Reply::Job(reply) => vec![&mut reply.job],
            Reply::Jobs(reply) => reply.jobs.iter_mut().collect(),
            Reply::JobsChanged(reply) => reply.jobs.iter_mut().collect(),
            _ => Vec::new(),
        };
        for job in jobs {
            job.spec.payload = redacted_payload(&job.spec.payload);
        }
        self
    }
}

/// What a read-only caller sees of a payload.
pub fn redacted_payload(payload: &Value) -> Value {
    let bytes = serde_json::to_vec(payload).unwrap_or_default();
    serde_json::json!({
        "redacted": format!("sha256:{}", crate::protocol::payload_sha256(&bytes))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn verbs_read_back_from_their_names() {
        for verb in Verb::ALL {
            assert_eq!(verb.as_str().parse::<Verb>().ok(), Some(verb));
            assert_eq!(verb.to_string(), verb.as_str());
        }
        let unknown = "jobs.frobnicate".parse::<Verb>().unwrap_err();
        assert_eq!(unknown.code, ErrorCode::NotFound);
        assert_eq!(
            unknown.message,
            "no API verb \"jobs.frobnicate\"; verbs are jobs.put, jobs.get, jobs.list, \
             jobs.delete, jobs.pause, jobs.resume, jobs.trigger, jobs.backfill, jobs.preview, \
             firings.list, firings.get, firings.cancel, workers.list, alerts.list, audit.list, \
             calendars.put, calendars.get, calendars.delete, calendars.list, groups.put, \
             groups.get, groups.list"
        );
    }

    #[test]
    fn requested_pages_follow_the_contract() {
        assert_eq!(requested_page(None).ok(), Some(DEFAULT_PAGE));
        assert_eq!(requested_page(Some(1)).ok(), Some(1));
        assert_eq!(requested_page(Some(MAX_PAGE)).ok(), Some(MAX_PAGE));
        for refused in [0, MAX_PAGE + 1] {
            let e = requested_page(Some(refused)).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("limit"));
            assert_eq!(
                e.message,
                format!("limit: must be from 1 to 1000, found {refused}")
            );
        }
    }

    #[test]
    fn store_pages_are_bounded() {
        assert_eq!(page_limit(0), DEFAULT_PAGE);
        assert_eq!(page_limit(7), 7);
        assert_eq!(page_limit(5000), MAX_PAGE);
    }

    #[test]
    fn last_pages_write_next_as_null() {
        let reply = Reply::Firings(ListFiringsReply {
            firings: Vec::new(),
            next: None,
        });
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            r#"{"firings":[],"next":null}"#
        );
        let read: ListJobsReply = serde_json::from_str(r#"{"jobs":[]}"#).unwrap();
        assert_eq!(read.next, None);
    }
}
