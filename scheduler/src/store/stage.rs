//! The stage transition: time slices turn due instants into `staged`
//! firings (or `skipped` ones, by the misfire policy), and adopt the staged
//! firings no slice owns (retries, triggers, released queue firings). Also
//! the reads that find staged firings to publish.

use super::audience::{no_audience, shares, Audiences, Share};
use super::dialect::{Backend, BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::plan::{plan, PlanInput};
use super::rows::{self, STAGED_COLUMNS};
use super::schedule::next_ms;
use super::spec_cache::ParsedJob;
use super::types::{MissCause, Missed, StageOutcome, StagePace, StageRequest, StagedFiring};
use super::values::{at_ms, id_batch, json_text, ms, RowExt};
use super::waiting::Waiting;
use chime_common::calendars::{excluded_by, Calendar};
use chime_common::duration::format_duration;
use chime_common::protocol::{payload_sha256, Alert, AlertKind};
use chime_common::traceparent::TraceParent;
use chime_common::{FiringId, FiringState, JobSpec, JobState};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Rows per batch statement.
pub(super) const BATCH_ROWS: usize = 10_000;

/// Columns of a batch of new firings, as [`NewFiring`] serializes them.
const NEW_FIRING_COLUMNS: [(&str, Col); 19] = [
    ("id", Col::Text),
    ("job_id", Col::Text),
    ("scheduled_at", Col::Int),
    ("attempt", Col::Int),
    ("group_name", Col::Text),
    ("priority", Col::Int),
    ("handler", Col::Text),
    ("payload", Col::Text),
    ("timeout_ms", Col::Int),
    ("due_at", Col::Int),
    ("state", Col::Text),
    ("error", Col::Text),
    ("finished_at", Col::Int),
    ("payload_sha256", Col::Text),
    ("backfill", Col::Int),
    ("shard", Col::Int),
    ("shards", Col::Int),
    ("traceparent", Col::Text),
    ("worker_id", Col::Text),
];

/// One row of a firings batch insert.
#[derive(Clone, Serialize)]
pub(super) struct NewFiring<'a> {
    pub id: String,
    pub job_id: &'a str,
    pub scheduled_at: i64,
    pub attempt: u32,
    pub group_name: &'a str,
    pub priority: u8,
    pub handler: &'a str,
    pub payload: &'a str,
    pub timeout_ms: i64,
    pub due_at: i64,
    pub state: &'static str,
    pub error: Option<String>,
    pub finished_at: Option<i64>,
    /// 1 for a backfill firing, else 0 (the column's own encoding).
    pub backfill: i64,
    /// The shard of its instant, 0…`shards`-1 (0 when unsharded).
    pub shard: u32,
    /// How many shards its instant has (1: unsharded).
    pub shards: u32,
    /// The trace it keeps (a trigger's, or a submitted one-shot job's);
    /// `None`: its trace is derived from its instant.
    pub traceparent: Option<&'a str>,
    /// The worker a broadcast's share is addressed to; `None` elsewhere.
    pub worker_id: Option<&'a str>,
    /// What its job must still be when it is inserted, for an insert that
    /// checks (SQLite's staging); `None` elsewhere.
    #[serde(flatten)]
    pub guard: Option<Guard>,
}

/// A due job as staging read it: its schedule's next instant and its
/// definition's version. Staging on SQLite reads before it writes, and
/// writes only for a job still as read.
#[derive(Clone, Copy, Serialize)]
pub(super) struct Guard {
    pub from_fire_at: i64,
    pub version: i64,
}

/// Columns of [`Guard`], after a row's own.
const GUARD_COLUMNS: [(&str, Col); 2] = [("from_fire_at", Col::Int), ("version", Col::Int)];

impl<'a> NewFiring<'a> {
    /// This attempt of an instant as each of its `shares` (see
    /// [`shares`]), each with its own id: every shard of a sharded job, one
    /// firing per worker of a broadcast, the row itself for a plain job.
    /// They go into the same batch insert: one statement for all. A
    /// broadcast with no worker to go to (no shares) is the row itself,
    /// skipped, finished at `now`.
    pub(super) fn shared(self, shares: &[Share<'a>], now: i64) -> Vec<Self> {
        if shares.is_empty() {
            let staged = self.state == FiringState::Staged.as_str();
            return vec![NewFiring {
                state: FiringState::Skipped.as_str(),
                error: if staged {
                    Some(no_audience(self.group_name))
                } else {
                    self.error
                },
                finished_at: Some(now),
                ..self
            }];
        }
        shares
            .iter()
            .map(|share| NewFiring {
                id: share
                    .id(self.job_id, self.scheduled_at, self.attempt)
                    .to_string(),
                shard: share.shard,
                shards: share.shards,
                worker_id: share.worker,
                ..self.clone()
            })
            .collect()
    }
}

/// One row of the job_schedule batch update: a job's next instant and
/// state after the slice.
#[derive(Serialize)]
struct Advance<'a> {
    id: &'a str,
    next_fire_at: Option<i64>,
    state: &'static str,
    /// What the job must still be, for an update that checks (SQLite's
    /// staging); `None` elsewhere.
    #[serde(flatten)]
    guard: Option<Guard>,
}

