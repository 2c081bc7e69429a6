//! Durable submission: JobSpecs published to JetStream `chime.submit`.
//!
//! Applied exactly like `jobs.put`. A message that cannot be applied is
//! republished, body unchanged, to `chime.submit.rejected` with a
//! `Chime-Error` header holding the error JSON, and only then acked: nothing
//! is dropped silently. Only the spec's own faults reject it (not JSON,
//! invalid, a conflict). A store that is down or busy is not the message's
//! fault: it is nak'ed with a delay and retried, without limit. Any other
//! failure (a corrupt row, an unexpected database error) is retried until the
//! message's `max_deliveries`-th delivery, then dead-lettered (`dead_letter.rs`).
//!
//! A submission may carry a W3C `traceparent` header: its `put` span joins
//! that trace, and a one-shot (`at`) job's firings keep it. A malformed one
//! is not the spec's fault: it is ignored, as W3C propagation says.

use crate::ops::dead_letter::{exhausted, DeadLetter, DeadLetterKind};
use crate::ops::metrics::Metrics;
use crate::ops::traces;
use crate::pull::{self, PullError};
use crate::store::{AuditRecord, Store, StoreError};
use async_nats::jetstream::{self, consumer::PullConsumer, AckKind};
use async_nats::HeaderMap;
use chime_common::traceparent::TraceParent;
use chime_common::{headers, ApiError, JobSpec, Limits, Subjects};
use chime_runtime::traces::FiringAttributes;
use chrono::Utc;
use futures::StreamExt;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Submission consumer settings.
#[derive(Debug, Clone)]
pub struct SubmitConfig {
    /// Messages asked for at a time.
    pub batch: usize,
    /// How long one pull request waits on the server.
    pub wait: Duration,
    /// Redelivery delay after a store outage or failure.
    pub retry_after: Duration,
    pub limits: Limits,
    /// The delivery of a submission that fails for a reason that is neither
    /// its own fault nor a store outage on which it is dead-lettered instead
    /// of redelivered. Deliveries that met a store outage count too; 0 or 1
    /// dead-letters at the first such failure.
    pub max_deliveries: u32,
}

impl Default for SubmitConfig {
    fn default() -> Self {
        SubmitConfig {
            batch: 100,
            wait: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
            limits: Limits::default(),
            max_deliveries: 5,
        }
    }
}

/// What applying one submission did.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The job was stored.
    Stored,
    /// The spec is at fault: the message was rejected with this error.
    Rejected(ApiError),
    /// The store is down or busy; try again later, however often.
    Retry(StoreError),
    /// Storing the job failed otherwise; try again a bounded number of times.
    Failed(StoreError),
}

/// The submission consumer of one replica (all replicas share one durable consumer).
#[derive(Clone)]
pub struct Submit {
    pub config: SubmitConfig,
    pub store: Store,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub metrics: Metrics,
}

impl Submit {
    /// Applies one submission body.
    pub async fn apply(&self, body: &[u8]) -> Applied {
        self.apply_in_trace(body, None).await
    }

