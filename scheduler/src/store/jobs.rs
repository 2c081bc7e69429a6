//! Job definitions: put, get, list, delete, trigger (pause and resume are
//! in `pause.rs`).

use super::audience::shares;
use super::dialect::Backend;
use super::error::StoreError;
use super::handle::Store;
use super::listing::{page_of, Conditions};
use super::locks::Tx;
use super::rows::{self, JOB_COLUMNS, JOB_TABLES};
use super::schedule::{compile, job_schedule, next_ms};
use super::selection::selector_condition;
use super::stage::NewFiring;
use super::states::{sources_sql, Transition};
use super::types::{Deleted, JobFilter, Page};
use super::values::{at_ms, ms, truncate, RowExt};
use super::waiting::Waiting;
use chime_common::api::page_limit;
use chime_common::schedule::{Schedule, ScheduleSpec};
use chime_common::traceparent::TraceParent;
use chime_common::{FiringId, FiringState, Job, JobSpec, JobState};
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::{Any, Transaction};

/// Distinct `group_name` of `jobs`, one index step per group (a loose index
/// scan on `jobs_group_created`), so a million jobs in ten groups cost ten
/// lookups.
const JOB_GROUPS: &str = "WITH RECURSIVE g(name) AS ( \
     SELECT MIN(group_name) FROM jobs \
     UNION ALL \
     SELECT (SELECT MIN(group_name) FROM jobs WHERE group_name > g.name) FROM g WHERE g.name IS NOT NULL \
   ) SELECT name FROM g WHERE name IS NOT NULL";

/// The spec as stored.
pub(crate) fn spec_text(spec: &JobSpec) -> Result<String, StoreError> {
    serde_json::to_string(&spec.to_json())
        .map_err(|e| StoreError::Internal(format!("encoding job {:?}: {e}", spec.id)))
}

/// A `jobs.list` cursor: `<created ms>:<id>`.
fn job_cursor(job: &Job) -> String {
    format!("{}:{}", ms(job.created_at), job.spec.id)
}

fn parse_job_cursor(cursor: &str) -> Result<(i64, String), StoreError> {
    cursor
        .split_once(':')
        .and_then(|(created, id)| Some((created.parse().ok()?, id.to_string())))
        .ok_or_else(|| {
            StoreError::invalid("after", "is not a cursor from a previous jobs.list reply")
        })
}

/// The `jobs.max_concurrent` column: the job's own limit on running
/// firings, `None` when it has none (`overlap: allow` without
/// `max_concurrent`), which is what lets a start skip the policy decision.
fn max_concurrent_column(spec: &JobSpec) -> Option<i64> {
    spec.concurrency.limit(spec.overlap).map(i64::from)
}

/// 1 if a success of the job triggers no job (no `on_success`), else 0:
/// the statements below then stamp `jobs.no_on_success_version` with the
/// version they write, which is what lets a finish skip reading the spec.
fn triggers_nothing(spec: &JobSpec) -> i64 {
    i64::from(spec.on_success.is_empty())
}

/// 1 if the job has no `max_lateness`, else 0: the statements below then
/// stamp `jobs.no_max_lateness_version` with the version they write, which
/// is what lets a start skip reading the spec (`lateness.rs`).
fn never_late(spec: &JobSpec) -> i64 {
    i64::from(spec.time.max_lateness.is_none())
}

/// A statement with its parameters bound so far.
type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

