//! What the transitions read and lock before they decide, and how a batch
//! is split between its set-based and its per-firing path.
//!
//! Locks are taken in one order, firing row, then executing row, then job
//! row, then the group's limits, then held rows; a firing's `waiting` row
//! only after its firing row. The rare deadlock that is left is retried by [`Store::retrying`].

use super::conditions::{NOTHING_HELD_IN_GROUP, NO_FAN_IN_DEPENDENTS, PLAIN_START};
use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::lateness::{due_instant, Due, LATENESS_SPEC};
use super::rows;
use super::rows::JOB_TABLES;
use super::values::{at_ms, id_batch, RowExt};
use chime_common::protocol::{Alert, AlertKind, Finished, Outcome, StartRefusal, StartRequest};
use chime_common::{FiringId, FiringState, JobSpec, JobState};
use serde::de::IgnoredAny;
use serde::Deserialize;
use sqlx::{Any, Transaction};
use std::collections::{HashMap, HashSet};
use std::future::Future;

pub(super) type Tx = Transaction<'static, Any>;

/// What a transition needs of a firing row.
pub(super) struct FiringRow {
    pub id: FiringId,
    pub text: String,
    pub state: FiringState,
    pub group: String,
    pub timeout_ms: i64,
    pub handler: String,
    /// `None` for a firing staged before digests were stored.
    pub payload_sha256: Option<String>,
    /// The worker a broadcast's share is addressed to, alone allowed to
    /// start it.
    pub addressed_to: Option<String>,
    /// The instant its start's lateness is measured from ([`due_instant`]).
    pub due_instant: i64,
    /// Attempts of its instant before it that the infrastructure ended and
    /// that were run again without spending the job's attempts.
    pub infra_retries: u32,
}

impl FiringRow {
    /// The job's attempts this firing's instant has spent, itself included.
    pub fn attempts_spent(&self) -> u32 {
        self.id.attempt.saturating_sub(self.infra_retries)
    }
}

impl FiringRow {
    /// Why `request` may not start this firing, if it may not: the worker
    /// is of another group, or it received another handler or payload than
    /// was staged (a message the scheduler did not publish). A request
    /// without `handler` or `payload_sha256` (a v1 worker) is not compared
    /// on them. The fast path states the same in SQL ([`super::start`]'s
    /// `AS_STAGED`); the store suite runs both.
    pub fn refusal_for(&self, request: &StartRequest) -> Option<StartRefusal> {
        if request.group != self.group {
            return Some(StartRefusal::WrongGroup);
        }
        if self
            .addressed_to
            .as_ref()
            .is_some_and(|worker| *worker != request.worker_id)
        {
            return Some(StartRefusal::WrongWorker);
        }
        let handler_differs = request
            .handler
            .as_ref()
            .is_some_and(|handler| *handler != self.handler);
        let payload_differs = match (&request.payload_sha256, &self.payload_sha256) {
            (Some(asked), Some(staged)) => asked != staged,
            _ => false,
        };
        (handler_differs || payload_differs).then_some(StartRefusal::NotAsStaged)
    }

    /// An alert about this firing.
    pub fn alert(&self, kind: AlertKind, message: String, now: i64) -> Alert {
        Alert {
            kind,
            job_id: self.id.job_id.clone(),
            group: self.group.clone(),
            firing_id: Some(self.id.clone()),
            message,
            at: at_ms(now),
            consecutive_failures: None,
            paused: false,
            lateness_ms: None,
        }
    }
}

/// A firing of a batch as the batch's first statement reads it.
pub(super) struct BatchRow {
    pub firing: FiringRow,
    /// The worker of its executing row, if it has one.
    pub running_on: Option<String>,
    /// Its job's `on_success`; `None` if the job is gone or its spec unreadable.
    pub on_success: Option<usize>,
    /// Whether a firing of its group is held by a limit (a finish may
    /// have to release it).
    pub held_in_group: bool,
    /// Whether a fan-in job waits for its job's success.
    pub fan_in_dependents: bool,
    /// A start that needs no policy decision ([`PLAIN_START`], not running
    /// anywhere): decided by the database, in the same words as the fast path.
    pub plain_start: bool,
    /// What a start is measured against.
    pub due: Due,
}

impl BatchRow {
    /// A finish that needs no policy decision: a success reported by the
    /// worker that runs it, for a job that triggers, counts towards a
    /// fan-in and releases nothing, and not a shard (whose instant's
    /// success is decided in `finish_one`).
    pub fn plain_success(&self, event: &Finished) -> bool {
        event.outcome == Outcome::Succeeded
            && self.firing.id.shard.is_none()
            && self.running_on.as_deref() == Some(event.worker_id.as_str())
            && !self.held_in_group
            && !self.fan_in_dependents
            && self.on_success == Some(0)
    }
}