/// Columns of a guarded [`Advance`]; the first three are the update's.
const ADVANCE_COLUMNS: [(&str, Col); 5] = [
    ("id", Col::Text),
    ("next_fire_at", Col::Int),
    ("state", Col::Text),
    GUARD_COLUMNS[0],
    GUARD_COLUMNS[1],
];

/// One due job, read and planned.
struct DueJob {
    /// Its definition, as staging reads it.
    definition: Arc<ParsedJob>,
    /// What its rows were when read.
    guard: Guard,
    plan: super::plan::Plan,
    /// Instants taken out of `plan.staged` by an excluding calendar, with
    /// the recorded error naming it.
    excluded: Vec<(i64, String)>,
    /// The trace its firings keep (a one-shot job submitted with one).
    traceparent: Option<String>,
}

impl DueJob {
    /// Moves the planned instants whose local date one of the job's
    /// calendars holds from `staged` to `excluded`. `calendars` may hold
    /// other jobs' calendars too; a calendar deleted meanwhile excludes
    /// nothing.
    fn exclude(&mut self, calendars: &[Calendar]) {
        let mine: Vec<Calendar> = self
            .definition
            .spec
            .time
            .exclude
            .iter()
            .filter_map(|id| calendars.iter().find(|c| &c.id == id).cloned())
            .collect();
        if mine.is_empty() {
            return;
        }
        let tz = self.definition.spec.schedule.time_zone();
        let excluded = &mut self.excluded;
        self.plan.staged.retain(|&(t, _)| {
            let instant = at_ms(t);
            match excluded_by(&mine, tz, instant) {
                Some(c) => {
                    let date = instant.with_timezone(&tz).date_naive();
                    excluded.push((
                        t,
                        format!("excluded by calendar {:?}: {date} in {tz}", c.id),
                    ));
                    false
                }
                None => true,
            }
        });
    }
}

/// What one staging transaction did.
#[derive(Default)]
struct Batch {
    firings: Vec<StagedFiring>,
    skipped: u64,
    misfired: u64,
    /// Due jobs selected.
    selected: usize,
    /// Jobs planned and advanced.
    advanced: usize,
    /// Some job still has instants due in the slice (bounded per transaction).
    unfinished: bool,
    corrupt: Vec<(String, String)>,
    missed: Vec<Missed>,
}

impl Batch {
    /// Records what the committed transaction over `jobs` staged: the
    /// firings it inserted (`inserted`) to publish, and a `missed` alert for
    /// each instant it inserted as skipped.
    fn collect(
        &mut self,
        jobs: &[DueJob],
        writes: &Writes<'_>,
        inserted: &HashSet<String>,
        now: i64,
    ) {
        let mut bodies: HashMap<&str, (bytes::Bytes, &DueJob)> = HashMap::new();
        for job in jobs {
            let body = bytes::Bytes::copy_from_slice(job.definition.payload.as_bytes());
            bodies.insert(job.definition.spec.id.as_str(), (body, job));
        }
        for row in writes
            .firings
            .iter()
            .filter(|f| f.state == FiringState::Staged.as_str() && inserted.contains(&f.id))
        {
            let Some((body, job)) = bodies.get(row.job_id) else {
                continue;
            };
            let Ok(id) = row.id.parse::<FiringId>() else {
                continue;
            };
            let spec = &job.definition.spec;
            self.firings.push(StagedFiring {
                id,
                job_id: spec.id.clone(),
                group: spec.group.clone(),
                priority: spec.priority,
                handler: spec.handler.clone(),
                payload: body.clone(),
                scheduled_at: at_ms(row.scheduled_at),
                due_at: at_ms(row.due_at),
                attempt: 1,
                timeout: spec.timeout,
                publish_seq: 0,
                shards: row.shards,
                traceparent: stored_trace(job.traceparent.as_deref()),
                staged_at: at_ms(now),
                worker_id: row.worker_id.map(str::to_string),
            });
        }
        // One alert per instant, naming its first firing.
        let mut alerted = HashSet::new();
        for row in writes
            .firings
            .iter()
            .filter(|f| f.state == FiringState::Skipped.as_str() && inserted.contains(&f.id))
        {
            let Some((_, job)) = bodies.get(row.job_id) else {
                continue;
            };
            let spec = &job.definition.spec;
            let cause = match &row.error {
                Some(_) if job.plan.skipped.contains(&row.scheduled_at) => MissCause::Misfire,
                Some(_) if job.excluded.iter().any(|(t, _)| *t == row.scheduled_at) => {
                    if !spec.time.alert_on_excluded {
                        continue;
                    }
                    MissCause::Calendar
                }
                _ => MissCause::NoWorker,
            };
            if !alerted.insert((row.job_id, row.scheduled_at)) {
                continue;
            }
            let Ok(id) = row.id.parse::<FiringId>() else {
                continue;
            };
            let error = row.error.clone().unwrap_or_default();
            self.missed.push(missed(spec, id, cause, &error, now));
        }
    }
}