/// The `jobs` half of a put: `$1` id, `$2` group, `$3` spec, `$4` now, `$5`
/// overlap, `$6` max_concurrent, `$7` [`triggers_nothing`], `$8`
/// [`never_late`], `$9` the trace its firings keep (a one-shot job
/// submitted with one; NULL for any other put, which clears it). A replace
/// keeps `created_at` and bumps `version`.
pub(crate) const UPSERT_JOB: &str = "INSERT INTO jobs (id, group_name, spec, anchor_ms, version, \
         consecutive_failures, created_at, updated_at, overlap, max_concurrent, \
         no_on_success_version, no_max_lateness_version, traceparent) \
     VALUES ($1, $2, $3, $4, 1, 0, $4, $4, $5, $6, CASE WHEN $7 = 1 THEN 1 END, \
         CASE WHEN $8 = 1 THEN 1 END, $9) \
     ON CONFLICT (id) DO UPDATE SET group_name = excluded.group_name, spec = excluded.spec, \
         traceparent = excluded.traceparent, \
         overlap = excluded.overlap, max_concurrent = excluded.max_concurrent, \
         no_on_success_version = CASE WHEN excluded.no_on_success_version IS NOT NULL \
             THEN jobs.version + 1 END, \
         no_max_lateness_version = CASE WHEN excluded.no_max_lateness_version IS NOT NULL \
             THEN jobs.version + 1 END, \
         anchor_ms = excluded.anchor_ms, \
         version = jobs.version + 1, updated_at = excluded.updated_at \
     RETURNING version, created_at";

/// The `job_schedule` half of a put: `$1` id, `$10` partition, `$11` state,
/// `$12` next instant (numbered after [`UPSERT_JOB`]'s, so PostgreSQL can run
/// both as one statement).
pub(crate) const UPSERT_SCHEDULE: &str =
    "INSERT INTO job_schedule (job_id, part, state, next_fire_at) \
     VALUES ($1, $10, $11, $12) \
     ON CONFLICT (job_id) DO UPDATE SET part = excluded.part, state = excluded.state, \
         next_fire_at = excluded.next_fire_at, \
         paused_until = CASE WHEN excluded.state = 'paused' THEN job_schedule.paused_until END";

/// [`UPSERT_JOB`]'s insert for a put with `if_version: 0`: no row comes
/// back when the job exists.
const INSERT_JOB_IF_ABSENT: &str = "INSERT INTO jobs (id, group_name, spec, anchor_ms, version, \
         consecutive_failures, created_at, updated_at, overlap, max_concurrent, \
         no_on_success_version, no_max_lateness_version, traceparent) \
     VALUES ($1, $2, $3, $4, 1, 0, $4, $4, $5, $6, CASE WHEN $7 = 1 THEN 1 END, \
         CASE WHEN $8 = 1 THEN 1 END, $9) \
     ON CONFLICT (id) DO NOTHING \
     RETURNING version, created_at";

/// [`UPSERT_JOB`]'s replace for a put with `if_version: $10`: no row comes
/// back unless the stored job has that version.
const UPDATE_JOB_IF_VERSION: &str = "UPDATE jobs SET group_name = $2, spec = $3, overlap = $5, \
         max_concurrent = $6, no_on_success_version = CASE WHEN $7 = 1 THEN version + 1 END, \
         no_max_lateness_version = CASE WHEN $8 = 1 THEN version + 1 END, \
         anchor_ms = $4, version = version + 1, updated_at = $4, traceparent = $9 \
     WHERE id = $1 AND version = $10 \
     RETURNING version, created_at";

/// [`UPSERT_SCHEDULE`] as a statement of its own (parameters from `$1`).
const UPSERT_SCHEDULE_ALONE: &str = "INSERT INTO job_schedule (job_id, part, state, next_fire_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (job_id) DO UPDATE SET part = excluded.part, state = excluded.state, \
         next_fire_at = excluded.next_fire_at, \
         paused_until = CASE WHEN excluded.state = 'paused' THEN job_schedule.paused_until END";

/// The parameters of a put's two upserts.
pub(crate) struct Put<'a> {
    spec: &'a JobSpec,
    text: &'a str,
    now_ms: i64,
    partition: i64,
    state: &'static str,
    next: Option<i64>,
    /// The `traceparent` column (see [`UPSERT_JOB`]).
    traceparent: Option<String>,
}

