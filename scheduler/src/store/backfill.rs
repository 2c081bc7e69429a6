//! Backfill: re-runs a job's schedule over a past range (`jobs.backfill`).
//!
//! Each instant becomes a staged firing due now, marked `backfill`, staged
//! the way a trigger is (unadopted, with a `waiting` row) so the slicer
//! adopts and publishes it like a retry; from there the job's overlap
//! policy (at start) and retries (at finish) apply as to any firing.
//!
//! A dry run does all of it in a transaction it rolls back: the firings it
//! names are exactly those a backfill would have staged then.

use super::audience::shares;
use super::error::StoreError;
use super::handle::Store;
use super::rows;
use super::schedule::{compile, next_ms};
use super::stage::NewFiring;
use super::values::{ms, RowExt};
use super::waiting::Waiting;
use chime_common::api::BACKFILL_LIMIT_MAX;
use chime_common::{FiringId, FiringState, JobSpec};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};

/// What a backfill staged (or, dry, would have).
#[derive(Debug, Clone, PartialEq)]
pub struct Backfilled {
    /// The firings, oldest instant first.
    pub firing_ids: Vec<FiringId>,
    /// The job's spec as the backfill read it: its overlap policy decides
    /// what becomes of firings due together.
    pub spec: JobSpec,
}

impl Store {
    /// Stages one firing per instant of job `job_id`'s schedule in
    /// `[from, to)`, the earliest `limit` of them, all in one transaction.
    /// An instant that already has firings gets the attempt after its
    /// last. Refused (`invalid_argument`) unless `from < to <= now` and
    /// `limit` is 1 to [`BACKFILL_LIMIT_MAX`]; `None` if there is no such
    /// job. Returns the firings staged, oldest instant first.
    pub async fn backfill(
        &self,
        job_id: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<FiringId>>, StoreError> {
        let backfilled = self
            .backfill_with(job_id, from, to, limit, false, now)
            .await?;
        Ok(backfilled.map(|b| b.firing_ids))
    }

    /// [`Store::backfill`], with the job's spec; when `dry_run`, nothing is
    /// kept and the firings named are those it would have staged.
    pub async fn backfill_with(
        &self,
        job_id: &str,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        limit: u32,
        dry_run: bool,
        now: DateTime<Utc>,
    ) -> Result<Option<Backfilled>, StoreError> {
        if limit == 0 || limit > BACKFILL_LIMIT_MAX {
            return Err(StoreError::invalid(
                "limit",
                format!("must be from 1 to {BACKFILL_LIMIT_MAX}"),
            ));
        }
        if to > now {
            return Err(StoreError::invalid(
                "to",
                "is in the future; a backfill re-runs past instants only (the schedule runs the rest)",
            ));
        }
        if from >= to {
            return Err(StoreError::invalid("to", "must be after from"));
        }
        let (from_ms, to_ms, now_ms) = (ms(from), ms(to), ms(now));
        self.retrying(|| self.backfill_once(job_id, from_ms, to_ms, limit, dry_run, now_ms))
            .await
    }

    async fn backfill_once(
        &self,
        job_id: &str,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
        dry_run: bool,
        now_ms: i64,
    ) -> Result<Option<Backfilled>, StoreError> {
        let mut tx = self.begin().await?;
        let Some(row) = sqlx::query("SELECT spec, anchor_ms FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
        else {
            return Ok(None);
        };
        let spec = rows::spec(job_id, &row.text(job_id, "spec")?)?;
        if spec.concurrency.broadcast {
            // Its past instants went to the workers alive then; today's
            // are other workers, and running them there is not a replay.
            return Err(StoreError::invalid(
                "id",
                "is a broadcast job: its instants go to the workers alive at each, so past \
                 ones cannot be backfilled (jobs.trigger runs it on today's workers)",
            ));
        }
        let schedule = compile(&spec, row.int(job_id, "anchor_ms")?)?;
        let shards = spec.concurrency.shard_count();
        // One backfill writes at most BACKFILL_LIMIT_MAX firings, every
        // shard of an instant counted: the instants are bounded by it too.
        let limit = limit.min((BACKFILL_LIMIT_MAX / shards.max(1)).max(1));
        let mut instants = Vec::new();
        let mut next = next_ms(&schedule, from_ms.saturating_sub(1));
        while let Some(at) = next.filter(|at| *at < to_ms) {
            if instants.len() >= limit as usize {
                break;
            }
            instants.push(at);
            next = next_ms(&schedule, at);
        }
        let last_attempts: HashMap<i64, i64> = sqlx::query(
            "SELECT scheduled_at, MAX(attempt) AS attempt FROM firings \
             WHERE job_id = $1 AND scheduled_at >= $2 AND scheduled_at < $3 \
             GROUP BY scheduled_at",
        )
        .bind(job_id)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| Ok((r.int(job_id, "scheduled_at")?, r.int(job_id, "attempt")?)))
        .collect::<Result<_, StoreError>>()?;
        let payload = serde_json::to_string(&spec.payload)
            .map_err(|e| StoreError::Internal(format!("encoding a payload: {e}")))?;
        let timeout_ms = i64::try_from(spec.timeout.as_millis()).unwrap_or(i64::MAX);
        let mut firings = Vec::with_capacity(instants.len());
        for at in instants {
            let last = last_attempts.get(&at).copied().unwrap_or(0);
            let attempt = u32::try_from(last)
                .ok()
                .and_then(|a| a.checked_add(1))
                .ok_or_else(|| {
                    StoreError::corrupt(job_id, format!("attempt {last} at {at} is out of range"))
                })?;
            // Every shard of the instant, as one attempt after its latest.
            let first = NewFiring {
                id: FiringId::new(job_id, at, attempt).to_string(),
                job_id,
                scheduled_at: at,
                attempt,
                group_name: &spec.group,
                priority: spec.priority,
                handler: &spec.handler,
                payload: &payload,
                timeout_ms,
                due_at: now_ms,
                state: FiringState::Staged.as_str(),
                error: None,
                finished_at: None,
                backfill: 1,
                shard: 0,
                shards: 1,
                traceparent: None,
                worker_id: None,
                guard: None,
            };
            firings.extend(first.shared(&shares(&spec.concurrency, &[]), now_ms));
        }
        let inserted = self.insert_firings(&mut tx, &firings, now_ms).await?;
        // A firing inserted since the attempts were read (a retry, another
        // backfill) takes its key first; that instant is left to it.
        let part = self.partition_of(job_id);
        let waiting: Vec<Waiting> = inserted
            .iter()
            .map(|id| Waiting {
                id,
                group_name: &spec.group,
                part,
                due_at: now_ms,
                slice: None,
            })
            .collect();
        self.add_waiting(&mut tx, &waiting).await?;
        if dry_run {
            tx.rollback().await?;
        } else {
            tx.commit().await?;
        }
        let inserted: HashSet<&str> = inserted.iter().map(String::as_str).collect();
        let firing_ids = firings
            .iter()
            .filter(|firing| inserted.contains(firing.id.as_str()))
            .map(|firing| rows::firing_id(&firing.id))
            .collect::<Result<_, _>>()?;
        Ok(Some(Backfilled { firing_ids, spec }))
    }
}
