//! Firings on workers: start (with the overlap policies), finish (retries,
//! alerts, `on_success`, queue release), expiry.
//!
//! Each batch call is one transaction and each item in it is independent.
//! Locks are taken in one order, firing row, then executing row, then job
//! row, then a queued firing; a firing's `waiting` row only after its firing
//! row. The rare deadlock that is left is retried by [`Store::retrying`].
//!
//! On PostgreSQL the plain items of a batch (a start under `overlap: allow`
//! with nothing queued, a success with no `on_success`) are first decided in
//! one statement outside any transaction (`start_at_once`,
//! `finish_at_once`): a round trip costs more than the work. What is left
//! takes the transaction path below.
//!
//! A batch first reads and locks all its firings, with their executing rows
//! and their jobs' policies, in one statement. The common case (a start
//! under `overlap: allow`, a success with no `on_success` and nothing queued)
//! is then one statement per table for the whole batch; everything else
//! (other overlap policies, failures, retries, alerts, queue releases) takes
//! the per-firing path, in the same transaction. Row-at-a-time starts cost
//! 5–7 round trips per firing and capped the scheduler at about 2,000
//! firings/s (BENCHMARKS.md).

use super::dialect::{Backend, Col};
use super::jobs::write_spec_and_state;
use super::rows::{self, EXECUTING_COLUMNS, FIRING_COLUMNS, JOB_TABLES};
use super::types::{ExecutingRow, FinishOutcome, RequeueOutcome, Running, StartDecision};
use super::waiting::Waiting;
use super::{at_ms, id_batch, instant, json_text, ms, truncate, RowExt, Store, StoreError};
use chime_common::bounds::MAX_TIMEOUT;
use chime_common::duration::format_duration;
use chime_common::protocol::{
    Alert, AlertKind, Finished, Outcome, StartRefusal, StartReply, StartRequest,
};
use chime_common::text;
use chime_common::{Firing, FiringId, FiringState, JobSpec, JobState, Overlap, RetryPolicy};
use chrono::{DateTime, Utc};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use sqlx::{Any, Transaction};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

/// The longest timeout a firing may start with, in stored milliseconds.
const MAX_TIMEOUT_MS: i64 = MAX_TIMEOUT.as_millis() as i64;

/// Whether a stored timeout is one validation accepts; only those start.
fn timeout_in_range(timeout_ms: i64) -> bool {
    (1..=MAX_TIMEOUT_MS).contains(&timeout_ms)
}

/// When the next attempt is due, `delay` after `now`; `None` when that does
/// not fit (a delay validation never lets in), which ends the firing
/// instead of retrying it.
fn retry_due(now: DateTime<Utc>, delay: Duration) -> Option<DateTime<Utc>> {
    chrono::Duration::from_std(delay)
        .ok()
        .and_then(|delay| now.checked_add_signed(delay))
}

/// Whether an event's texts can be stored as they are (no NUL, within the
/// caps): what any worker sends is checked again here.
fn is_storable(event: &Finished) -> bool {
    let fits = |text: &Option<String>, max| {
        text.as_deref()
            .is_none_or(|t| t.len() <= max && !t.contains('\0'))
    };
    fits(&event.output, text::MAX_OUTPUT_BYTES) && fits(&event.error, text::MAX_ERROR_BYTES)
}

/// The event with its output cut to its tail and its error to its head, both
/// without NUL.
fn storable(event: &Finished) -> Finished {
    Finished {
        output: event
            .output
            .as_deref()
            .map(|t| text::tail(t, text::MAX_OUTPUT_BYTES).into_owned()),
        error: event
            .error
            .as_deref()
            .map(|t| text::head(t, text::MAX_ERROR_BYTES).into_owned()),
        ..event.clone()
    }
}

/// The retry delay callback of [`Store::finish`] and [`Store::requeue`]: the
/// delay before the attempt after `attempt` failed, under the policy.
pub type RetryDelay = dyn Fn(&RetryPolicy, u32) -> Duration + Sync;

type Tx = Transaction<'static, Any>;

/// What a lifecycle step needs of a firing row.
struct FiringRow {
    id: FiringId,
    text: String,
    state: FiringState,
    group: String,
    timeout_ms: i64,
}

/// A firing of a batch as the batch's first statement reads it.
struct BatchRow {
    firing: FiringRow,
    /// The worker of its executing row, if it has one.
    running_on: Option<String>,
    /// Its job's policies; `None` if the job is gone or its spec unreadable.
    policies: Option<Policies>,
    /// Whether its job has a queued (`pending`) firing.
    queued: bool,
}

impl BatchRow {
    /// A start that needs no policy decision: waiting to start, not running
    /// anywhere, its job allows overlap and queues nothing.
    fn plain_start(&self) -> bool {
        matches!(
            self.firing.state,
            FiringState::Staged | FiringState::Published
        ) && self.running_on.is_none()
            && timeout_in_range(self.firing.timeout_ms)
            && !self.queued
            && matches!(&self.policies, Some(p) if p.overlap == Overlap::Allow)
    }

    /// A finish that needs no policy decision: a success reported by the
    /// worker that runs it, for a job that triggers and releases nothing.
    fn plain_success(&self, event: &Finished) -> bool {
        event.outcome == Outcome::Succeeded
            && self.running_on.as_deref() == Some(event.worker_id.as_str())
            && !self.queued
            && matches!(&self.policies, Some(p) if p.on_success.is_empty())
    }
}

/// The parts of a job spec a batch decides on, read without parsing the rest.
#[derive(Deserialize)]
struct Policies {
    #[serde(default)]
    overlap: Overlap,
    #[serde(default)]
    on_success: Vec<IgnoredAny>,
}