impl<'a> Put<'a> {
    /// Binds [`UPSERT_JOB`]'s parameters.
    pub(crate) fn bind_job<'q>(&self, query: AnyQuery<'q>) -> AnyQuery<'q>
    where
        'a: 'q,
    {
        query
            .bind(self.spec.id.as_str())
            .bind(self.spec.group.as_str())
            .bind(self.text)
            .bind(self.now_ms)
            .bind(self.spec.overlap.as_str())
            .bind(max_concurrent_column(self.spec))
            .bind(triggers_nothing(self.spec))
            .bind(never_late(self.spec))
            .bind(self.traceparent.clone())
    }

    /// Binds [`UPSERT_SCHEDULE_ALONE`]'s parameters.
    fn bind_schedule<'q>(&self, query: AnyQuery<'q>) -> AnyQuery<'q>
    where
        'a: 'q,
    {
        query
            .bind(self.spec.id.as_str())
            .bind(self.partition)
            .bind(self.state)
            .bind(self.next)
    }

    /// Binds [`UPSERT_JOB`]'s and [`UPSERT_SCHEDULE`]'s parameters.
    pub(crate) fn bind_all<'q>(&self, query: AnyQuery<'q>) -> AnyQuery<'q>
    where
        'a: 'q,
    {
        self.bind_job(query)
            .bind(self.partition)
            .bind(self.state)
            .bind(self.next)
    }
}

impl Store {
    /// The groups that have at least one job.
    pub async fn job_groups(&self) -> Result<std::collections::BTreeSet<String>, StoreError> {
        let names: Vec<String> = sqlx::query_scalar(JOB_GROUPS).fetch_all(&self.read).await?;
        Ok(names.into_iter().collect())
    }

    /// Inserts or replaces a job (a replace keeps `created_at` and bumps
    /// `version`). The job is anchored at `now`; its next instant is the
    /// first strictly after `now`. It is `paused` if the spec says so,
    /// `completed` if the schedule has no further instant, else `active`.
    pub async fn put_job(&self, spec: &JobSpec, now: DateTime<Utc>) -> Result<Job, StoreError> {
        self.put_job_if(spec, None, now).await
    }