/// The rows one staging transaction writes for its planned jobs.
struct Writes<'a> {
    /// Every shard of every planned instant: staged, or skipped (misfired
    /// or excluded by a calendar).
    firings: Vec<NewFiring<'a>>,
    advances: Vec<Advance<'a>>,
}

impl<'a> Writes<'a> {
    /// The rows for `jobs`; each firing and advance carries its job's
    /// [`Guard`] if `guarded`.
    /// A broadcast job's instants go to its group's workers in `audiences`.
    fn of(
        jobs: &'a [DueJob],
        req: &StageRequest,
        audiences: &'a Audiences,
        guarded: bool,
    ) -> Writes<'a> {
        let now = ms(req.now);
        let mut firings = Vec::new();
        let mut advances = Vec::with_capacity(jobs.len());
        for job in jobs {
            let spec = &job.definition.spec;
            let timeout_ms = i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX);
            let base = |scheduled_at: i64, due_at: i64, state| NewFiring {
                id: FiringId::new(spec.id.as_str(), scheduled_at, 1).to_string(),
                job_id: &spec.id,
                scheduled_at,
                attempt: 1,
                group_name: &spec.group,
                priority: spec.priority,
                handler: &spec.handler,
                payload: "null",
                timeout_ms,
                due_at,
                state,
                error: None,
                finished_at: None,
                backfill: 0,
                shard: 0,
                shards: 1,
                traceparent: job.traceparent.as_deref(),
                worker_id: None,
                guard: guarded.then_some(job.guard),
            };
            let shares = shares(&spec.concurrency, audiences.of_group(&spec.group));
            for &(scheduled_at, due_at) in &job.plan.staged {
                let first = NewFiring {
                    payload: &job.definition.payload,
                    ..base(scheduled_at, due_at, FiringState::Staged.as_str())
                };
                firings.extend(first.shared(&shares, now));
            }
            for (scheduled_at, error) in &job.excluded {
                let first = NewFiring {
                    error: Some(error.clone()),
                    finished_at: Some(now),
                    ..base(*scheduled_at, *scheduled_at, FiringState::Skipped.as_str())
                };
                firings.extend(first.shared(&shares, now));
            }
            for &scheduled_at in &job.plan.skipped {
                let first = NewFiring {
                    error: Some(misfire_error(spec, scheduled_at, now)),
                    finished_at: Some(now),
                    ..base(scheduled_at, scheduled_at, FiringState::Skipped.as_str())
                };
                firings.extend(first.shared(&shares, now));
            }
            advances.push(Advance {
                id: &spec.id,
                next_fire_at: job.plan.next,
                state: if job.plan.next.is_some() {
                    JobState::Active.as_str()
                } else {
                    JobState::Completed.as_str()
                },
                guard: guarded.then_some(job.guard),
            });
        }
        Writes { firings, advances }
    }
}

/// One row of a firings insert: the firing and the digest a start is
/// checked against, the SHA-256 of the body the publisher will send: the
/// stored payload text, which it sends as is.
#[derive(Serialize)]
struct FiringRow<'r, 'a> {
    #[serde(flatten)]
    firing: &'r NewFiring<'a>,
    payload_sha256: String,
}

fn firing_rows<'r, 'a>(firings: &'r [NewFiring<'a>]) -> Vec<FiringRow<'r, 'a>> {
    firings
        .iter()
        .map(|firing| FiringRow {
            firing,
            payload_sha256: payload_sha256(firing.payload.as_bytes()),
        })
        .collect()
}

impl Store {
    /// Stages one slice of one partition: every due instant of every active
    /// job before `slice_end` becomes a firing owned by `req.slice` (or a
    /// skipped one, by the job's misfire policy; see `plan.rs`), and each job's
    /// `next_fire_at` moves past the slice, all in one transaction per
    /// `max_jobs` jobs (fewer on SQLite, see
    /// [`super::dialect::Backend::stage_jobs_per_transaction`]). Then staged
    /// firings of the partition that no slice owns and that are due before
    /// `slice_end` (retries, triggers, released queue firings) are adopted.
    ///
    /// Each (job, instant) is staged at most once, whatever runs concurrently:
    /// on PostgreSQL replicas skip each other's locked jobs, on SQLite a job
    /// is written only if it is still as staging read it, and the firings'
    /// unique key drops a duplicate. Jobs whose rows are corrupt are reported
    /// in [`StageOutcome::corrupt`] and stay due.
    pub async fn stage_slice(&self, req: &StageRequest) -> Result<StageOutcome, StoreError> {
        let mut firings = Vec::new();
        let mut outcome = self
            .stage_slice_each(req, |staged| firings.extend(staged))
            .await?;
        firings.sort_by(|a, b| {
            (
                a.due_at,
                std::cmp::Reverse(a.priority),
                a.scheduled_at,
                &a.id,
            )
                .cmp(&(
                    b.due_at,
                    std::cmp::Reverse(b.priority),
                    b.scheduled_at,
                    &b.id,
                ))
        });
        outcome.firings = firings;
        Ok(outcome)
    }

