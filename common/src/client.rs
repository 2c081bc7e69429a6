//! A typed client for the request/reply API (`chime.api.v1.<verb>`).
//!
//! Requests and replies are the JSON of CONTRACT.md; a failure reply becomes
//! an [`ApiError`] with the server's code, message and field.

use crate::duration::rfc3339_ms_opt;
use crate::error::{ApiError, ErrorReply};
use crate::firing::{Firing, FiringState};
use crate::job::{Job, JobState};
use crate::protocol::WorkerInfo;
use crate::schedule::ScheduleSpec;
use crate::subjects::Subjects;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// `{"job": Job}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobReply {
    pub job: Job,
}

/// `{"id"}`: the request of get, delete, pause, resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdRequest {
    pub id: String,
}

/// `jobs.list` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListJobsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// `jobs.list` reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListJobsReply {
    pub jobs: Vec<Job>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `jobs.trigger` request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    pub id: String,
    /// Replaces the job's payload for this run only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// `jobs.trigger` reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerReply {
    pub firing_id: String,
}

/// `jobs.preview` request.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

/// `jobs.preview` reply: RFC 3339 instants.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreviewReply {
    pub times: Vec<String>,
}

/// `firings.list` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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

/// `firings.list` reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListFiringsReply {
    pub firings: Vec<Firing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `workers.list` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListWorkersRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// `workers.list` reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListWorkersReply {
    pub workers: Vec<WorkerInfo>,
}

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

    /// Sends raw JSON to `verb` and returns the raw reply, errors decoded.
    pub async fn call_json(&self, verb: &str, body: &Value) -> Result<Value, ApiError> {
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
        verb: &str,
        body: &impl Serialize,
    ) -> Result<R, ApiError> {
        let body = serde_json::to_value(body).map_err(|e| ApiError::internal(e.to_string()))?;
        let value = self.call_json(verb, &body).await?;
        serde_json::from_value(value)
            .map_err(|e| ApiError::internal(format!("{verb}: unexpected reply: {e}")))
    }

    /// `jobs.put`: create or replace a job from its JSON spec.
    pub async fn put_job(&self, spec: &Value) -> Result<Job, ApiError> {
        Ok(self.call::<JobReply>("jobs.put", spec).await?.job)
    }

    /// `jobs.get`.
    pub async fn get_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>("jobs.get", &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.list`.
    pub async fn list_jobs(&self, request: &ListJobsRequest) -> Result<ListJobsReply, ApiError> {
        self.call("jobs.list", request).await
    }

    /// `jobs.delete`: returns the job's last state.
    pub async fn delete_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>("jobs.delete", &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.pause`.
    pub async fn pause_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>("jobs.pause", &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.resume`.
    pub async fn resume_job(&self, id: &str) -> Result<Job, ApiError> {
        Ok(self
            .call::<JobReply>("jobs.resume", &IdRequest { id: id.into() })
            .await?
            .job)
    }

    /// `jobs.trigger`: run now, once; returns the firing id.
    pub async fn trigger_job(&self, id: &str, payload: Option<Value>) -> Result<String, ApiError> {
        let request = TriggerRequest {
            id: id.into(),
            payload,
        };
        Ok(self
            .call::<TriggerReply>("jobs.trigger", &request)
            .await?
            .firing_id)
    }

    /// `jobs.preview`.
    pub async fn preview(
        &self,
        schedule: &ScheduleSpec,
        from: Option<DateTime<Utc>>,
        count: Option<u32>,
    ) -> Result<Vec<String>, ApiError> {
        let schedule =
            serde_json::to_value(schedule).map_err(|e| ApiError::internal(e.to_string()))?;
        let request = PreviewRequest {
            schedule,
            from,
            count,
        };
        Ok(self
            .call::<PreviewReply>("jobs.preview", &request)
            .await?
            .times)
    }

    /// `firings.list`.
    pub async fn list_firings(
        &self,
        request: &ListFiringsRequest,
    ) -> Result<ListFiringsReply, ApiError> {
        self.call("firings.list", request).await
    }

    /// `workers.list`.
    pub async fn list_workers(&self, group: Option<String>) -> Result<Vec<WorkerInfo>, ApiError> {
        Ok(self
            .call::<ListWorkersReply>("workers.list", &ListWorkersRequest { group })
            .await?
            .workers)
    }
}