    /// [`Store::put_job`] on a condition (the put's `if_version`): with
    /// `Some(0)` only if the job does not exist, with `Some(n)` only if the
    /// stored job has version `n`; else [`StoreError::Conflict`] and
    /// nothing changes. The condition is checked by the statement that
    /// writes, so of two puts made against the same version one wins.
    pub async fn put_job_if(
        &self,
        spec: &JobSpec,
        if_version: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Job, StoreError> {
        self.put_job_in_trace(spec, if_version, None, now).await
    }

    /// [`Store::put_job_if`] for a put that carries a trace (a submission's
    /// `traceparent`): a one-shot (`at`) job's firings keep it; any other
    /// job's firings start traces of their own, so it is not stored. Every
    /// put clears the trace a previous one stored.
    pub async fn put_job_in_trace(
        &self,
        spec: &JobSpec,
        if_version: Option<i64>,
        traceparent: Option<&TraceParent>,
        now: DateTime<Utc>,
    ) -> Result<Job, StoreError> {
        let traceparent = traceparent
            .filter(|_| matches!(spec.schedule, ScheduleSpec::At { .. }))
            .map(TraceParent::to_string);
        let now = truncate(now);
        let now_ms = ms(now);
        let schedule = job_schedule(spec, now).map_err(StoreError::Invalid)?;
        self.check_no_cycle(spec).await?;
        self.check_calendars_exist(spec).await?;
        let next = first_instant(spec, &schedule, now_ms);
        let state = if spec.paused {
            JobState::Paused
        } else {
            unpaused_state(spec, next)
        };
        let text = spec_text(spec)?;
        let partition = i64::from(self.partition_of(&spec.id));
        let put = Put {
            spec,
            text: &text,
            now_ms,
            partition,
            state: state.as_str(),
            next,
            traceparent,
        };
        let row = match if_version {
            // A fan-in's rows are written with it, in one transaction.
            None if spec.schedule.is_fan_in() => self
                .retrying(|| self.put_job_on_condition(&put, None))
                .await?
                .ok_or_else(|| StoreError::Internal("an unconditional put wrote nothing".into()))?,
            None => {
                let row = self.retrying(|| self.upsert_job(&put)).await?;
                // Left over from when it was a fan-in, if it was: never
                // counted (finish reads the spec), but kept out of the way of
                // the set-based success paths and the cycle check.
                self.retrying(|| self.forget_fan_in(&spec.id)).await?;
                row
            }
            Some(expected) => {
                let written = self
                    .retrying(|| self.put_job_on_condition(&put, Some(expected)))
                    .await?;
                match written {
                    Some(row) => row,
                    None => return Err(self.version_conflict(&spec.id, expected).await),
                }
            }
        };
        // A put that keeps the job paused keeps its maintenance window
        // (an apply during one must not make it endless); any other ends it.
        let paused_until = if spec.paused {
            let until: Option<Option<i64>> =
                sqlx::query_scalar("SELECT paused_until FROM job_schedule WHERE job_id = $1")
                    .bind(spec.id.as_str())
                    .fetch_optional(&self.write)
                    .await?;
            until
                .flatten()
                .map(|ms| super::values::instant(&spec.id, "paused_until", ms))
                .transpose()?
        } else {
            None
        };
        let created_ms = row.int(&spec.id, "created_at")?;
        let mut job = [Job {
            spec: spec.clone(),
            state,
            next_fire_at: next.map(at_ms),
            paused_until,
            version: row.int(&spec.id, "version")?,
            created_at: super::values::instant(&spec.id, "created_at", created_ms)?,
            updated_at: now,
            upstream_missing: Vec::new(),
            last_success_at: None,
        }];
        self.mark_upstream_missing(&mut job).await?;
        let [job] = job;
        Ok(job)
    }

    /// Both halves of a put and its fan-in rows in one transaction; with
    /// `Some(expected)`, only if the stored job has version `expected` (0:
    /// if there is none): `None`, and nothing written, if not.
    async fn put_job_on_condition(
        &self,
        put: &Put<'_>,
        expected: Option<i64>,
    ) -> Result<Option<AnyRow>, StoreError> {
        let mut tx = self.begin().await?;
        let row = match expected {
            None => Some(
                put.bind_job(sqlx::query(UPSERT_JOB))
                    .fetch_one(&mut *tx)
                    .await?,
            ),
            Some(0) => {
                put.bind_job(sqlx::query(INSERT_JOB_IF_ABSENT))
                    .fetch_optional(&mut *tx)
                    .await?
            }
            Some(expected) => {
                put.bind_job(sqlx::query(UPDATE_JOB_IF_VERSION))
                    .bind(expected)
                    .fetch_optional(&mut *tx)
                    .await?
            }
        };
        let Some(row) = row else {
            return Ok(None);
        };
        put.bind_schedule(sqlx::query(UPSERT_SCHEDULE_ALONE))
            .execute(&mut *tx)
            .await?;
        self.replace_fan_in(&mut tx, put.spec).await?;
        tx.commit().await?;
        Ok(Some(row))
    }

    /// The conflict of a put whose `if_version` is not the stored version.
    async fn version_conflict(&self, id: &str, expected: i64) -> StoreError {
        let stored: Result<Option<i64>, _> =
            sqlx::query_scalar("SELECT version FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.read)
                .await;
        let found = match stored {
            Ok(Some(version)) => format!("job {id:?} is at version {version}"),
            Ok(None) => format!("job {id:?} does not exist"),
            Err(e) => return e.into(),
        };
        StoreError::Conflict(format!(
            "if_version: {found}, not {expected}; it changed since it was read (get it again)"
        ))
    }

    /// The job, if it exists.
    pub async fn get_job(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_TABLES} WHERE j.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.read)
        .await?;
        let Some(job) = row.as_ref().map(rows::job).transpose()? else {
            return Ok(None);
        };
        let mut job = [job];
        self.mark_upstream_missing(&mut job).await?;
        let [job] = job;
        Ok(Some(job))
    }

