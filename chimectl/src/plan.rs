//! What `chimectl apply` does, decided before it is done: a [`Plan`] says
//! for every job in the files whether it is created, changed (and which
//! fields) or unchanged, and with `--prune` which stored jobs are deleted.
//! `diff` and `apply --dry-run` print the plan; `apply` prints it and
//! carries it out.
//!
//! Carrying it out puts each job with `if_version` set to the version the
//! plan was made from (0 for a job to create), so a job someone changed
//! since is reported as a conflict, not overwritten. Each job is one put,
//! atomic on the server; a failure of one does not stop the others.

use crate::field_diff::{diff, FieldChange};
use crate::manifests::{Manifest, Source};
use chime_common::api::ListJobsRequest;
use chime_common::client::Client;
use chime_common::job::IF_VERSION_FIELD;
use chime_common::{ApiError, ErrorCode, Job};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// What happens to one job.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Not stored yet: put with `if_version: 0`.
    Create,
    /// Stored at `version` and different: put with `if_version: version`.
    Change {
        version: i64,
        fields: Vec<FieldChange>,
    },
    /// Stored and the same.
    Unchanged,
    /// Stored, matched by the prune selector, in no file: deleted.
    Delete,
}

/// One job of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    /// The file that defines it (none for a job to delete).
    pub source: Option<Source>,
    pub action: Action,
    /// The spec to put (create and change).
    spec: Option<Value>,
}

/// Every job a run of apply touches or checks, in file order, deletions last.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
}

/// What carrying out a plan did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub created: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
    pub deleted: Vec<String>,
    /// Jobs whose put or delete failed (a conflict among them), with why.
    pub failed: Vec<Failed>,
}

/// One job that could not be applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failed {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub error: ApiError,
}

/// A job as `export` writes it and `apply` compares it: the spec without
/// the read-only fields and without `paused`, which `pause` and `resume`
/// manage (a file that sets `paused` manages it instead).
pub fn exported(job: &Job) -> Value {
    let mut spec = job.spec.to_json();
    if let Value::Object(fields) = &mut spec {
        fields.remove("paused");
    }
    spec
}

impl Plan {
    /// Compares the files' jobs with the stored ones. With `prune`, stored
    /// jobs that selector matches and no file defines are deleted.
    pub async fn make(
        client: &Client,
        manifests: &[Manifest],
        prune: Option<&str>,
    ) -> Result<Plan, ApiError> {
        let mut steps = Vec::with_capacity(manifests.len());
        for manifest in manifests {
            let stored = match client.get_job(&manifest.spec.id).await {
                Ok(job) => Some(job),
                Err(e) if e.code == ErrorCode::NotFound => None,
                Err(e) => return Err(e),
            };
            let mut wanted = manifest.spec.clone();
            if let (Some(job), false) = (&stored, manifest.sets_paused) {
                wanted.paused = job.spec.paused;
            }
            let action = match &stored {
                None => Action::Create,
                Some(job) if job.spec == wanted => Action::Unchanged,
                Some(job) => Action::Change {
                    version: job.version,
                    fields: diff(&job.spec.to_json(), &wanted.to_json()),
                },
            };
            steps.push(Step {
                id: wanted.id.clone(),
                source: Some(manifest.source.clone()),
                action,
                spec: Some(wanted.to_json()),
            });
        }
        if let Some(selector) = prune {
            let defined: BTreeSet<&str> = manifests.iter().map(|m| m.spec.id.as_str()).collect();
            for job in stored_jobs(client, Some(selector)).await? {
                if !defined.contains(job.spec.id.as_str()) {
                    steps.push(Step {
                        id: job.spec.id.clone(),
                        source: None,
                        action: Action::Delete,
                        spec: None,
                    });
                }
            }
        }
        Ok(Plan { steps })
    }

    /// Whether carrying it out would change nothing.
    pub fn is_empty(&self) -> bool {
        self.steps.iter().all(|s| s.action == Action::Unchanged)
    }

    /// The report of the plan as it stands, nothing done (`diff`, `--dry-run`).
    pub fn preview(&self) -> Report {
        let mut report = Report::default();
        for step in &self.steps {
            report.list(&step.action).push(step.id.clone());
        }
        report
    }

    /// Carries the plan out, job by job.
    pub async fn apply(&self, client: &Client) -> Report {
        let mut report = Report::default();
        for step in &self.steps {
            let done = match (&step.action, &step.spec) {
                (Action::Unchanged, _) => Ok(()),
                (Action::Create, Some(spec)) => put(client, spec, 0).await,
                (Action::Change { version, .. }, Some(spec)) => put(client, spec, *version).await,
                (Action::Delete, _) => client.delete_job(&step.id).await.map(|_| ()),
                (_, None) => Err(ApiError::internal("a plan step without a spec")),
            };
            match done {
                Ok(()) => report.list(&step.action).push(step.id.clone()),
                Err(error) => report.failed.push(Failed {
                    id: step.id.clone(),
                    file: step.source.as_ref().map(ToString::to_string),
                    error,
                }),
            }
        }
        report
    }
}

impl Report {
    fn list(&mut self, action: &Action) -> &mut Vec<String> {
        match action {
            Action::Create => &mut self.created,
            Action::Change { .. } => &mut self.changed,
            Action::Unchanged => &mut self.unchanged,
            Action::Delete => &mut self.deleted,
        }
    }
}

async fn put(client: &Client, spec: &Value, version: i64) -> Result<(), ApiError> {
    let mut body = spec.clone();
    if let Value::Object(fields) = &mut body {
        fields.insert(IF_VERSION_FIELD.into(), Value::from(version));
    }
    let reply = client.put_job_with_warnings(&body).await?;
    for warning in &reply.warnings {
        // The server's words, shown on a terminal: no control characters.
        let text: String = warning
            .to_string()
            .chars()
            .flat_map(|c| match c.is_control() {
                true => c.escape_default().collect::<Vec<_>>(),
                false => vec![c],
            })
            .collect();
        eprintln!("chimectl: warning: job {:?}: {text}", reply.job.spec.id);
    }
    Ok(())
}

/// Every stored job `selector` matches (all without one), reading all pages.
pub async fn stored_jobs(client: &Client, selector: Option<&str>) -> Result<Vec<Job>, ApiError> {
    let mut jobs = Vec::new();
    let mut after = None;
    loop {
        let page = client
            .list_jobs(&ListJobsRequest {
                selector: selector.map(str::to_string),
                limit: Some(chime_common::api::MAX_PAGE),
                after,
                ..ListJobsRequest::default()
            })
            .await?;
        jobs.extend(page.jobs);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(jobs),
        }
    }
}