/// A job as the lifecycle sees it.
struct JobRow {
    spec: JobSpec,
    state: JobState,
}

impl Store {
    /// Decides start requests (see docs/PROTOCOL.md): on PostgreSQL the
    /// plain ones in one statement, then the rest, in order, in one
    /// transaction. A firing's attempt is accepted at most once: a
    /// second worker is refused `already_started`, the same worker gets the
    /// same deadline again.
    pub async fn start(
        &self,
        requests: &[StartRequest],
        now: DateTime<Utc>,
    ) -> Result<Vec<StartDecision>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let now = ms(now);
        let mut decided: Vec<Option<StartDecision>> = vec![None; requests.len()];
        if self.backend == Backend::Postgres {
            self.start_at_once(requests, now, &mut decided).await;
        }
        complete(requests, decided, |rest| async move {
            self.start_in_transaction(&rest, now).await
        })
        .await
    }

    /// PostgreSQL: accepts the plain starts of a batch (each firing named
    /// once, waiting to start, its job's overlap `allow`, nothing queued) in
    /// one statement outside any transaction, and leaves the rest undecided.
    ///
    /// A start is on the path of every firing, and each round trip to the
    /// database costs about 1.5 ms on a busy 2-core machine where PostgreSQL,
    /// NATS and the workers share the CPUs (BEGIN, lock, insert, update,
    /// COMMIT measured 1.6 + 1.7 + 3.2 + 2.6 ms at 1,000 firings/s, with 0.7 ms
    /// of it executing). The conditional update takes the row locks and
    /// re-checks the state of a row another start changed meanwhile, so a
    /// firing is still started once. Any error (a conflicting executing row,
    /// a deadlock, the database down) leaves the whole batch to
    /// [`Store::start_in_transaction`], which decides it and reports errors.
    async fn start_at_once(
        &self,
        requests: &[StartRequest],
        now: i64,
        decided: &mut [Option<StartDecision>],
    ) {
        #[derive(Serialize)]
        struct Ask<'a> {
            id: String,
            worker_id: &'a str,
            /// Which request it answers (not sent).
            #[serde(skip)]
            request: usize,
        }
        let ids: Vec<&FiringId> = requests.iter().map(|r| &r.firing_id).collect();
        let (once, _) = split_batch(&ids, |_| true);
        let mut asks: Vec<Ask> = once
            .into_iter()
            .map(|i| Ask {
                id: requests[i].firing_id.to_string(),
                worker_id: requests[i].worker_id.as_str(),
                request: i,
            })
            .collect();
        if asks.is_empty() {
            return;
        }
        // Firing-id order, so concurrent batches lock in one order.
        asks.sort_by(|a, b| a.id.cmp(&b.id));
        let sql = format!(
            "WITH started AS ( \
                 UPDATE firings f SET state = 'executing', worker = r.worker_id, started_at = $2, \
                     published_at = COALESCE(f.published_at, $2) \
                 FROM {} \
                 WHERE f.id = r.id AND f.state IN ('staged', 'published') \
                     AND f.timeout_ms BETWEEN 1 AND {MAX_TIMEOUT_MS} \
                     AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = f.job_id AND j.overlap = 'allow') \
                     AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.job_id = f.job_id) \
                 RETURNING f.id, f.job_id, f.group_name, r.worker_id, f.attempt, f.timeout_ms), \
             executing_rows AS ( \
                 INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, \
                     started_at, deadline_at) \
                 SELECT id, job_id, group_name, worker_id, attempt, $2, $2 + timeout_ms \
                 FROM started), \
             no_longer_waiting AS ( \
                 DELETE FROM waiting w USING started WHERE w.firing_id = started.id) \
             SELECT id, timeout_ms FROM started",
            self.backend
                .json_rows(1, &[("id", Col::Text), ("worker_id", Col::Text)])
        );
        let body = match json_text(&asks) {
            Ok(body) => body,
            Err(e) => {
                tracing::debug!(error = %e, "start batch left to the transaction path");
                return;
            }
        };
        let started: Vec<(String, i64)> = match sqlx::query_as(&sql)
            .bind(body)
            .bind(now)
            .fetch_all(&self.lifecycle)
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "start batch left to the transaction path");
                return;
            }
        };
        let deadlines: HashMap<String, i64> = started.into_iter().collect();
        for ask in &asks {
            if let Some(timeout_ms) = deadlines.get(&ask.id) {
                decided[ask.request] = Some(StartDecision {
                    reply: StartReply::accepted(at_ms(now.saturating_add(*timeout_ms))),
                    cancel: Vec::new(),
                    alerts: Vec::new(),
                });
            }
        }
    }

    /// Decides start requests in one transaction: the plain ones set-based,
    /// the rest one by one.
    async fn start_in_transaction(
        &self,
        requests: &[StartRequest],
        now: i64,
    ) -> Result<Vec<StartDecision>, StoreError> {
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let ids: Vec<&FiringId> = requests.iter().map(|r| &r.firing_id).collect();
            let rows = self.lock_batch(&mut tx, &ids).await?;
            let (plain, other) = split_batch(&ids, |i| {
                rows.get(ids[i]).is_some_and(BatchRow::plain_start)
            });
            let mut decisions: Vec<Option<StartDecision>> = vec![None; requests.len()];
            self.start_plain(&mut tx, requests, &plain, &rows, now, &mut decisions)
                .await?;
            for i in other {
                decisions[i] = Some(self.start_one(&mut tx, &requests[i], now).await?);
            }
            tx.commit().await?;
            Ok(decisions.into_iter().flatten().collect())
        })
        .await
    }

    /// Reads and locks the batch's firings in firing-id order (so concurrent
    /// batches never wait on each other in a cycle), with their executing
    /// rows and their jobs' policies. Missing and corrupt firings are left
    /// out; the per-firing path then answers for them.
    async fn lock_batch(
        &self,
        tx: &mut Tx,
        ids: &[&FiringId],
    ) -> Result<HashMap<FiringId, BatchRow>, StoreError> {
        let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        let sql = format!(
            "SELECT f.id, f.state, f.group_name, f.timeout_ms, e.worker_id, j.spec, \
                 CAST(CASE WHEN EXISTS (SELECT 1 FROM pending p WHERE p.job_id = f.job_id) \
                      THEN 1 ELSE 0 END AS BIGINT) AS queued \
             FROM firings f \
             LEFT JOIN executing e ON e.firing_id = f.id \
             LEFT JOIN jobs j ON j.id = f.job_id \
             WHERE f.id IN (SELECT r.id FROM {}) ORDER BY f.id{}",
            self.backend.json_rows(1, &[("id", Col::Text)]),
            self.backend.for_update_of("f")
        );
        let found = sqlx::query(&sql)
            .bind(id_batch(&ids)?)
            .fetch_all(&mut **tx)
            .await?;
        let mut rows = HashMap::with_capacity(found.len());
        for row in &found {
            let read = || -> Result<BatchRow, StoreError> {
                let text = row.text("", "id")?;
                let id = rows::firing_id(&text)?;
                // An unreadable spec takes the per-firing path, which logs it.
                let policies = row
                    .opt_text(&text, "spec")?
                    .and_then(|spec| serde_json::from_str::<Policies>(&spec).ok());
                Ok(BatchRow {
                    firing: FiringRow {
                        state: rows::firing_state(&text, &row.text(&text, "state")?)?,
                        group: row.text(&text, "group_name")?,
                        timeout_ms: row.int(&text, "timeout_ms")?,
                        id,
                        text: text.clone(),
                    },
                    running_on: row.opt_text(&text, "worker_id")?,
                    policies,
                    queued: row.int(&text, "queued")? != 0,
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

    /// Accepts the plain starts `plain` (indexes into `requests`) with one
    /// insert into `executing` and one update of `firings`.
    async fn start_plain(
        &self,
        tx: &mut Tx,
        requests: &[StartRequest],
        plain: &[usize],
        rows: &HashMap<FiringId, BatchRow>,
        now: i64,
        decisions: &mut [Option<StartDecision>],
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Started<'a> {
            id: &'a str,
            job_id: &'a str,
            group_name: &'a str,
            worker_id: &'a str,
            attempt: i64,
            deadline_at: i64,
        }
        let mut started = Vec::with_capacity(plain.len());
        for &i in plain {
            let request = &requests[i];
            let Some(row) = rows.get(&request.firing_id) else {
                continue;
            };
            started.push(Started {
                id: row.firing.text.as_str(),
                job_id: row.firing.id.job_id.as_str(),
                group_name: row.firing.group.as_str(),
                worker_id: request.worker_id.as_str(),
                attempt: i64::from(row.firing.id.attempt),
                deadline_at: now.saturating_add(row.firing.timeout_ms),
            });
        }
        if started.is_empty() {
            return Ok(());
        }
        let insert = format!(
            "INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, \
                 started_at, deadline_at) \
             SELECT r.id, r.job_id, r.group_name, r.worker_id, r.attempt, $2, r.deadline_at \
             FROM {} WHERE true ON CONFLICT DO NOTHING RETURNING firing_id",
            self.backend.json_rows(
                1,
                &[
                    ("id", Col::Text),
                    ("job_id", Col::Text),
                    ("group_name", Col::Text),
                    ("worker_id", Col::Text),
                    ("attempt", Col::Int),
                    ("deadline_at", Col::Int),
                ]
            )
        );
        let inserted: HashSet<String> = sqlx::query_scalar(&insert)
            .bind(json_text(&started)?)
            .bind(now)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect();
        // The row locks make a conflict impossible; refuse it if one happens.
        started.retain(|s| inserted.contains(s.id));
        if !started.is_empty() {
            let update = format!(
                "UPDATE firings SET state = 'executing', worker = r.worker_id, started_at = $2, \
                     published_at = COALESCE(published_at, $2) \
                 FROM {} WHERE firings.id = r.id",
                self.backend
                    .json_rows(1, &[("id", Col::Text), ("worker_id", Col::Text)])
            );
            sqlx::query(&update)
                .bind(json_text(&started)?)
                .bind(now)
                .execute(&mut **tx)
                .await?;
            let ids: Vec<&str> = started.iter().map(|s| s.id).collect();
            self.remove_waiting(tx, &ids).await?;
        }
        for &i in plain {
            let id = &requests[i].firing_id;
            let accepted = rows
                .get(id)
                .filter(|row| inserted.contains(&row.firing.text))
                .map(|row| at_ms(now.saturating_add(row.firing.timeout_ms)));
            decisions[i] = Some(StartDecision {
                reply: match accepted {
                    Some(deadline) => StartReply::accepted(deadline),
                    None => StartReply::refused(StartRefusal::AlreadyStarted),
                },
                cancel: Vec::new(),
                alerts: Vec::new(),
            });
        }
        Ok(())
    }

    async fn start_one(
        &self,
        tx: &mut Tx,
        request: &StartRequest,
        now: i64,
    ) -> Result<StartDecision, StoreError> {
        let refused = |why| StartDecision {
            reply: StartReply::refused(why),
            cancel: Vec::new(),
            alerts: Vec::new(),
        };
        let Some(firing) = self.lock_firing(tx, &request.firing_id).await? else {
            return Ok(refused(StartRefusal::UnknownFiring));
        };
        match firing.state {
            FiringState::Cancelled => return Ok(refused(StartRefusal::Cancelled)),
            FiringState::Skipped => return Ok(refused(StartRefusal::Skipped)),
            s if s.is_final() => return Ok(refused(StartRefusal::AlreadyFinished)),
            _ => {}
        }
        let id = firing.text.as_str();
        if let Some(row) =
            sqlx::query("SELECT worker_id, deadline_at FROM executing WHERE firing_id = $1")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?
        {
            return Ok(if row.text(id, "worker_id")? == request.worker_id {
                let deadline = instant(id, "deadline_at", row.int(id, "deadline_at")?)?;
                StartDecision {
                    reply: StartReply::accepted(deadline),
                    cancel: Vec::new(),
                    alerts: Vec::new(),
                }
            } else {
                refused(StartRefusal::AlreadyStarted)
            });
        }
        if firing.state == FiringState::Executing {
            // Executing without an executing row: someone else owns it.
            return Ok(refused(StartRefusal::AlreadyStarted));
        }
        if !timeout_in_range(firing.timeout_ms) {
            // Validation lets no such timeout in; a row written before it
            // did (or by a bug) ends here instead of computing a deadline.
            let error = format!(
                "the firing's stored timeout of {} ms is outside the accepted range \
                 (1 ms to {}); put the job again with a valid timeout",
                firing.timeout_ms,
                format_duration(MAX_TIMEOUT)
            );
            self.end_unstarted(tx, id, FiringState::Failed, &error, now)
                .await?;
            return Ok(StartDecision {
                alerts: vec![Alert {
                    kind: AlertKind::FiringFailed,
                    job_id: firing.id.job_id.clone(),
                    group: firing.group.clone(),
                    firing_id: Some(firing.id.clone()),
                    message: format!("firing {id} failed before it started: {error}"),
                    at: at_ms(now),
                    consecutive_failures: None,
                    paused: false,
                }],
                ..refused(StartRefusal::AlreadyFinished)
            });
        }

        let job_id = firing.id.job_id.as_str();
        let mut overlap = self.overlap_of(tx, job_id, false).await?;
        if overlap != Overlap::Allow {
            // Serialize the overlap decision among this job's starts.
            overlap = self.overlap_of(tx, job_id, true).await?;
        }
        let mut cancel = Vec::new();
        if overlap != Overlap::Allow {
            let others = sqlx::query(
                "SELECT firing_id, worker_id FROM executing \
                 WHERE job_id = $1 AND firing_id <> $2 ORDER BY firing_id",
            )
            .bind(job_id)
            .bind(id)
            .fetch_all(&mut **tx)
            .await?;
            if !others.is_empty() {
                match overlap {
                    Overlap::Allow => {}
                    Overlap::Forbid => {
                        self.skip_for_overlap(tx, id, now).await?;
                        return Ok(refused(StartRefusal::Skipped));
                    }
                    Overlap::Queue => {
                        let pending: Option<String> =
                            sqlx::query_scalar("SELECT firing_id FROM pending WHERE job_id = $1")
                                .bind(job_id)
                                .fetch_optional(&mut **tx)
                                .await?;
                        return Ok(match pending {
                            None => {
                                sqlx::query(
                                    "INSERT INTO pending (job_id, firing_id) VALUES ($1, $2)",
                                )
                                .bind(job_id)
                                .bind(id)
                                .execute(&mut **tx)
                                .await?;
                                refused(StartRefusal::Queued)
                            }
                            Some(queued) if queued == id => refused(StartRefusal::Queued),
                            Some(_) => {
                                self.skip_for_overlap(tx, id, now).await?;
                                refused(StartRefusal::Skipped)
                            }
                        });
                    }
                    Overlap::Replace => {
                        for row in &others {
                            let other = row.text(id, "firing_id")?;
                            cancel.push(Running {
                                firing_id: rows::firing_id(&other)?,
                                worker_id: row.text(&other, "worker_id")?,
                            });
                        }
                    }
                }
            }
        }

        let deadline = now.saturating_add(firing.timeout_ms);
        let inserted = sqlx::query(
            "INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, started_at, \
                 deadline_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(job_id)
        .bind(firing.group.as_str())
        .bind(request.worker_id.as_str())
        .bind(i64::from(firing.id.attempt))
        .bind(now)
        .bind(deadline)
        .execute(&mut **tx)
        .await?;
        if inserted.rows_affected() == 0 {
            // Lost a race the firing row lock should have prevented; refuse.
            return Ok(refused(StartRefusal::AlreadyStarted));
        }
        sqlx::query(
            "UPDATE firings SET state = 'executing', worker = $2, started_at = $3, \
             published_at = COALESCE(published_at, $3) WHERE id = $1",
        )
        .bind(id)
        .bind(request.worker_id.as_str())
        .bind(now)
        .execute(&mut **tx)
        .await?;
        self.remove_waiting(tx, &[id]).await?;
        sqlx::query("DELETE FROM pending WHERE job_id = $1 AND firing_id = $2")
            .bind(job_id)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        Ok(StartDecision {
            reply: StartReply::accepted(at_ms(deadline)),
            cancel,
            alerts: Vec::new(),
        })
    }

    /// Reads and locks a firing row. A corrupt row reads as missing (logged).
    async fn lock_firing(
        &self,
        tx: &mut Tx,
        id: &FiringId,
    ) -> Result<Option<FiringRow>, StoreError> {
        let text = id.to_string();
        let Some(row) = sqlx::query(&format!(
            "SELECT state, group_name, timeout_ms FROM firings WHERE id = $1{}",
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

    /// The job's overlap policy; `allow` if it was deleted or cannot be read.
    async fn overlap_of(
        &self,
        tx: &mut Tx,
        job_id: &str,
        lock: bool,
    ) -> Result<Overlap, StoreError> {
        let job = self.read_job(tx, job_id, lock).await?;
        Ok(job.map(|j| j.spec.overlap).unwrap_or_default())
    }

    /// Reads (and on request locks) a job. A corrupt row reads as missing (logged).
    async fn read_job(
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

    async fn skip_for_overlap(&self, tx: &mut Tx, id: &str, now: i64) -> Result<(), StoreError> {
        self.end_unstarted(
            tx,
            id,
            FiringState::Skipped,
            "overlap: previous firing still running",
            now,
        )
        .await
    }

    /// Ends a firing that never started, in a final `state`, with `error`.
    async fn end_unstarted(
        &self,
        tx: &mut Tx,
        id: &str,
        state: FiringState,
        error: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE firings SET state = $2, error = $3, finished_at = $4 WHERE id = $1")
            .bind(id)
            .bind(state.as_str())
            .bind(error)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        self.remove_waiting(tx, &[id]).await
    }

    /// Applies finished events: on PostgreSQL the plain successes in one
    /// statement, then the rest, in order, in one transaction. An event
    /// applies only while its worker holds the firing's executing row, so a
    /// re-delivered event changes nothing (`applied: false`).
    pub async fn finish(
        &self,
        events: &[Finished],
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<Vec<FinishOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let now = truncate(now);
        let events: Cow<[Finished]> = if events.iter().all(is_storable) {
            Cow::Borrowed(events)
        } else {
            Cow::Owned(events.iter().map(storable).collect())
        };
        let events = events.as_ref();
        let mut applied: Vec<Option<FinishOutcome>> = vec![None; events.len()];
        if self.backend == Backend::Postgres {
            self.finish_at_once(events, now, &mut applied).await;
        }
        complete(events, applied, |rest| async move {
            self.finish_in_transaction(&rest, now, retry_delay).await
        })
        .await
    }

    /// PostgreSQL: applies the plain successes of a batch (each firing named
    /// once, reported by the worker running it, its job with no `on_success`
    /// and nothing queued) in one statement outside any transaction, and
    /// leaves the rest unapplied; see [`Store::start_at_once`] for why. The
    /// firing row is locked first, as on the transaction path, and its state
    /// re-checked if a concurrent expiry changed it. Any error (a corrupt
    /// spec, a deadlock, the database down) leaves the whole batch to
    /// [`Store::finish_in_transaction`].
    async fn finish_at_once(
        &self,
        events: &[Finished],
        now: DateTime<Utc>,
        applied: &mut [Option<FinishOutcome>],
    ) {
        #[derive(Serialize)]
        struct Done<'a> {
            id: String,
            worker_id: &'a str,
            output: Option<&'a str>,
            /// Which event it records (not sent).
            #[serde(skip)]
            event: usize,
        }
        let ids: Vec<&FiringId> = events.iter().map(|e| &e.firing_id).collect();
        let (succeeded, _) = split_batch(&ids, |i| events[i].outcome == Outcome::Succeeded);
        let mut done: Vec<Done> = succeeded
            .into_iter()
            .map(|i| Done {
                id: events[i].firing_id.to_string(),
                worker_id: events[i].worker_id.as_str(),
                output: events[i].output.as_deref(),
                event: i,
            })
            .collect();
        if done.is_empty() {
            return;
        }
        // Firing-id order, so concurrent batches lock in one order.
        done.sort_by(|a, b| a.id.cmp(&b.id));
        let sql = format!(
            "WITH succeeded AS ( \
                 UPDATE firings f SET state = 'succeeded', finished_at = $2, error = NULL, \
                     output = r.output \
                 FROM {} \
                 WHERE f.id = r.id AND f.state = 'executing' \
                     AND EXISTS (SELECT 1 FROM executing e \
                         WHERE e.firing_id = f.id AND e.worker_id = r.worker_id) \
                     AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.job_id = f.job_id) \
                     AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = f.job_id \
                         AND COALESCE(jsonb_array_length(j.spec::jsonb -> 'on_success'), 0) = 0) \
                 RETURNING f.id, f.job_id), \
             ended AS (DELETE FROM executing e USING succeeded s WHERE e.firing_id = s.id), \
             reset AS (UPDATE jobs SET consecutive_failures = 0 \
                 WHERE consecutive_failures <> 0 AND id IN (SELECT job_id FROM succeeded)) \
             SELECT id FROM succeeded",
            self.backend.json_rows(
                1,
                &[
                    ("id", Col::Text),
                    ("worker_id", Col::Text),
                    ("output", Col::Text)
                ]
            )
        );
        let body = match json_text(&done) {
            Ok(body) => body,
            Err(e) => {
                tracing::debug!(error = %e, "finish batch left to the transaction path");
                return;
            }
        };
        let succeeded: HashSet<String> = match sqlx::query_scalar(&sql)
            .bind(body)
            .bind(ms(now))
            .fetch_all(&self.lifecycle)
            .await
        {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                tracing::debug!(error = %e, "finish batch left to the transaction path");
                return;
            }
        };
        for row in done.iter().filter(|row| succeeded.contains(&row.id)) {
            applied[row.event] = Some(FinishOutcome {
                firing_id: events[row.event].firing_id.clone(),
                applied: true,
                state: Some(FiringState::Succeeded),
                retry: None,
                released: None,
                triggered: Vec::new(),
                alerts: Vec::new(),
            });
        }
    }

    /// Applies finished events in one transaction: the plain successes
    /// set-based, the rest one by one.
    async fn finish_in_transaction(
        &self,
        events: &[Finished],
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<Vec<FinishOutcome>, StoreError> {
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let ids: Vec<&FiringId> = events.iter().map(|e| &e.firing_id).collect();
            let rows = self.lock_batch(&mut tx, &ids).await?;
            let (plain, other) = split_batch(&ids, |i| {
                rows.get(ids[i])
                    .is_some_and(|row| row.plain_success(&events[i]))
            });
            let mut outcomes: Vec<Option<FinishOutcome>> = vec![None; events.len()];
            self.finish_plain(&mut tx, events, &plain, &rows, now, &mut outcomes)
                .await?;
            for i in other {
                outcomes[i] = Some(
                    self.finish_one(&mut tx, &events[i], now, retry_delay)
                        .await?,
                );
            }
            tx.commit().await?;
            Ok(outcomes.into_iter().flatten().collect())
        })
        .await
    }

    /// Applies the plain successes `plain` (indexes into `events`): one
    /// delete from `executing`, one update of `firings`, one of `jobs`.
    async fn finish_plain(
        &self,
        tx: &mut Tx,
        events: &[Finished],
        plain: &[usize],
        rows: &HashMap<FiringId, BatchRow>,
        now: DateTime<Utc>,
        outcomes: &mut [Option<FinishOutcome>],
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Succeeded<'a> {
            id: &'a str,
            job_id: &'a str,
            output: Option<&'a str>,
        }
        let mut done = Vec::with_capacity(plain.len());
        for &i in plain {
            let event = &events[i];
            if let Some(row) = rows.get(&event.firing_id) {
                done.push(Succeeded {
                    id: row.firing.text.as_str(),
                    job_id: row.firing.id.job_id.as_str(),
                    output: event.output.as_deref(),
                });
            }
        }
        if done.is_empty() {
            return Ok(());
        }
        // The firing locks hold the executing rows still; the worker matched.
        let delete = format!(
            "DELETE FROM executing WHERE firing_id IN (SELECT r.id FROM {}) RETURNING firing_id",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        let removed: HashSet<String> = sqlx::query_scalar(&delete)
            .bind(json_text(&done)?)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect();
        done.retain(|d| removed.contains(d.id));
        let batch = json_text(&done)?;
        let update = format!(
            "UPDATE firings SET state = 'succeeded', finished_at = $2, error = NULL, \
                 output = r.output \
             FROM {} WHERE firings.id = r.id",
            self.backend
                .json_rows(1, &[("id", Col::Text), ("output", Col::Text)])
        );
        sqlx::query(&update)
            .bind(batch.as_str())
            .bind(ms(now))
            .execute(&mut **tx)
            .await?;
        let reset = format!(
            "UPDATE jobs SET consecutive_failures = 0 \
             WHERE consecutive_failures <> 0 AND id IN (SELECT r.job_id FROM {})",
            self.backend.json_rows(1, &[("job_id", Col::Text)])
        );
        sqlx::query(&reset)
            .bind(batch.as_str())
            .execute(&mut **tx)
            .await?;
        for &i in plain {
            let event = &events[i];
            let applied = rows
                .get(&event.firing_id)
                .is_some_and(|row| removed.contains(&row.firing.text));
            outcomes[i] = Some(FinishOutcome {
                firing_id: event.firing_id.clone(),
                applied,
                state: rows.get(&event.firing_id).map(|row| {
                    if applied {
                        FiringState::Succeeded
                    } else {
                        row.firing.state
                    }
                }),
                retry: None,
                released: None,
                triggered: Vec::new(),
                alerts: Vec::new(),
            });
        }
        Ok(())
    }

    async fn finish_one(
        &self,
        tx: &mut Tx,
        event: &Finished,
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<FinishOutcome, StoreError> {
        let mut outcome = FinishOutcome {
            firing_id: event.firing_id.clone(),
            applied: false,
            state: None,
            retry: None,
            released: None,
            triggered: Vec::new(),
            alerts: Vec::new(),
        };
        let Some(firing) = self.lock_firing(tx, &event.firing_id).await? else {
            return Ok(outcome);
        };
        outcome.state = Some(firing.state);
        let id = firing.text.as_str();
        let removed = sqlx::query("DELETE FROM executing WHERE firing_id = $1 AND worker_id = $2")
            .bind(id)
            .bind(event.worker_id.as_str())
            .execute(&mut **tx)
            .await?;
        if removed.rows_affected() == 0 {
            return Ok(outcome);
        }
        outcome.applied = true;

        let detail = event.error.as_deref().filter(|e| !e.is_empty());
        let (state, error) = match event.outcome {
            Outcome::Succeeded => (FiringState::Succeeded, None),
            Outcome::Failed => (
                FiringState::Failed,
                Some(detail.unwrap_or("failed").to_string()),
            ),
            Outcome::TimedOut => (
                FiringState::Failed,
                Some(match detail {
                    Some(d) => format!("timed out: {d}"),
                    None => "timed out".to_string(),
                }),
            ),
            Outcome::Cancelled => (
                FiringState::Cancelled,
                Some(detail.unwrap_or("cancelled").to_string()),
            ),
        };
        outcome.state = Some(state);
        sqlx::query(
            "UPDATE firings SET state = $2, finished_at = $3, error = $4, output = $5 WHERE id = $1",
        )
        .bind(id)
        .bind(state.as_str())
        .bind(ms(now))
        .bind(error.as_deref())
        .bind(event.output.as_deref())
        .execute(&mut **tx)
        .await?;

        let job_id = firing.id.job_id.as_str();
        let job = self.read_job(tx, job_id, false).await?;
        if state == FiringState::Failed {
            let policy = job.as_ref().map(|j| &j.spec.retry);
            let due = policy
                .filter(|p| firing.id.attempt < p.max_attempts)
                .and_then(|p| retry_due(now, retry_delay(p, firing.id.attempt)));
            match due {
                Some(due) => {
                    let next = self.stage_retry(tx, &firing.id, due, now).await?;
                    outcome.retry = Some((next, due));
                }
                None => {
                    let error = error.as_deref().unwrap_or("failed");
                    outcome.alerts.push(Alert {
                        kind: AlertKind::FiringFailed,
                        job_id: job_id.to_string(),
                        group: firing.group.clone(),
                        firing_id: Some(firing.id.clone()),
                        message: format!(
                            "firing {id} failed after {} attempt(s): {error}",
                            firing.id.attempt
                        ),
                        at: now,
                        consecutive_failures: None,
                        paused: false,
                    });
                    if let Some(job) = job {
                        if let Some(alert) = self.count_failure(tx, job, &firing, now).await? {
                            outcome.alerts.push(alert);
                        }
                    }
                }
            }
        } else if state == FiringState::Succeeded && job.is_some() {
            sqlx::query(
                "UPDATE jobs SET consecutive_failures = 0 WHERE id = $1 AND consecutive_failures <> 0",
            )
            .bind(job_id)
            .execute(&mut **tx)
            .await?;
            let on_success = job.map(|j| j.spec.on_success).unwrap_or_default();
            for target in &on_success {
                if let Some(triggered) = self.trigger_in(tx, target, None, ms(now)).await? {
                    outcome.triggered.push(triggered);
                }
            }
        }
        outcome.released = self.release_queued(tx, job_id, ms(now)).await?;
        Ok(outcome)
    }

    /// Stages the attempt after `failed`: same instant, payload, priority,
    /// handler and timeout, unadopted, due at `due`.
    async fn stage_retry(
        &self,
        tx: &mut Tx,
        failed: &FiringId,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<FiringId, StoreError> {
        let next = failed.next_attempt();
        let id = next.to_string();
        let group: Option<String> = sqlx::query_scalar(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, handler, \
                 payload, timeout_ms, due_at, state, created_at) \
             SELECT $1, job_id, scheduled_at, attempt + 1, group_name, priority, handler, payload, \
                 timeout_ms, $3, 'staged', $4 \
             FROM firings WHERE id = $2 ON CONFLICT DO NOTHING RETURNING group_name",
        )
        .bind(id.as_str())
        .bind(failed.to_string())
        .bind(ms(due))
        .bind(ms(now))
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(group) = group {
            let waiting = Waiting {
                id: &id,
                group_name: &group,
                part: self.partition_of(&failed.job_id),
                due_at: ms(due),
                slice: None,
            };
            self.add_waiting(tx, &[waiting]).await?;
        }
        Ok(next)
    }

    /// Counts a firing that failed for good against its job; at
    /// `alert_after_failures` in a row, alerts (and pauses the job if asked).
    async fn count_failure(
        &self,
        tx: &mut Tx,
        job: JobRow,
        firing: &FiringRow,
        now: DateTime<Utc>,
    ) -> Result<Option<Alert>, StoreError> {
        let job_id = firing.id.job_id.as_str();
        let failures: i64 = sqlx::query_scalar(
            "UPDATE jobs SET consecutive_failures = consecutive_failures + 1 WHERE id = $1 \
             RETURNING consecutive_failures",
        )
        .bind(job_id)
        .fetch_one(&mut **tx)
        .await?;
        let Some(threshold) = job.spec.alert_after_failures else {
            return Ok(None);
        };
        if failures != i64::from(threshold) {
            return Ok(None);
        }
        let mut pause = false;
        if job.spec.pause_after_alert {
            // Re-read under a lock, so a concurrent put is not overwritten.
            if let Some(current) = self.read_job(tx, job_id, true).await? {
                if current.state == JobState::Active && current.spec.pause_after_alert {
                    let mut spec = current.spec;
                    spec.paused = true;
                    write_spec_and_state(tx, &spec, JobState::Paused, ms(now)).await?;
                    pause = true;
                }
            }
        }
        Ok(Some(Alert {
            kind: AlertKind::RepeatedFailures,
            job_id: job_id.to_string(),
            group: job.spec.group.clone(),
            firing_id: Some(firing.id.clone()),
            message: format!(
                "job {job_id} failed {failures} times in a row{}",
                if pause { "; it was paused" } else { "" }
            ),
            at: now,
            consecutive_failures: Some(threshold),
            paused: pause,
        }))
    }

    /// Releases the job's queued firing if none of its firings still runs:
    /// staged again, unadopted, due now, with the next publish sequence.
    async fn release_queued(
        &self,
        tx: &mut Tx,
        job_id: &str,
        now: i64,
    ) -> Result<Option<FiringId>, StoreError> {
        let Some(queued) =
            sqlx::query_scalar::<_, String>("SELECT firing_id FROM pending WHERE job_id = $1")
                .bind(job_id)
                .fetch_optional(&mut **tx)
                .await?
        else {
            return Ok(None);
        };
        let running: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM executing WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(&mut **tx)
            .await?;
        if running > 0 {
            return Ok(None);
        }
        sqlx::query("DELETE FROM pending WHERE job_id = $1")
            .bind(job_id)
            .execute(&mut **tx)
            .await?;
        let released = sqlx::query(
            "UPDATE firings SET state = 'staged', due_at = $2, publish_seq = publish_seq + 1 \
             WHERE id = $1 AND state IN ('staged', 'published')",
        )
        .bind(queued.as_str())
        .bind(now)
        .execute(&mut **tx)
        .await?;
        if released.rows_affected() == 0 {
            return Ok(None);
        }
        // Unadopted again: the next slice of its partition publishes it.
        sqlx::query(
            "UPDATE waiting SET slice = NULL, due_at = $2, published_at = NULL \
             WHERE firing_id = $1",
        )
        .bind(queued.as_str())
        .bind(now)
        .execute(&mut **tx)
        .await?;
        match rows::firing_id(&queued) {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                tracing::error!(error = %e, "released a queued firing whose id is corrupt");
                Ok(None)
            }
        }
    }

    /// Executing rows, earliest deadline first. Corrupt rows are logged and
    /// left out.
    pub async fn executing(&self, limit: u32) -> Result<Vec<ExecutingRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {EXECUTING_COLUMNS} FROM executing ORDER BY deadline_at, firing_id LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            match rows::executing(row) {
                Ok(e) => out.push(e),
                Err(e) => tracing::error!(error = %e, "executing row is corrupt; skipped"),
            }
        }
        Ok(out)
    }

    /// Gives up on a running attempt (its worker vanished or its deadline
    /// passed), atomically and once: only if `row` is still the firing's
    /// executing row. The attempt ends `lost` with `reason`; the next attempt
    /// is staged while the retry policy allows, else a `firing_lost` alert.
    /// A lost firing does not count towards `alert_after_failures`.
    pub async fn requeue(
        &self,
        row: &ExecutingRow,
        reason: &str,
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<Option<RequeueOutcome>, StoreError> {
        let now = truncate(now);
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let outcome = self
                .requeue_in(&mut tx, row, reason, now, retry_delay)
                .await?;
            if outcome.is_some() {
                tx.commit().await?;
            }
            Ok(outcome)
        })
        .await
    }

    async fn requeue_in(
        &self,
        tx: &mut Tx,
        row: &ExecutingRow,
        reason: &str,
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<Option<RequeueOutcome>, StoreError> {
        let Some(firing) = self.lock_firing(tx, &row.firing_id).await? else {
            // No readable firing row: still clear the executing row once.
            let removed =
                sqlx::query("DELETE FROM executing WHERE firing_id = $1 AND worker_id = $2")
                    .bind(row.firing_id.to_string())
                    .bind(row.worker_id.as_str())
                    .execute(&mut **tx)
                    .await?;
            return Ok((removed.rows_affected() > 0).then(|| RequeueOutcome {
                lost: row.firing_id.clone(),
                retry: None,
                released: None,
                alert: None,
            }));
        };
        let id = firing.text.as_str();
        let removed = sqlx::query("DELETE FROM executing WHERE firing_id = $1 AND worker_id = $2")
            .bind(id)
            .bind(row.worker_id.as_str())
            .execute(&mut **tx)
            .await?;
        if removed.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query(
            "UPDATE firings SET state = 'lost', error = $2, finished_at = $3 WHERE id = $1",
        )
        .bind(id)
        .bind(reason)
        .bind(ms(now))
        .execute(&mut **tx)
        .await?;
        let job_id = firing.id.job_id.as_str();
        let job = self.read_job(tx, job_id, false).await?;
        let mut outcome = RequeueOutcome {
            lost: firing.id.clone(),
            retry: None,
            released: None,
            alert: None,
        };
        let due = job
            .as_ref()
            .map(|j| &j.spec.retry)
            .filter(|p| firing.id.attempt < p.max_attempts)
            .and_then(|p| retry_due(now, retry_delay(p, firing.id.attempt)));
        match due {
            Some(due) => {
                let next = self.stage_retry(tx, &firing.id, due, now).await?;
                outcome.retry = Some((next, due));
            }
            None => {
                outcome.alert = Some(Alert {
                    kind: AlertKind::FiringLost,
                    job_id: job_id.to_string(),
                    group: firing.group.clone(),
                    firing_id: Some(firing.id.clone()),
                    message: format!(
                        "firing {id} was lost after {} attempt(s): {reason}",
                        firing.id.attempt
                    ),
                    at: now,
                    consecutive_failures: None,
                    paused: false,
                });
            }
        }
        outcome.released = self.release_queued(tx, job_id, ms(now)).await?;
        Ok(Some(outcome))
    }

    /// Published firings no worker started, published before
    /// `published_before`, oldest first (queued ones excluded: they wait on
    /// purpose). Corrupt rows are logged and left out.
    pub async fn unstarted(
        &self,
        published_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Firing>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {FIRING_COLUMNS} FROM firings WHERE id IN ( \
                 SELECT w.firing_id FROM waiting w \
                 WHERE w.published_at IS NOT NULL AND w.published_at < $1 \
                     AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.firing_id = w.firing_id) \
                 ORDER BY w.published_at, w.firing_id LIMIT $2) \
             ORDER BY published_at, id"
        ))
        .bind(ms(published_before))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            match rows::firing(row) {
                Ok(f) => out.push(f),
                Err(e) => tracing::error!(error = %e, "published firing is corrupt; skipped"),
            }
        }
        Ok(out)
    }
}

/// Fills in the items `decided` leaves open with `decide_rest` (called
/// with those items, in order, only if there are any) and returns every
/// item's answer in order: the fast path's answers and the transaction
/// path's merged back.
async fn complete<T: Clone, R, Fut>(
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
fn split_batch(ids: &[&FiringId], is_plain: impl Fn(usize) -> bool) -> (Vec<usize>, Vec<usize>) {
    let mut seen = HashSet::new();
    let repeated: HashSet<&FiringId> = ids.iter().copied().filter(|id| !seen.insert(*id)).collect();
    let (plain, mut other): (Vec<usize>, Vec<usize>) =
        (0..ids.len()).partition(|&i| !repeated.contains(ids[i]) && is_plain(i));
    other.sort_by(|&a, &b| ids[a].cmp(ids[b]));
    (plain, other)
}