    /// One page of jobs, newest first (`created_at`, then id, descending),
    /// of those the filter's group, state and selector choose.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Page<Job>, StoreError> {
        let limit = page_limit(filter.limit);
        let after = filter.after.as_deref().map(parse_job_cursor).transpose()?;
        let mut conditions = Conditions::default();
        if let Some(group) = &filter.group {
            let group = conditions.param(group.as_str());
            conditions.push(format!("j.group_name = {group}"));
        }
        if let Some(state) = filter.state {
            let state = conditions.param(state.as_str());
            conditions.push(format!("s.state = {state}"));
        }
        if let Some((created, id)) = &after {
            let (created, id) = (conditions.param(*created), conditions.param(id.as_str()));
            conditions.push(format!("(j.created_at, j.id) < ({created}, {id})"));
        }
        if let Some(selector) = &filter.selector {
            let selected = selector_condition(self.backend, selector, &mut conditions);
            conditions.push(selected);
        }
        let limit_param = conditions.param(i64::from(limit) + 1);
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_TABLES} {} \
             ORDER BY j.created_at DESC, j.id DESC LIMIT {limit_param}",
            conditions.where_clause()
        );
        let rows = conditions
            .bind(sqlx::query(&sql))
            .fetch_all(&self.read)
            .await?;
        let mut items = rows.iter().map(rows::job).collect::<Result<Vec<_>, _>>()?;
        self.mark_upstream_missing(&mut items).await?;
        Ok(page_of(items, limit, job_cursor))
    }

    /// Deletes a job. Its staged and published firings become `cancelled`
    /// ("job deleted"), a queued one included; its executing firings are
    /// returned to be cancelled on their workers (their rows stay until the
    /// workers report). History is kept. A job whose stored row is corrupt is
    /// not deleted (put a valid spec over it first).
    pub async fn delete_job(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Deleted>, StoreError> {
        let now_ms = ms(now);
        self.retrying(|| self.delete_job_once(id, now_ms)).await
    }

    async fn delete_job_once(&self, id: &str, now_ms: i64) -> Result<Option<Deleted>, StoreError> {
        let mut tx = self.begin().await?;
        let Some(job) = self.lock_job(&mut tx, id).await? else {
            return Ok(None);
        };
        sqlx::query("DELETE FROM job_schedule WHERE job_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM jobs WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        // Its freshness gauges go with it (`outcomes.rs`).
        sqlx::query("DELETE FROM job_outcomes WHERE job_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        // Its own fan-in rows; those of jobs waiting for it stay, and it
        // shows in their `upstream_missing`.
        sqlx::query("DELETE FROM fan_in WHERE job_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let cancelled: Vec<String> = sqlx::query_scalar(&format!(
            "UPDATE firings SET state = 'cancelled', error = 'job deleted', finished_at = $2 \
                 WHERE job_id = $1 AND state IN {} RETURNING id",
            sources_sql(Transition::Cancel)
        ))
        .bind(id)
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await?;
        self.remove_waiting(&mut tx, &cancelled).await?;
        self.unhold_job(&mut tx, id).await?;
        let cancel = self.running_firings(&mut tx, id, "").await?;
        tx.commit().await?;
        Ok(Some(Deleted { job, cancel }))
    }

    /// Reads and locks a job.
    pub(super) async fn lock_job(&self, tx: &mut Tx, id: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_TABLES} WHERE j.id = $1{}",
            self.backend.for_update_of("j")
        ))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
        row.as_ref().map(rows::job).transpose()
    }

    /// Stages one run of a job now, outside its schedule: attempt 1 at the
    /// current millisecond (or the next one free that is not an instant of
    /// the schedule), unadopted, due now. `payload` replaces the job's for
    /// this run. `None` if there is no such job.
    pub async fn trigger(
        &self,
        job_id: &str,
        payload: Option<serde_json::Value>,
        now: DateTime<Utc>,
    ) -> Result<Option<FiringId>, StoreError> {
        self.trigger_in_trace(job_id, payload, None, now).await
    }

    /// [`Store::trigger`] whose firings keep `traceparent` (every attempt
    /// and shard of the run): their spans and messages are in its trace.
    pub async fn trigger_in_trace(
        &self,
        job_id: &str,
        payload: Option<serde_json::Value>,
        traceparent: Option<&TraceParent>,
        now: DateTime<Utc>,
    ) -> Result<Option<FiringId>, StoreError> {
        if let Some(payload) = &payload {
            let size = serde_json::to_vec(payload)
                .map(|v| v.len())
                .unwrap_or(usize::MAX);
            if size > self.limits.max_payload_bytes {
                return Err(StoreError::invalid(
                    "payload",
                    format!(
                        "is {size} bytes encoded; the limit is {} bytes",
                        self.limits.max_payload_bytes
                    ),
                ));
            }
        }
        let now_ms = ms(now);
        let traceparent = traceparent.map(TraceParent::to_string);
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let id = self
                .trigger_in(
                    &mut tx,
                    job_id,
                    payload.as_ref(),
                    traceparent.as_deref(),
                    now_ms,
                )
                .await?;
            tx.commit().await?;
            Ok(id)
        })
        .await
    }

    /// [`Store::trigger`] inside a transaction (also used for `on_success`
    /// and fan-in, whose firings start traces of their own).
    pub(crate) async fn trigger_in(
        &self,
        tx: &mut Transaction<'static, Any>,
        job_id: &str,
        payload: Option<&serde_json::Value>,
        traceparent: Option<&str>,
        now_ms: i64,
    ) -> Result<Option<FiringId>, StoreError> {
        let Some(row) = sqlx::query("SELECT spec, anchor_ms FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(&mut **tx)
            .await?
        else {
            return Ok(None);
        };
        let spec = rows::spec(job_id, &row.text(job_id, "spec")?)?;
        let schedule = compile(&spec, row.int(job_id, "anchor_ms")?).ok();
        let is_instant = |t: i64| {
            schedule
                .as_ref()
                .is_some_and(|s| next_ms(s, t - 1) == Some(t))
        };
        let payload = serde_json::to_string(payload.unwrap_or(&spec.payload))
            .map_err(|e| StoreError::Internal(format!("encoding a payload: {e}")))?;
        // A triggered run takes a millisecond of its own: never one already
        // used by this job, nor one of the schedule's instants (which the
        // slicer would then find taken and not fire).
        const WINDOW: i64 = 1000;
        for _ in 0..10 {
            let taken: Vec<i64> = sqlx::query_scalar(
                "SELECT scheduled_at FROM firings \
                 WHERE job_id = $1 AND attempt = 1 AND scheduled_at >= $2 AND scheduled_at < $3",
            )
            .bind(job_id)
            .bind(now_ms)
            .bind(now_ms + WINDOW)
            .fetch_all(&mut **tx)
            .await?;
            let Some(at) =
                (now_ms..now_ms + WINDOW).find(|t| !taken.contains(t) && !is_instant(*t))
            else {
                break;
            };
            // A sharded job's trigger runs every shard, a broadcast's goes to
            // every live worker; the reply names the first.
            let audiences = self.audiences();
            let shares = shares(&spec.concurrency, audiences.of_group(&spec.group));
            let first = NewFiring {
                id: FiringId::new(job_id, at, 1).to_string(),
                job_id,
                scheduled_at: at,
                attempt: 1,
                group_name: &spec.group,
                priority: spec.priority,
                handler: &spec.handler,
                payload: &payload,
                timeout_ms: i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX),
                due_at: now_ms,
                state: FiringState::Staged.as_str(),
                error: None,
                finished_at: None,
                backfill: 0,
                shard: 0,
                shards: 1,
                traceparent,
                worker_id: None,
                guard: None,
            };
            let firings: Vec<NewFiring> = first.shared(&shares, now_ms);
            let id: FiringId = firings[0]
                .id
                .parse()
                .map_err(|e| StoreError::Internal(format!("a firing id of its own: {e}")))?;
            let inserted = self.insert_firings(tx, &firings, now_ms).await?;
            if inserted.is_empty() {
                continue;
            }
            let part = self.partition_of(job_id);
            // A broadcast with no worker to go to inserted a skipped firing.
            let waiting: Vec<Waiting> = firings
                .iter()
                .filter(|f| f.state == FiringState::Staged.as_str() && inserted.contains(&f.id))
                .map(|f| Waiting {
                    id: &f.id,
                    group_name: &spec.group,
                    part,
                    due_at: now_ms,
                    slice: None,
                })
                .collect();
            self.add_waiting(tx, &waiting).await?;
            return Ok(Some(id));
        }
        Err(StoreError::Conflict(format!(
            "job {job_id:?} was triggered too often this second; try again"
        )))
    }
}