    /// [`Store::stage_slice`], handing each transaction's firings to
    /// `on_staged` as soon as it commits (the outcome's `firings` stay
    /// empty). A dense slice (very many jobs due at one instant) takes many
    /// transactions to stage; its first firings need not wait for the last.
    pub async fn stage_slice_each(
        &self,
        req: &StageRequest,
        mut on_staged: impl FnMut(Vec<StagedFiring>),
    ) -> Result<StageOutcome, StoreError> {
        let mut outcome = StageOutcome::default();
        let mut corrupt_seen = HashSet::new();
        let mut staged_jobs = 0;
        let mut due_left = match req.pace {
            Some(_) => {
                let (from, to) = (start_ms(req), ms(req.slice_end));
                self.retrying(|| self.count_due_jobs(req.partition, from, to, i64::MAX))
                    .await?
            }
            None => 0,
        };
        let shared = req
            .pace
            .is_some_and(|p| p.shares(std::time::Instant::now(), due_left));
        loop {
            let asked = req
                .pace
                .and_then(|p| {
                    let share = if shared { due_left } else { 0 };
                    p.jobs_at(std::time::Instant::now(), share)
                })
                .map_or(req.max_jobs, |jobs| jobs.min(req.max_jobs));
            let max_jobs = self.backend.stage_jobs_per_transaction(asked, staged_jobs);
            let batch = self.retrying(|| self.stage_batch(req, max_jobs)).await?;
            if !batch.firings.is_empty() {
                on_staged(batch.firings);
            }
            outcome.skipped += batch.skipped;
            outcome.misfired += batch.misfired;
            outcome.jobs += batch.advanced as u64;
            staged_jobs += batch.advanced;
            due_left = due_left.saturating_sub(batch.advanced as u64);
            outcome.missed.extend(batch.missed);
            for (id, message) in batch.corrupt {
                if corrupt_seen.insert(id.clone()) {
                    tracing::error!(job_id = %id, %message, "due job is corrupt; not staged");
                    outcome.corrupt.push((id, message));
                }
            }
            // A full batch may have left due jobs behind, and a job with very
            // many instants is continued; stop when the partition is drained
            // or nothing moved (only corrupt jobs left).
            let more = batch.selected == max_jobs || batch.unfinished;
            if !more || batch.advanced == 0 {
                break;
            }
            if let Some(pace) = req.pace.filter(StagePace::pause_fits) {
                tokio::time::sleep(pace.pause).await;
            }
        }
        let adopted = self.retrying(|| self.adopt(req)).await?;
        if !adopted.0.is_empty() {
            on_staged(adopted.0);
        }
        outcome.corrupt.extend(adopted.1);
        Ok(outcome)
    }

    /// One staging transaction over at most `max_jobs` due jobs.
    ///
    /// On PostgreSQL the due jobs' schedule rows are locked as they are read,
    /// and the writes follow in the same transaction; replicas staging the
    /// same partition pass over each other's jobs. SQLite has one writer,
    /// which every start and finish waits for: there the due jobs are read
    /// and planned on a reader, and the writes go to the writer as one
    /// command guarded by what was read ([`Store::write_staged_at_once`]), so
    /// the writer is held for the writes alone.
    async fn stage_batch(&self, req: &StageRequest, max_jobs: usize) -> Result<Batch, StoreError> {
        match self.backend {
            Backend::Postgres => {
                let mut tx = self.begin().await?;
                let due = self.select_due(&mut *tx, req, max_jobs).await?;
                let (mut batch, jobs) = self.plan_due(&due, req).await?;
                if !jobs.is_empty() {
                    let audiences = self.audiences();
                    let writes = Writes::of(&jobs, req, &audiences, false);
                    let inserted = self.write_staged(&mut tx, &writes, req).await?;
                    batch.advanced = jobs.len();
                    batch.collect(&jobs, &writes, &inserted, ms(req.now));
                }
                tx.commit().await?;
                Ok(batch)
            }
            Backend::Sqlite => {
                let due = self.select_due(&self.read, req, max_jobs).await?;
                let (mut batch, jobs) = self.plan_due(&due, req).await?;
                if !jobs.is_empty() {
                    let audiences = self.audiences();
                    let writes = Writes::of(&jobs, req, &audiences, true);
                    let (inserted, advanced) = self.write_staged_at_once(&writes, req).await?;
                    batch.advanced = advanced;
                    batch.collect(&jobs, &writes, &inserted, ms(req.now));
                }
                Ok(batch)
            }
        }
    }