    /// Applies one submission body that carried `given` (its `traceparent`).
    pub async fn apply_in_trace(&self, body: &[u8], given: Option<TraceParent>) -> Applied {
        let value: serde_json::Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return Applied::Rejected(ApiError::invalid_request(format!(
                    "the submission is not valid JSON: {e}"
                )))
            }
        };
        let (spec, expected) = match (
            JobSpec::from_json(&value, &self.config.limits),
            chime_common::job::if_version(&value),
        ) {
            (Ok(spec), Ok(expected)) => (spec, expected),
            (spec, expected) => {
                let mut errors = spec.err().unwrap_or_default();
                errors.extend(expected.err());
                return Applied::Rejected(ApiError::from_field_errors(errors));
            }
        };
        // A submission creates; it replaces a job only when it names the
        // version it replaces. Submitters may publish nothing else, so this
        // keeps one from swapping an existing job (a shell job's command)
        // for its own.
        let condition = expected.unwrap_or(0);
        let now = Utc::now();
        // The `put` span's context: what a one-shot job's firings keep.
        let trace = given.as_ref().map(TraceParent::child);
        let put = self
            .store
            .put_job_in_trace(&spec, Some(condition), trace.as_ref(), now)
            .await;
        let stored = match put {
            Err(conflict @ StoreError::Conflict(_)) if expected.is_none() => {
                self.resubmitted(&spec, conflict).await
            }
            stored => stored.map(|job| Some(job.version)),
        };
        self.audit(&spec.id, expected, &stored, now).await;
        if let (Some(trace), Some(given)) = (&trace, &given) {
            let attributes = FiringAttributes {
                job_id: Some(spec.id.clone()),
                group: Some(spec.group.clone()),
                ..FiringAttributes::default()
            };
            let error = stored.as_ref().err().map(ToString::to_string);
            let span = (now, Utc::now());
            traces::request("put", trace, Some(given), span, attributes, error);
        }
        match stored {
            Ok(_) => Applied::Stored,
            Err(e) if e.is_retryable() => Applied::Retry(e),
            Err(e @ (StoreError::Invalid(_) | StoreError::Conflict(_))) => {
                Applied::Rejected(e.into())
            }
            Err(e) => Applied::Failed(e),
        }
    }

    /// A submission without `if_version` for a job that exists: applied as
    /// a no-op when it is the stored spec (an application submitting its
    /// jobs at every start), refused otherwise.
    async fn resubmitted(
        &self,
        spec: &JobSpec,
        conflict: StoreError,
    ) -> Result<Option<i64>, StoreError> {
        match self.store.get_job(&spec.id).await? {
            None => Err(conflict),
            Some(job) if job.spec == *spec => Ok(None),
            Some(_) => Err(StoreError::Conflict(format!(
                "job {:?} exists; a submission replaces a job only when it names the \
                 version it replaces (if_version)",
                spec.id
            ))),
        }
    }

    /// Records a submission in the audit trail, as `jobs.put` via `submit`.
    /// A submission that changed nothing (the stored spec again) is not
    /// recorded; a refused one is, with its reason.
    async fn audit(
        &self,
        id: &str,
        expected: Option<i64>,
        stored: &Result<Option<i64>, StoreError>,
        now: chrono::DateTime<Utc>,
    ) {
        let (after, outcome, message) = match stored {
            Ok(None) => return,
            Err(e) if e.is_retryable() => return,
            Ok(Some(version)) => (Some(*version), "ok", None),
            Err(e) => {
                let error = ApiError::from(e.clone());
                (None, error.code.as_str(), Some(error.message))
            }
        };
        let before = match (after, expected) {
            (Some(_), Some(version)) if version > 0 => Some(version),
            _ => None,
        };
        let record = AuditRecord {
            actor: "nats",
            via: "submit",
            verb: "jobs.put",
            target: id,
            before_version: before,
            after_version: after,
            outcome,
            message: message.as_deref(),
        };
        crate::intake::api::record_audit(&self.store, &self.metrics, &record, now).await;
    }

    /// Handles one message: apply, reject or retry, then ack accordingly.
    pub async fn handle(&self, message: &jetstream::Message) {
        let given = message
            .headers
            .as_ref()
            .and_then(|h| h.get(headers::TRACEPARENT))
            .and_then(|value| match TraceParent::parse(value.as_str()) {
                Ok(tp) => Some(tp),
                Err(error) => {
                    tracing::debug!(%error, "a submission's traceparent is malformed; ignored");
                    None
                }
            });
        match self.apply_in_trace(&message.payload, given).await {
            Applied::Stored => {
                self.metrics.submit_applied.inc();
                let _ = message.ack().await;
            }
            Applied::Retry(error) => {
                self.metrics
                    .store_errors
                    .with_label_values(&["submit"])
                    .inc();
                tracing::warn!(%error, "cannot store a submission now; it will be redelivered");
                self.retry(message).await;
            }
            Applied::Failed(error) => {
                self.metrics
                    .store_errors
                    .with_label_values(&["submit"])
                    .inc();
                if !exhausted(message, self.config.max_deliveries) {
                    tracing::warn!(%error, "cannot store a submission; it will be redelivered");
                    self.retry(message).await;
                    return;
                }
                let letter =
                    DeadLetter::of_jetstream(DeadLetterKind::Submit, message, error.into());
                if letter
                    .store(&self.jetstream, &self.subjects, &self.metrics)
                    .await
                {
                    let _ = message.ack().await;
                } else {
                    self.retry(message).await;
                }
            }
            Applied::Rejected(error) => {
                let error_json = serde_json::to_string(&chime_common::error::ErrorReply {
                    error: error.clone(),
                })
                .unwrap_or_else(|_| "{}".to_string());
                let mut h = HeaderMap::new();
                h.insert(headers::ERROR, error_json.as_str());
                let published = match self
                    .jetstream
                    .publish_with_headers(
                        self.subjects.submit_rejected(),
                        h,
                        message.payload.clone(),
                    )
                    .await
                {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                };
                if published {
                    self.metrics.submit_rejected.inc();
                    tracing::info!(error = %error, "submission rejected");
                    let _ = message.ack().await;
                } else {
                    // Not acked: the submission comes back and is rejected again.
                    self.retry(message).await;
                }
            }
        }
    }

    /// Hands a message back, to be redelivered after `retry_after`.
    async fn retry(&self, message: &jetstream::Message) {
        let _ = message
            .ack_with(AckKind::Nak(Some(self.config.retry_after)))
            .await;
    }

    /// Consumes submissions until `shutdown` (see [`crate::pull`]). A failed
    /// pull is returned: the supervisor opens the consumer again.
    pub async fn run(
        self,
        consumer: PullConsumer,
        shutdown: CancellationToken,
    ) -> Result<(), PullError> {
        while !shutdown.is_cancelled() {
            let mut messages = pull::open(&consumer, self.config.batch, self.config.wait).await?;
            loop {
                let message = tokio::select! {
                    m = messages.next() => m,
                    _ = shutdown.cancelled() => return Ok(()),
                };
                let Some(message) = message else { break };
                self.handle(&message?).await;
            }
        }
        Ok(())
    }
}