/// The first instant a put schedules: the schedule's first after `now_ms`,
/// except that a one-shot `at` put shortly after its time still fires,
/// late. A client whose batch of puts took a few seconds, or a deploy that
/// applied its files a moment late, must not lose one-shots silently; an
/// instant at most `misfire_threshold` old is one a slice would fire late
/// too. An older one is not scheduled: re-applying a file of long-past
/// one-shots must not run them again (the put's reply warns instead).
fn first_instant(spec: &JobSpec, schedule: &Schedule, now_ms: i64) -> Option<i64> {
    let from = match spec.schedule {
        ScheduleSpec::At { .. } => {
            let threshold = i64::try_from(spec.misfire_threshold.as_millis()).unwrap_or(i64::MAX);
            now_ms.saturating_sub(threshold).saturating_sub(1)
        }
        _ => now_ms,
    };
    next_ms(schedule, from)
}

/// The state of a job that is not paused: `completed` once its schedule
/// has no further instant (`next`), except a fan-in, which has none and
/// stays `active` (its upstreams' successes fire it).
pub(crate) fn unpaused_state(spec: &JobSpec, next: Option<i64>) -> JobState {
    if next.is_none() && !spec.schedule.is_fan_in() {
        JobState::Completed
    } else {
        JobState::Active
    }
}