    /// The active jobs of the request's partition due in its slice, at most
    /// `max_jobs`, soonest first, with their definitions. On PostgreSQL only
    /// the schedule rows are locked: the definitions are read, and a
    /// concurrent put waits on the schedule row (it takes `jobs` first).
    async fn select_due<'c>(
        &self,
        executor: impl sqlx::Executor<'c, Database = Any>,
        req: &StageRequest,
        max_jobs: usize,
    ) -> Result<Vec<AnyRow>, StoreError> {
        Ok(sqlx::query(&format!(
            "SELECT s.job_id AS id, j.spec, j.anchor_ms, j.version, s.next_fire_at, \
                 j.traceparent \
             FROM job_schedule s JOIN jobs j ON j.id = s.job_id \
             WHERE s.part = $1 AND s.state = 'active' \
                 AND s.next_fire_at >= $2 AND s.next_fire_at < $3 \
             ORDER BY s.next_fire_at, s.job_id LIMIT $4{}",
            self.backend.for_update_skip_locked("s")
        ))
        .bind(i64::from(req.partition))
        .bind(start_ms(req))
        .bind(ms(req.slice_end))
        .bind(i64::try_from(max_jobs).unwrap_or(i64::MAX))
        .fetch_all(executor)
        .await?)
    }

    /// Plans the due jobs `due`: their instants in the slice, less those an
    /// excluding calendar holds. Corrupt jobs are set aside in the batch.
    async fn plan_due(
        &self,
        due: &[AnyRow],
        req: &StageRequest,
    ) -> Result<(Batch, Vec<DueJob>), StoreError> {
        let now = ms(req.now);
        let end = ms(req.slice_end);
        let mut batch = Batch {
            selected: due.len(),
            ..Batch::default()
        };
        let mut jobs = Vec::with_capacity(due.len());
        for row in due {
            match self.plan_job(row, req, now, end) {
                Ok(job) => jobs.push(job),
                Err(StoreError::Corrupt { id, message }) => batch.corrupt.push((id, message)),
                Err(e) => return Err(e),
            }
        }
        let mut excluded_ids: Vec<String> = jobs
            .iter()
            .flat_map(|j| j.definition.spec.time.exclude.iter().cloned())
            .collect();
        excluded_ids.sort_unstable();
        excluded_ids.dedup();
        let calendars = self.calendars(&excluded_ids).await?;
        for job in &mut jobs {
            job.exclude(&calendars);
            batch.unfinished |= job.plan.next.is_some_and(|next| next < end);
            batch.skipped += job.plan.skipped_total + job.excluded.len() as u64;
            batch.misfired += job.plan.misfired;
        }
        Ok((batch, jobs))
    }

    /// Writes a staging transaction's rows in `tx`, whose due jobs it holds
    /// locked; returns the ids of the firings it inserted.
    async fn write_staged(
        &self,
        tx: &mut Tx,
        writes: &Writes<'_>,
        req: &StageRequest,
    ) -> Result<HashSet<String>, StoreError> {
        let mut inserted = HashSet::new();
        for chunk in writes.firings.chunks(BATCH_ROWS) {
            inserted.extend(self.insert_firings(tx, chunk, ms(req.now)).await?);
        }
        // A row that already existed belongs to whoever staged it.
        let waiting: Vec<Waiting> = writes
            .firings
            .iter()
            .filter(|f| f.state == FiringState::Staged.as_str() && inserted.contains(&f.id))
            .map(|f| Waiting {
                id: &f.id,
                group_name: f.group_name,
                part: req.partition,
                due_at: f.due_at,
                slice: Some(&req.slice),
            })
            .collect();
        for chunk in waiting.chunks(BATCH_ROWS) {
            self.add_waiting(tx, chunk).await?;
        }
        let update = format!(
            "UPDATE job_schedule SET next_fire_at = r.next_fire_at, state = r.state \
             FROM {} WHERE job_schedule.job_id = r.id",
            self.backend.json_rows(1, &ADVANCE_COLUMNS[..3])
        );
        for chunk in writes.advances.chunks(BATCH_ROWS) {
            sqlx::query(&update)
                .bind_rows(&json_text(chunk)?)
                .execute(&mut **tx)
                .await?;
        }
        Ok(inserted)
    }

    /// Writes a staging transaction's rows on SQLite's writer, as one
    /// command (see `dialect/sqlite.rs`): only for the jobs whose schedule
    /// and definition are still as they were read, which a put, a pause or
    /// another staging may have changed meanwhile. Returns the ids of the
    /// firings it inserted and how many jobs it advanced.
    ///
    /// A firing gets its waiting row here if it is staged and has none,
    /// that is, if this command inserted it: one that existed already is
    /// staged with its row, or past staging.
    async fn write_staged_at_once(
        &self,
        writes: &Writes<'_>,
        req: &StageRequest,
    ) -> Result<(HashSet<String>, usize), StoreError> {
        let sql = format!(
            "BEGIN IMMEDIATE; \
             {insert}; \
             INSERT INTO waiting (firing_id, group_name, part, due_at, slice) \
             SELECT f.id, f.group_name, $6, f.due_at, $7 FROM firings f \
             WHERE f.id IN (SELECT r.id FROM {staged}) AND f.state = 'staged' \
             ON CONFLICT DO NOTHING; \
             UPDATE job_schedule SET next_fire_at = r.next_fire_at, state = r.state \
             FROM {advances} \
             WHERE job_schedule.job_id = r.id AND job_schedule.state = 'active' \
                 AND job_schedule.next_fire_at = r.from_fire_at \
                 AND (SELECT j.version FROM jobs j WHERE j.id = r.id) = r.version \
             RETURNING 'advanced', job_id; \
             COMMIT",
            insert = self.insert_firings_sql(
                &[&NEW_FIRING_COLUMNS[..], &GUARD_COLUMNS[..]].concat(),
                "AND EXISTS (SELECT 1 FROM job_schedule s JOIN jobs j ON j.id = s.job_id \
                     WHERE s.job_id = r.job_id AND s.state = 'active' \
                         AND s.next_fire_at = r.from_fire_at AND j.version = r.version)",
                "'inserted', id",
            ),
            staged = self.backend.json_rows(4, &[("id", Col::Text)]),
            advances = self.backend.json_rows(8, &ADVANCE_COLUMNS),
        );
        let staged: Vec<&str> = writes
            .firings
            .iter()
            .filter(|f| f.state == FiringState::Staged.as_str())
            .map(|f| f.id.as_str())
            .collect();
        let rows: Vec<(String, String)> = self
            .in_one_command(
                sqlx::query_as(&sql)
                    .bind_rows(&json_text(&firing_rows(&writes.firings))?)
                    .bind(ms(req.now))
                    .bind_rows(&id_batch(&staged)?)
                    .bind(i64::from(req.partition))
                    .bind(req.slice.as_str())
                    .bind_rows(&json_text(&writes.advances)?),
            )
            .await?;
        let mut inserted = HashSet::new();
        let mut advanced = 0;
        for (kind, id) in rows {
            if kind == "advanced" {
                advanced += 1;
            } else {
                inserted.insert(id);
            }
        }
        Ok((inserted, advanced))
    }

    /// Inserts new firings created at `now`; returns the ids it inserted
    /// (one whose (job, instant, attempt) exists already is left alone).
    pub(super) async fn insert_firings(
        &self,
        tx: &mut Tx,
        firings: &[NewFiring<'_>],
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar(&self.insert_firings_sql(&NEW_FIRING_COLUMNS, "", "id"))
                .bind_rows(&json_text(&firing_rows(firings))?)
                .bind(now)
                .fetch_all(&mut **tx)
                .await?,
        )
    }

    /// The insert of a batch of new firings (`$1`, rows as [`FiringRow`]
    /// serializes them, `columns` of them, and their count `$2`) created at `$3`, returning
    /// `returning` of each row it inserted. One whose (job, instant, shard,
    /// attempt) exists already is left alone, and so is a row the condition
    /// `also` (SQL on the batch row `r`, empty or starting with `AND`)
    /// refuses.
    fn insert_firings_sql(&self, columns: &[(&str, Col)], also: &str, returning: &str) -> String {
        format!(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, \
                 handler, payload, timeout_ms, due_at, state, error, finished_at, \
                 payload_sha256, backfill, shard, shards, traceparent, worker_id, created_at) \
             SELECT r.id, r.job_id, r.scheduled_at, r.attempt, r.group_name, r.priority, \
                 r.handler, r.payload, r.timeout_ms, r.due_at, r.state, r.error, r.finished_at, \
                 r.payload_sha256, r.backfill, r.shard, r.shards, r.traceparent, r.worker_id, $3 \
             FROM {} WHERE true {also} ON CONFLICT DO NOTHING RETURNING {returning}",
            self.backend.json_rows(1, columns)
        )
    }

    /// Reads one due job row and plans its instants.
    fn plan_job(
        &self,
        row: &AnyRow,
        req: &StageRequest,
        now: i64,
        end: i64,
    ) -> Result<DueJob, StoreError> {
        use sqlx::Row;
        let id: String = row
            .try_get("id")
            .map_err(|e| StoreError::Internal(format!("reading a due job's id: {e}")))?;
        let definition =
            self.specs
                .parsed(&id, &row.text(&id, "spec")?, row.int(&id, "anchor_ms")?)?;
        let spec = &definition.spec;
        let first = row.int(&id, "next_fire_at")?;
        let threshold = i64::try_from(spec.misfire_threshold.as_millis()).unwrap_or(i64::MAX);
        let input = PlanInput {
            first,
            now,
            cutoff: now.saturating_sub(threshold),
            end,
            misfire: spec.misfire,
            max_catch_up: req.max_catch_up,
        };
        let plan = plan(&input, |t| next_ms(&definition.schedule, t));
        Ok(DueJob {
            guard: Guard {
                from_fire_at: first,
                version: row.int(&id, "version")?,
            },
            definition,
            plan,
            excluded: Vec::new(),
            traceparent: row.opt_text(&id, "traceparent")?,
        })
    }

    /// Adopts the partition's unowned staged firings due before the slice end.
    async fn adopt(
        &self,
        req: &StageRequest,
    ) -> Result<(Vec<StagedFiring>, Vec<(String, String)>), StoreError> {
        let adopted: Vec<String> = sqlx::query_scalar(
            "UPDATE waiting SET slice = $1 \
             WHERE slice IS NULL AND published_at IS NULL AND part = $2 \
                 AND due_at >= $3 AND due_at < $4 \
             RETURNING firing_id",
        )
        .bind(req.slice.as_str())
        .bind(i64::from(req.partition))
        .bind(start_ms(req))
        .bind(ms(req.slice_end))
        .fetch_all(&self.write)
        .await?;
        if adopted.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let rows = sqlx::query(&format!(
            "SELECT {STAGED_COLUMNS} FROM firings WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        ))
        .bind_rows(&id_batch(&adopted)?)
        .fetch_all(&self.write)
        .await?;
        Ok(decode_staged(&rows))
    }

    /// Whether at least `count` active jobs of `partition` are due in
    /// `[from, to)`: how the slicer finds a dense slice to stage early. Reads
    /// at most `count` entries of the due index, however dense the slice.
    pub async fn due_jobs_reach(
        &self,
        partition: u32,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        count: u32,
    ) -> Result<bool, StoreError> {
        let found = self
            .count_due_jobs(partition, ms(from), ms(to), i64::from(count))
            .await?;
        Ok(found >= u64::from(count))
    }

    /// How many active jobs of `partition` are due in `[from_ms, to_ms)`,
    /// reading at most `limit` entries of the due index. A paced staging
    /// sizes its transactions from it: an estimate, since other replicas
    /// may stage some of them meanwhile.
    async fn count_due_jobs(
        &self,
        partition: u32,
        from_ms: i64,
        to_ms: i64,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let found: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM job_schedule \
             WHERE part = $1 AND state = 'active' AND next_fire_at >= $2 AND next_fire_at < $3 \
             LIMIT $4) due",
        )
        .bind(i64::from(partition))
        .bind(from_ms)
        .bind(to_ms)
        .bind(limit)
        .fetch_one(&self.read)
        .await?;
        Ok(u64::try_from(found).unwrap_or(0))
    }

    /// Staged (unpublished) firings owned by a slice: what a replica taking
    /// over a dead replica's claim must publish. Corrupt rows are logged and
    /// left out.
    pub async fn slice_firings(&self, slice: &str) -> Result<Vec<StagedFiring>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {STAGED_COLUMNS} FROM firings WHERE id IN (SELECT firing_id FROM waiting \
                 WHERE slice = $1 AND published_at IS NULL) \
             ORDER BY due_at, priority DESC, id"
        ))
        .bind(slice)
        .fetch_all(&self.read)
        .await?;
        Ok(decode_staged(&rows).0)
    }

    /// Staged firings no slice owns yet (retries, triggers, released held
    /// firings) due before `due_before`, soonest first, at most `limit`:
    /// what `immediate.rs` publishes without waiting for a slice to adopt
    /// them. Corrupt rows are logged and left out.
    pub async fn unadopted_due(
        &self,
        due_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<StagedFiring>, StoreError> {
        self.staged_before("slice IS NULL AND", due_before, limit)
            .await
    }

    /// The safety net: staged firings due before `due_before`, whether a slice
    /// owns them or not, oldest first. Corrupt rows are logged and left out.
    pub async fn overdue_staged(
        &self,
        due_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<StagedFiring>, StoreError> {
        self.staged_before("", due_before, limit).await
    }

    /// Staged firings due before `due_before` that also meet `also` (SQL on
    /// `waiting`, ending in `AND`, or empty), oldest first, at most `limit`.
    async fn staged_before(
        &self,
        also: &'static str,
        due_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<StagedFiring>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {STAGED_COLUMNS} FROM firings WHERE id IN (SELECT firing_id FROM waiting \
                 WHERE {also} published_at IS NULL AND due_at < $1 ORDER BY due_at, firing_id LIMIT $2) \
             ORDER BY due_at, priority DESC, id"
        ))
        .bind(ms(due_before))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        Ok(decode_staged(&rows).0)
    }
}

