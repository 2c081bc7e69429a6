//! A typed client for the request/reply API (`chime.api.v1.<verb>`).
//!
//! Requests and replies are the types of [`crate::api`], the JSON of
//! CONTRACT.md; a failure reply becomes an [`ApiError`] with the server's
//! code, message and field.

use crate::api::{
    BackfillReply, BackfillRequest, FiringReply, GroupReply, GroupRequest, IdRequest, JobReply,
    JobsReply, ListAlertsReply, ListAlertsRequest, ListAuditReply, ListAuditRequest,
    ListCalendarsRequest, ListGroupsReply, ListGroupsRequest, ListWorkersReply, ListWorkersRequest,
    PauseRequest, PreviewReply, PreviewRequest, TriggerReply, TriggerRequest,
};
use crate::calendars::{Calendar, CalendarReply, ListCalendarsReply};
use crate::concurrency::Group;
use crate::error::{ApiError, ErrorReply};
use crate::firing::Firing;
use crate::job::Job;
use crate::protocol::Alert;
use crate::protocol::WorkerInfo;
use crate::subjects::Subjects;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;

/// The types [`Client`]'s methods take and return besides [`Job`], so a
/// caller names them from the client it uses; [`crate::api`] defines them.
pub use crate::api::{ListFiringsReply, ListFiringsRequest, ListJobsReply, ListJobsRequest, Verb};

/// The API client.
#[derive(Clone)]
pub struct Client {
    nats: async_nats::Client,
    subjects: Subjects,
    timeout: Duration,
}

impl Client {
    /// A client on `nats` with the default prefix and a 5 s request timeout.
    pub fn new(nats: async_nats::Client) -> Self {
        Client {
            nats,
            subjects: Subjects::default(),
            timeout: Duration::from_secs(5),
        }
    }

    /// Uses another subject prefix.
    pub fn with_subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// Uses another request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends `body` to `verb` as it is and returns the raw reply, errors
    /// decoded: for a body that is JSON already (a job spec from a file) or
    /// one a typed request cannot express.
    pub async fn call_json(&self, verb: Verb, body: &Value) -> Result<Value, ApiError> {
        let payload = serde_json::to_vec(body).map_err(|e| ApiError::internal(e.to_string()))?;
        let request = self.nats.request(self.subjects.api(verb), payload.into());
        let message = tokio::time::timeout(self.timeout, request)
            .await
            .map_err(|_| {
                ApiError::unavailable(format!("no reply to {verb} within {:?}", self.timeout))
            })?
            .map_err(|e| {
                ApiError::unavailable(format!("{verb}: {e} (is a chime-scheduler running?)"))
            })?;
        let value: Value = serde_json::from_slice(&message.payload)
            .map_err(|e| ApiError::internal(format!("{verb}: reply is not JSON: {e}")))?;
        if value.get("error").is_some() {
            let reply: ErrorReply = serde_json::from_value(value)
                .map_err(|e| ApiError::internal(format!("{verb}: malformed error reply: {e}")))?;
            return Err(reply.error);
        }
        Ok(value)
    }

    async fn call<R: DeserializeOwned>(
        &self,
        verb: Verb,
        body: &impl Serialize,
    ) -> Result<R, ApiError> {
        let body = serde_json::to_value(body).map_err(|e| ApiError::internal(e.to_string()))?;
        let value = self.call_json(verb, &body).await?;
        serde_json::from_value(value)
            .map_err(|e| ApiError::internal(format!("{verb}: unexpected reply: {e}")))
    }

    /// `jobs.put`: create or replace a job from its JSON spec.
    pub async fn put_job(&self, spec: &Value) -> Result<Job, ApiError> {
        Ok(self.put_job_with_warnings(spec).await?.job)
    }

    /// `jobs.put`, keeping the reply's `warnings` beside the job.
    pub async fn put_job_with_warnings(&self, spec: &Value) -> Result<JobReply, ApiError> {
        self.call::<JobReply>(Verb::JobsPut, spec).await
    }