/// Stores a job's spec and state, bumping its version. The caller holds the
/// job's `jobs` row lock (taken before its `job_schedule` row, as everywhere).
pub(crate) async fn write_spec_and_state(
    tx: &mut Transaction<'static, Any>,
    spec: &JobSpec,
    state: JobState,
    updated_at: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE jobs SET spec = $2, overlap = $4, max_concurrent = $5, \
         no_on_success_version = CASE WHEN $6 = 1 THEN version + 1 END, \
         no_max_lateness_version = CASE WHEN $7 = 1 THEN version + 1 END, \
         version = version + 1, updated_at = $3 WHERE id = $1",
    )
    .bind(spec.id.as_str())
    .bind(spec_text(spec)?)
    .bind(updated_at)
    .bind(spec.overlap.as_str())
    .bind(max_concurrent_column(spec))
    .bind(triggers_nothing(spec))
    .bind(never_late(spec))
    .execute(&mut **tx)
    .await?;
    sqlx::query("UPDATE job_schedule SET state = $2 WHERE job_id = $1")
        .bind(spec.id.as_str())
        .bind(state.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

impl Store {
    /// Writes both halves of a put ([`UPSERT_JOB`]
    /// and its schedule) and returns the job row's version and creation time.
    pub(crate) async fn upsert_job(&self, put: &Put<'_>) -> Result<AnyRow, StoreError> {
        match self.backend {
            Backend::Postgres => upsert_job_postgres(self, put).await,
            Backend::Sqlite => upsert_job_sqlite(self, put).await,
        }
    }
}

/// Both halves of a put in one statement instead of a transaction of two: one
/// round trip instead of four (begin, two upserts, commit). `job` runs first
/// (the query reads it), `schedule` after it: `jobs` is locked first, as
/// always.
async fn upsert_job_postgres(store: &Store, put: &Put<'_>) -> Result<AnyRow, StoreError> {
    Ok(put
        .bind_all(sqlx::query(&format!(
            "WITH job AS ({UPSERT_JOB}), schedule AS ({UPSERT_SCHEDULE}) \
             SELECT version, created_at FROM job"
        )))
        .fetch_one(&store.write)
        .await?)
}

/// Both halves of a put, in one transaction.
async fn upsert_job_sqlite(store: &Store, put: &Put<'_>) -> Result<AnyRow, StoreError> {
    let mut tx = store.begin().await?;
    let row = put
        .bind_job(sqlx::query(UPSERT_JOB))
        .fetch_one(&mut *tx)
        .await?;
    put.bind_all(sqlx::query(UPSERT_SCHEDULE))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_cursors_round_trip() {
        assert_eq!(
            parse_job_cursor("1700000000000:a.b-c").unwrap(),
            (1_700_000_000_000, "a.b-c".into())
        );
        assert!(matches!(
            parse_job_cursor("nope"),
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            parse_job_cursor("x:y"),
            Err(StoreError::Invalid(_))
        ));
    }
}