/// A stored `traceparent`, read: one that does not parse (written by hand)
/// is left out, and the firing's trace is derived from its instant.
pub(super) fn stored_trace(text: Option<&str>) -> Option<TraceParent> {
    text.and_then(|t| t.parse().ok())
}

/// The lower bound of a staging request's instants (UTC ms).
fn start_ms(req: &StageRequest) -> i64 {
    req.slice_start.map_or(i64::MIN, ms)
}

/// Decodes staged rows, setting corrupt ones aside (and logging them): one
/// bad row must not stop the others from being published.
pub(super) fn decode_staged(rows: &[AnyRow]) -> (Vec<StagedFiring>, Vec<(String, String)>) {
    let mut firings = Vec::with_capacity(rows.len());
    let mut corrupt = Vec::new();
    for row in rows {
        match rows::staged(row) {
            Ok(firing) => firings.push(firing),
            Err(StoreError::Corrupt { id, message }) => {
                tracing::error!(firing_id = %id, %message, "staged firing is corrupt; not published");
                corrupt.push((id, message));
            }
            Err(e) => {
                tracing::error!(error = %e, "staged firing cannot be read; not published");
            }
        }
    }
    (firings, corrupt)
}

/// The recorded error of an instant skipped by the misfire policy.
/// The `missed` alert of the skipped firing `id`, recorded with `error`.
fn missed(spec: &JobSpec, id: FiringId, cause: MissCause, error: &str, now: i64) -> Missed {
    let message = format!("firing {id} was skipped, not fired: {error}");
    Missed {
        alert: Alert {
            kind: AlertKind::Missed,
            job_id: spec.id.clone(),
            group: spec.group.clone(),
            firing_id: Some(id),
            message,
            at: at_ms(now),
            consecutive_failures: None,
            paused: false,
            lateness_ms: None,
        },
        cause,
    }
}