/// The part of a job spec a finish batch decides on, read without parsing
/// the rest.
#[derive(Deserialize)]
struct Triggers {
    #[serde(default)]
    on_success: Vec<IgnoredAny>,
}

/// A job as the transitions see it.
pub(super) struct JobRow {
    pub spec: JobSpec,
    pub state: JobState,
}

/// A stored infrastructure retry count; one out of range reads as spent.
fn infra_retries(stored: i64) -> u32 {
    u32::try_from(stored).unwrap_or(u32::MAX)
}

impl Store {
    /// Reads and locks the batch's firings in firing-id order (so concurrent
    /// batches never wait on each other in a cycle), with their executing
    /// rows and their jobs' policies. Missing and corrupt firings are left
    /// out; the per-firing path then answers for them.
    pub(super) async fn lock_batch(
        &self,
        tx: &mut Tx,
        ids: &[&FiringId],
    ) -> Result<HashMap<FiringId, BatchRow>, StoreError> {
        let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        let due = due_instant("f");
        let sql = format!(
            "SELECT f.id, f.state, f.group_name, f.timeout_ms, f.handler, f.payload_sha256, \
                 f.worker_id AS addressed_to, f.infra_retries, {due} AS due_instant, e.worker_id, j.spec, \
                 {LATENESS_SPEC} AS lateness_spec, \
                 CAST(CASE WHEN {NOTHING_HELD_IN_GROUP} THEN 0 ELSE 1 END AS BIGINT) \
                     AS held_in_group, \
                 CAST(CASE WHEN {NO_FAN_IN_DEPENDENTS} THEN 0 ELSE 1 END AS BIGINT) \
                     AS fan_in_dependents, \
                 CAST(CASE WHEN e.worker_id IS NULL AND {} THEN 1 ELSE 0 END AS BIGINT) \
                     AS plain_start \
             FROM firings f \
             LEFT JOIN executing e ON e.firing_id = f.id \
             LEFT JOIN jobs j ON j.id = f.job_id \
             WHERE f.id IN (SELECT r.id FROM {}) ORDER BY f.id{}",
            PLAIN_START.as_str(),
            self.backend.json_rows(1, &[("id", Col::Text)]),
            self.backend.for_update_of("f")
        );
        let found = sqlx::query(&sql)
            .bind_rows(&id_batch(&ids)?)
            .fetch_all(&mut **tx)
            .await?;
        let mut rows = HashMap::with_capacity(found.len());
        for row in &found {
            let read = || -> Result<BatchRow, StoreError> {
                let text = row.text("", "id")?;
                let id = rows::firing_id(&text)?;
                // An unreadable spec takes the per-firing path, which logs it.
                let on_success = row
                    .opt_text(&text, "spec")?
                    .and_then(|spec| serde_json::from_str::<Triggers>(&spec).ok())
                    .map(|t| t.on_success.len());
                let due_instant = row.int(&text, "due_instant")?;
                let due = Due::of_spec(
                    due_instant,
                    &id.job_id,
                    row.opt_text(&text, "lateness_spec")?.as_deref(),
                );
                Ok(BatchRow {
                    firing: FiringRow {
                        state: rows::firing_state(&text, &row.text(&text, "state")?)?,
                        group: row.text(&text, "group_name")?,
                        timeout_ms: row.int(&text, "timeout_ms")?,
                        handler: row.text(&text, "handler")?,
                        payload_sha256: row.opt_text(&text, "payload_sha256")?,
                        addressed_to: row.opt_text(&text, "addressed_to")?,
                        due_instant,
                        infra_retries: infra_retries(row.int(&text, "infra_retries")?),
                        id,
                        text: text.clone(),
                    },
                    running_on: row.opt_text(&text, "worker_id")?,
                    on_success,
                    held_in_group: row.int(&text, "held_in_group")? != 0,
                    fan_in_dependents: row.int(&text, "fan_in_dependents")? != 0,
                    plain_start: row.int(&text, "plain_start")? != 0,
                    due,
                })
            };
            match read() {
                Ok(batch_row) => {
                    rows.insert(batch_row.firing.id.clone(), batch_row);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "firing row left to the per-firing path");
                }
            }
        }
        Ok(rows)
    }

    /// Reads and locks a firing row. A corrupt row reads as missing (logged).
    pub(super) async fn lock_firing(
        &self,
        tx: &mut Tx,
        id: &FiringId,
    ) -> Result<Option<FiringRow>, StoreError> {
        let text = id.to_string();
        let Some(row) = sqlx::query(&format!(
            "SELECT state, group_name, timeout_ms, handler, payload_sha256, \
                 worker_id AS addressed_to, infra_retries, \
                 {} AS due_instant \
             FROM firings f WHERE id = $1{}",
            due_instant("f"),
            self.backend.for_update()
        ))
        .bind(text.as_str())
        .fetch_optional(&mut **tx)
        .await?
        else {
            return Ok(None);
        };
        let read = || -> Result<FiringRow, StoreError> {
            Ok(FiringRow {
                state: rows::firing_state(&text, &row.text(&text, "state")?)?,
                group: row.text(&text, "group_name")?,
                timeout_ms: row.int(&text, "timeout_ms")?,
                handler: row.text(&text, "handler")?,
                payload_sha256: row.opt_text(&text, "payload_sha256")?,
                addressed_to: row.opt_text(&text, "addressed_to")?,
                due_instant: row.int(&text, "due_instant")?,
                infra_retries: infra_retries(row.int(&text, "infra_retries")?),
                id: id.clone(),
                text: text.clone(),
            })
        };
        match read() {
            Ok(firing) => Ok(Some(firing)),
            Err(e) => {
                tracing::error!(firing_id = %text, error = %e, "firing row is corrupt; treated as unknown");
                Ok(None)
            }
        }
    }

    /// Reads (and on request locks) a job. A corrupt row reads as missing (logged).
    pub(super) async fn read_job(
        &self,
        tx: &mut Tx,
        job_id: &str,
        lock: bool,
    ) -> Result<Option<JobRow>, StoreError> {
        let lock = if lock {
            self.backend.for_update_of("j")
        } else {
            String::new()
        };
        let Some(row) = sqlx::query(&format!(
            "SELECT j.spec, s.state FROM {JOB_TABLES} WHERE j.id = $1{lock}"
        ))
        .bind(job_id)
        .fetch_optional(&mut **tx)
        .await?
        else {
            return Ok(None);
        };
        let read = || -> Result<JobRow, StoreError> {
            Ok(JobRow {
                spec: rows::spec(job_id, &row.text(job_id, "spec")?)?,
                state: rows::job_state(job_id, &row.text(job_id, "state")?)?,
            })
        };
        match read() {
            Ok(job) => Ok(Some(job)),
            Err(e) => {
                tracing::error!(job_id, error = %e, "job row is corrupt; its policies are not applied");
                Ok(None)
            }
        }
    }
}