    /// `jobs.get`.
    pub async fn get_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>(Verb::JobsGet, &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.list`.
    pub async fn list_jobs(&self, request: &ListJobsRequest) -> Result<ListJobsReply, ApiError> {
        self.call(Verb::JobsList, request).await
    }

    /// `jobs.delete`: returns the job's last state.
    pub async fn delete_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>(Verb::JobsDelete, &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.pause` of one job, resuming by itself at `until` if given.
    pub async fn pause_job(&self, id: &str, until: Option<DateTime<Utc>>) -> Result<Job, ApiError> {
        let request = PauseRequest {
            id: Some(id.into()),
            until,
            ..PauseRequest::default()
        };
        Ok(self.call::<JobReply>(Verb::JobsPause, &request).await?.job)
    }

    /// `jobs.pause` (`paused`) or `jobs.resume` of every job `request`
    /// chooses by `group` and `selector`: each job afterwards.
    pub async fn set_paused_many(
        &self,
        request: &PauseRequest,
        paused: bool,
    ) -> Result<Vec<Job>, ApiError> {
        let verb = if paused {
            Verb::JobsPause
        } else {
            Verb::JobsResume
        };
        Ok(self.call::<JobsReply>(verb, request).await?.jobs)
    }

    /// `jobs.resume`.
    pub async fn resume_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>(Verb::JobsResume, &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.trigger`: run now, once; returns the firing id.
    pub async fn trigger_job(&self, id: &str, payload: Option<Value>) -> Result<String, ApiError> {
        self.trigger(&TriggerRequest {
            id: id.into(),
            payload,
            traceparent: None,
        })
        .await
    }

    /// `jobs.trigger` with every field (a `traceparent` to keep); returns
    /// the firing id.
    pub async fn trigger(&self, request: &TriggerRequest) -> Result<String, ApiError> {
        Ok(self
            .call::<TriggerReply>(Verb::JobsTrigger, request)
            .await?
            .firing_id)
    }

    /// `jobs.backfill`: the firings staged for the instants in `[from, to)`
    /// (with `dry_run`, those that would be), and how many of them the
    /// job's overlap policy will skip.
    pub async fn backfill_job(&self, request: &BackfillRequest) -> Result<BackfillReply, ApiError> {
        self.call::<BackfillReply>(Verb::JobsBackfill, request)
            .await
    }

    /// `jobs.preview`: the instants and their marks.
    pub async fn preview(&self, request: &PreviewRequest) -> Result<PreviewReply, ApiError> {
        self.call(Verb::JobsPreview, request).await
    }

    /// `firings.list`.
    pub async fn list_firings(
        &self,
        request: &ListFiringsRequest,
    ) -> Result<ListFiringsReply, ApiError> {
        self.call(Verb::FiringsList, request).await
    }

    /// `firings.get`: one firing, its whole output and error included.
    pub async fn get_firing(&self, id: &str) -> Result<Firing, ApiError> {
        Ok(self
            .call::<FiringReply>(Verb::FiringsGet, &IdRequest { id: id.into() })
            .await?
            .firing)
    }

    /// `alerts.list`: the newest alerts first.
    pub async fn list_alerts(&self, request: &ListAlertsRequest) -> Result<Vec<Alert>, ApiError> {
        Ok(self
            .call::<ListAlertsReply>(Verb::AlertsList, request)
            .await?
            .alerts)
    }

    /// `audit.list`: one page of the audit trail, newest first.
    pub async fn list_audit(&self, request: &ListAuditRequest) -> Result<ListAuditReply, ApiError> {
        self.call(Verb::AuditList, request).await
    }

    /// `firings.cancel`: the firing afterwards (`cancelled`, or `executing`
    /// until its worker reports the cancel).
    pub async fn cancel_firing(&self, id: &str) -> Result<Firing, ApiError> {
        Ok(self
            .call::<FiringReply>(Verb::FiringsCancel, &IdRequest { id: id.into() })
            .await?
            .firing)
    }

    /// `calendars.put`: `calendar` as JSON (`id`, `dates`, `weekdays`), so
    /// the server checks it and names the field of any problem.
    pub async fn put_calendar(&self, calendar: &Value) -> Result<Calendar, ApiError> {
        Ok(self
            .call::<CalendarReply>(Verb::CalendarsPut, calendar)
            .await?
            .calendar)
    }

    /// `calendars.get`.
    pub async fn get_calendar(&self, id: &str) -> Result<Calendar, ApiError> {
        Ok(self
            .call::<CalendarReply>(Verb::CalendarsGet, &IdRequest { id: id.into() })
            .await?
            .calendar)
    }

    /// `calendars.list`, by id.
    pub async fn list_calendars(&self) -> Result<Vec<Calendar>, ApiError> {
        Ok(self
            .call::<ListCalendarsReply>(Verb::CalendarsList, &ListCalendarsRequest {})
            .await?
            .calendars)
    }

    /// `calendars.delete`: returns the calendar deleted.
    pub async fn delete_calendar(&self, id: &str) -> Result<Calendar, ApiError> {
        Ok(self
            .call::<CalendarReply>(Verb::CalendarsDelete, &IdRequest { id: id.into() })
            .await?
            .calendar)
    }

    /// `groups.put`: `limits` as JSON (`name`, `max_concurrent`,
    /// `max_per_second`), so the server checks it and names the field of any
    /// problem. A limit left out is removed.
    pub async fn put_group(&self, limits: &Value) -> Result<Group, ApiError> {
        Ok(self
            .call::<GroupReply>(Verb::GroupsPut, limits)
            .await?
            .group)
    }

    /// `groups.get`.
    pub async fn get_group(&self, name: &str) -> Result<Group, ApiError> {
        Ok(self
            .call::<GroupReply>(Verb::GroupsGet, &GroupRequest { name: name.into() })
            .await?
            .group)
    }

    /// `groups.list`, by name.
    pub async fn list_groups(&self) -> Result<Vec<Group>, ApiError> {
        Ok(self
            .call::<ListGroupsReply>(Verb::GroupsList, &ListGroupsRequest {})
            .await?
            .groups)
    }

    /// `workers.list`.
    pub async fn list_workers(&self, group: Option<String>) -> Result<Vec<WorkerInfo>, ApiError> {
        Ok(self
            .call::<ListWorkersReply>(Verb::WorkersList, &ListWorkersRequest { group })
            .await?
            .workers)
    }
}
