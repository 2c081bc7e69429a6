//! The `executing` table: a firing has a row here, naming the worker that
//! runs it and its deadline, exactly while its state is `executing`. The row
//! is the lease: a start takes it once, a finish or a requeue ends it once,
//! and only for the worker that holds it.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::rows::{self, EXECUTING_COLUMNS};
use super::types::{ExecutingRow, RunningFiring};
use super::values::{json_text, RowExt};
use serde::Serialize;
use std::collections::HashSet;

/// A firing that starts running: its new executing row.
#[derive(Serialize)]
pub(super) struct Started<'a> {
    pub id: &'a str,
    pub job_id: &'a str,
    pub group_name: &'a str,
    pub worker_id: &'a str,
    pub attempt: i64,
    pub deadline_at: i64,
}

/// A running attempt as a worker reports on it: the firing and the worker.
#[derive(Serialize)]
pub(super) struct Lease<'a> {
    pub id: &'a str,
    pub worker_id: &'a str,
}

impl Store {
    /// Takes the executing rows of `started` at `now`; returns the firings
    /// whose row this call wrote (one already there is left alone).
    pub(super) async fn insert_executing(
        &self,
        tx: &mut Tx,
        started: &[Started<'_>],
        now: i64,
    ) -> Result<HashSet<String>, StoreError> {
        if started.is_empty() {
            return Ok(HashSet::new());
        }
        let insert = format!(
            "INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, \
                 started_at, deadline_at) \
             SELECT r.id, r.job_id, r.group_name, r.worker_id, r.attempt, $3, r.deadline_at \
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
        Ok(sqlx::query_scalar(&insert)
            .bind_rows(&json_text(started)?)
            .bind(now)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect())
    }

    /// Ends the executing rows `leases` name, each only if its worker still
    /// holds it; returns the firings whose row this call removed.
    pub(super) async fn end_executing(
        &self,
        tx: &mut Tx,
        leases: &[Lease<'_>],
    ) -> Result<HashSet<String>, StoreError> {
        if leases.is_empty() {
            return Ok(HashSet::new());
        }
        let delete = format!(
            "DELETE FROM executing WHERE (firing_id, worker_id) IN \
                 (SELECT r.id, r.worker_id FROM {}) RETURNING firing_id",
            self.backend
                .json_rows(1, &[("id", Col::Text), ("worker_id", Col::Text)])
        );
        Ok(sqlx::query_scalar(&delete)
            .bind_rows(&json_text(leases)?)
            .fetch_all(&mut **tx)
            .await?
            .into_iter()
            .collect())
    }

    /// The job's running firings other than `except` (`""`: all of them),
    /// in firing-id order.
    pub(super) async fn running_firings(
        &self,
        tx: &mut Tx,
        job_id: &str,
        except: &str,
    ) -> Result<Vec<RunningFiring>, StoreError> {
        let rows = sqlx::query(
            "SELECT firing_id, worker_id FROM executing \
             WHERE job_id = $1 AND firing_id <> $2 ORDER BY firing_id",
        )
        .bind(job_id)
        .bind(except)
        .fetch_all(&mut **tx)
        .await?;
        let mut running = Vec::with_capacity(rows.len());
        for row in &rows {
            let firing = row.text(job_id, "firing_id")?;
            running.push(RunningFiring {
                firing_id: rows::firing_id(&firing)?,
                worker_id: row.text(&firing, "worker_id")?,
            });
        }
        Ok(running)
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
        Ok(rows::readable(&rows, rows::executing, "executing row"))
    }
}