/// Fills in the items `decided` leaves open with `decide_rest` (called
/// with those items, in order, only if there are any) and returns every
/// item's answer in order: the fast path's answers and the transaction
/// path's merged back.
pub(super) async fn complete<T: Clone, R, Fut>(
    items: &[T],
    mut decided: Vec<Option<R>>,
    decide_rest: impl FnOnce(Vec<T>) -> Fut,
) -> Result<Vec<R>, StoreError>
where
    Fut: Future<Output = Result<Vec<R>, StoreError>>,
{
    let open: Vec<usize> = (0..items.len()).filter(|&i| decided[i].is_none()).collect();
    if !open.is_empty() {
        let rest = open.iter().map(|&i| items[i].clone()).collect();
        for (i, answer) in open.into_iter().zip(decide_rest(rest).await?) {
            decided[i] = Some(answer);
        }
    }
    Ok(decided.into_iter().flatten().collect())
}

/// Splits a batch (`ids[i]` is item i's firing) into its plain items,
/// `is_plain` and their firing named once, and the rest. A firing named
/// twice goes the per-firing way, which decides its requests one after the
/// other. The rest comes in firing-id order (stable, so a firing's items keep
/// their order): the locks it takes later (jobs, queued firings) are then
/// taken in one order by every batch.
pub(super) fn split_batch(
    ids: &[&FiringId],
    is_plain: impl Fn(usize) -> bool,
) -> (Vec<usize>, Vec<usize>) {
    let mut seen = HashSet::new();
    let repeated: HashSet<&FiringId> = ids.iter().copied().filter(|id| !seen.insert(*id)).collect();
    let (plain, mut other): (Vec<usize>, Vec<usize>) =
        (0..ids.len()).partition(|&i| !repeated.contains(ids[i]) && is_plain(i));
    other.sort_by(|&a, &b| ids[a].cmp(ids[b]));
    (plain, other)
}
