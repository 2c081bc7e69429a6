//! Fan-in schedules (`{"after": [...], "within"?}`): which upstream
//! successes have counted, kept in table `fan_in` (one row per downstream
//! job and upstream job).
//!
//! A put of the downstream replaces its rows, so nothing counts from before
//! the put. A success of an upstream records itself on every row that waits
//! for it, in the finish transaction (so a success is counted exactly once:
//! a finished event that is delivered again no longer holds its executing
//! row and changes nothing); when every row of a downstream has a success
//! (within `within`), the same transaction stages one firing of it through
//! the path `on_success` takes and clears its rows.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::values::{id_batch, RowExt};
use chime_common::schedule::ScheduleSpec;
use chime_common::{FiringId, Job, JobSpec, JobState};
use std::collections::HashSet;

impl Store {
    /// Makes `spec`'s rows those of its `after` list, none counted; a job
    /// that is not a fan-in keeps none.
    pub(super) async fn replace_fan_in(
        &self,
        tx: &mut Tx,
        spec: &JobSpec,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM fan_in WHERE job_id = $1")
            .bind(spec.id.as_str())
            .execute(&mut **tx)
            .await?;
        let after = spec.schedule.after();
        if after.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO fan_in (job_id, upstream_id) SELECT CAST($3 AS TEXT), r.id FROM {}",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        sqlx::query(&sql)
            .bind_rows(&id_batch(after)?)
            .bind(spec.id.as_str())
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Forgets the fan-in rows of a job that is not a fan-in (any longer):
    /// the put that wrote it did so without a transaction of its own.
    pub(super) async fn forget_fan_in(&self, job_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM fan_in WHERE job_id = $1")
            .bind(job_id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    /// Counts a success of `upstream` (at `now`, ms) towards the fan-in jobs
    /// that wait for it, and fires each of them whose every upstream has now
    /// succeeded since it last fired (within its `within`). Returns the
    /// firings staged.
    ///
    /// Each downstream job row is locked before its rows are read, so two
    /// upstreams that succeed at once (on two replicas) decide one after the
    /// other and exactly one of them fires it. A paused downstream records
    /// nothing: a success while it is paused does not count.
    pub(super) async fn count_fan_in_success(
        &self,
        tx: &mut Tx,
        upstream: &str,
        now: i64,
    ) -> Result<Vec<FiringId>, StoreError> {
        let waiting: Vec<String> =
            sqlx::query_scalar("SELECT job_id FROM fan_in WHERE upstream_id = $1 ORDER BY job_id")
                .bind(upstream)
                .fetch_all(&mut **tx)
                .await?;
        let mut fired = Vec::new();
        for job_id in waiting {
            // A deleted or unreadable downstream counts nothing (its rows go
            // with its delete; a corrupt one is logged by `read_job`).
            let Some(job) = self.read_job(tx, &job_id, true).await? else {
                continue;
            };
            let ScheduleSpec::After { after, within } = &job.spec.schedule else {
                continue;
            };
            if job.state == JobState::Paused || !after.iter().any(|u| u == upstream) {
                continue;
            }
            sqlx::query(
                "UPDATE fan_in SET succeeded_at = $3 WHERE job_id = $1 AND upstream_id = $2",
            )
            .bind(job_id.as_str())
            .bind(upstream)
            .bind(now)
            .execute(&mut **tx)
            .await?;
            // Successes before `since` no longer count; a window reaching
            // before the epoch counts them all.
            let since = within
                .and_then(|w| i64::try_from(w.as_millis()).ok())
                .and_then(|w| now.checked_sub(w))
                .unwrap_or(i64::MIN);
            let uncounted: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM fan_in \
                 WHERE job_id = $1 AND (succeeded_at IS NULL OR succeeded_at < $2)",
            )
            .bind(job_id.as_str())
            .bind(since)
            .fetch_one(&mut **tx)
            .await?;
            if uncounted > 0 {
                continue;
            }
            sqlx::query("UPDATE fan_in SET succeeded_at = NULL WHERE job_id = $1")
                .bind(job_id.as_str())
                .execute(&mut **tx)
                .await?;
            if let Some(id) = self.trigger_in(tx, &job_id, None, None, now).await? {
                fired.push(id);
            }
        }
        Ok(fired)
    }

    /// Fills in `upstream_missing` of the fan-in jobs among `jobs`: the
    /// jobs their `after` names that do not exist.
    pub(super) async fn mark_upstream_missing(&self, jobs: &mut [Job]) -> Result<(), StoreError> {
        let named: Vec<&str> = jobs
            .iter()
            .flat_map(|job| job.spec.schedule.after())
            .map(String::as_str)
            .collect::<HashSet<&str>>()
            .into_iter()
            .collect();
        if named.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "SELECT id FROM jobs WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        let rows = sqlx::query(&sql)
            .bind_rows(&id_batch(&named)?)
            .fetch_all(&self.read)
            .await?;
        let existing = rows
            .iter()
            .map(|row| row.text("upstream", "id"))
            .collect::<Result<HashSet<String>, _>>()?;
        for job in jobs.iter_mut() {
            job.upstream_missing = job
                .spec
                .schedule
                .after()
                .iter()
                .filter(|id| !existing.contains(*id))
                .cloned()
                .collect();
        }
        Ok(())
    }
}