fn misfire_error(spec: &JobSpec, scheduled_at: i64, now: i64) -> String {
    let late = Duration::from_millis(u64::try_from(now - scheduled_at).unwrap_or(0));
    format!(
        "misfired: found {} late, beyond misfire_threshold {} (misfire: {})",
        format_duration(late),
        format_duration(spec.misfire_threshold),
        spec.misfire
    )
}

#[cfg(test)]
mod tests {
    use super::super::pause::Pause;
    use super::super::test_stores::TestStore;
    use super::*;
    use chime_common::Limits;

    /// 2030-01-01T00:00:00Z plus `seconds`.
    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_893_456_000 + seconds, 0).expect("a valid instant")
    }

    /// A job firing every 10 s with payload `{"v": v}`.
    fn job(v: u32) -> JobSpec {
        JobSpec::from_json(
            &serde_json::json!({
                "id": "j",
                "schedule": {"every": "10s"},
                "handler": "test",
                "payload": {"v": v},
            }),
            &Limits::default(),
        )
        .expect("a valid spec")
    }

    /// What SQLite's staging reads and plans for `req`, before it writes.
    async fn read_and_plan(store: &Store, req: &StageRequest) -> Vec<DueJob> {
        let due = store.select_due(&store.read, req, 25).await.expect("read");
        let (_, jobs) = store.plan_due(&due, req).await.expect("plan");
        assert_eq!(jobs.len(), 1, "the job is due");
        jobs
    }

    /// A put or a pause that lands between staging's read and its write
    /// wins: nothing is written as read, and the next read stages the job
    /// as it now is (a put that keeps the next instant changes only the
    /// definition's version).
    #[tokio::test]
    async fn sqlite_staging_writes_nothing_for_a_job_changed_after_its_read() {
        let test = TestStore::sqlite().await;
        let store = &test.store;
        store.put_job(&job(1), t(0)).await.expect("put");
        let req = StageRequest::new("s", 0, t(11), t(0));

        let jobs = read_and_plan(store, &req).await;
        store
            .put_job(&job(2), t(0))
            .await
            .expect("the put that wins");
        let (inserted, advanced) = store
            .write_staged_at_once(&Writes::of(&jobs, &req, &Audiences::default(), true), &req)
            .await
            .expect("write");
        assert!(inserted.is_empty(), "staged as read: {inserted:?}");
        assert_eq!(advanced, 0);

        let staged = store.stage_slice(&req).await.expect("stage").firings;
        assert_eq!(staged.len(), 1, "{staged:?}");
        assert_eq!(&staged[0].payload[..], br#"{"v":2}"#);

        store.put_job(&job(3), t(20)).await.expect("put");
        let req = StageRequest::new("s2", 0, t(31), t(20));
        let jobs = read_and_plan(store, &req).await;
        store
            .set_paused("j", Pause::Until(None), t(20))
            .await
            .expect("pause")
            .expect("the job");
        let (inserted, advanced) = store
            .write_staged_at_once(&Writes::of(&jobs, &req, &Audiences::default(), true), &req)
            .await
            .expect("write");
        assert!(inserted.is_empty(), "staged while paused: {inserted:?}");
        assert_eq!(advanced, 0);
    }

    /// Two stagings that read the same due job (the slicer's pass and a
    /// takeover, say) write it once: the second finds its next instant
    /// moved, inserts no firing and adds no waiting row.
    #[tokio::test]
    async fn sqlite_stagings_of_one_read_write_the_job_once() {
        let test = TestStore::sqlite().await;
        let store = &test.store;
        store.put_job(&job(1), t(0)).await.expect("put");
        let req = StageRequest::new("s", 0, t(11), t(0));
        let jobs = read_and_plan(store, &req).await;
        let audiences = Audiences::default();
        let writes = Writes::of(&jobs, &req, &audiences, true);

        let (first, advanced) = store
            .write_staged_at_once(&writes, &req)
            .await
            .expect("write");
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(advanced, 1);
        let (second, advanced) = store
            .write_staged_at_once(&writes, &req)
            .await
            .expect("write");
        assert!(second.is_empty(), "{second:?}");
        assert_eq!(advanced, 0);
        let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM waiting")
            .fetch_one(&store.read)
            .await
            .expect("count");
        assert_eq!(waiting, 1);
    }
}
