//! Firings held back by a concurrency limit (the `held` table), and their
//! release once the limit frees.
//!
//! A start over a limit does not run: the firing is held, `published` (a
//! worker received it), and its worker drops the message (refusal
//! `queued`). Three
//! limits hold firings ([`Cause`]): the job's own `max_concurrent` (with
//! `overlap: queue`, at most `queue_limit` of them; with `allow`, without a
//! bound of its own), the group's `max_concurrent`, and the group's
//! `max_per_second`.
//!
//! When a slot frees (a run ends, a limit is raised, the rate window moves
//! on), the oldest held firings are released: staged again, unadopted, due
//! now, with the next publish sequence, so the next slice of their partition
//! publishes them once more; the publisher's late mark of the earlier
//! publish must not mark them published again, so it skips held firings. A
//! released firing keeps its row, marked
//! `released_at`, and its slot is kept for it: later firings count it as
//! running, so they cannot take the slot it was released into, and it does
//! not wait behind them. Its row goes when it starts or ends.
//!
//! Releases happen in the transaction that freed the slot (finish, requeue)
//! and in the periodic pass of `recovery/limit_release.rs` (rates, changed limits, and
//! anything a crash left behind).

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::rows;
use super::states::{sources_sql, Transition};
use super::types::HoldCause as Cause;
use super::values::{id_batch, RowExt};
use chime_common::{Firing, FiringId, FiringState};

/// A firing's held row.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hold {
    pub cause: Cause,
    /// When it was first held (ms).
    pub held_at: i64,
    /// Whether a slot of its cause was freed for it.
    pub released: bool,
}

impl Hold {
    /// Whether it was released into a slot of `cause`'s limit.
    pub fn is_released(&self, cause: Cause) -> bool {
        self.released && self.cause == cause
    }
}

/// How many held firings of one limit wait, and how many were released and
/// have their slot kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct HeldCount {
    pub waiting: i64,
    pub released: i64,
}

impl Store {
    /// Fills in `held_by` and `held_since` of those of `firings` a limit
    /// holds back now (held, not yet released into a slot), so that a
    /// listing says why a `published` firing does not start.
    pub(super) async fn mark_held(&self, firings: &mut [Firing]) -> Result<(), StoreError> {
        let ids: Vec<String> = firings
            .iter()
            .filter(|f| f.state == FiringState::Published)
            .map(|f| f.id.to_string())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let rows = sqlx::query(&format!(
            "SELECT firing_id, cause, held_at FROM held \
             WHERE released_at IS NULL AND firing_id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        ))
        .bind_rows(&id_batch(&ids)?)
        .fetch_all(&self.read)
        .await?;
        for row in &rows {
            let id = row.text("held", "firing_id")?;
            let stored = row.text(&id, "cause")?;
            let cause = Cause::parse(&stored)
                .ok_or_else(|| StoreError::corrupt(&id, format!("hold cause {stored:?}")))?;
            let since = chrono::DateTime::from_timestamp_millis(row.int(&id, "held_at")?);
            if let Some(firing) = firings.iter_mut().find(|f| f.id.to_string() == id) {
                firing.held_by = Some(cause.held_by());
                firing.held_since = since;
            }
        }
        Ok(())
    }

    /// Holds firing `id` (of `job_id`, in `group`) for `cause`. A firing
    /// held before keeps its place (`held_at`) and gives up a slot it was
    /// released into.
    pub(super) async fn hold(
        &self,
        tx: &mut Tx,
        id: &str,
        job_id: &str,
        group: &str,
        cause: Cause,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO held (firing_id, job_id, group_name, cause, held_at, released_at) \
             VALUES ($1, $2, $3, $4, $5, NULL) \
             ON CONFLICT (firing_id) DO UPDATE SET cause = excluded.cause, released_at = NULL",
        )
        .bind(id)
        .bind(job_id)
        .bind(group)
        .bind(cause.as_str())
        .bind(now)
        .execute(&mut **tx)
        .await?;
        // A worker received it, so it was published, whether or not the
        // publisher's mark came yet (a mark skips held firings).
        sqlx::query(&format!(
            "UPDATE firings SET state = 'published', published_at = COALESCE(published_at, $2) \
             WHERE id = $1 AND state IN {}",
            sources_sql(Transition::Publish)
        ))
        .bind(id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "UPDATE waiting SET published_at = COALESCE(published_at, $2) WHERE firing_id = $1",
        )
        .bind(id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Forgets the held rows of firings that started or ended.
    pub(super) async fn unhold(
        &self,
        tx: &mut Tx,
        ids: &[impl AsRef<str>],
    ) -> Result<(), StoreError> {
        self.delete_rows_of(tx, "held", ids).await
    }

    /// Forgets every held firing of a job (deleted).
    pub(super) async fn unhold_job(&self, tx: &mut Tx, job_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM held WHERE job_id = $1")
            .bind(job_id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The held firings of `cause` for job `job_id` (with [`Cause::Job`]) or
    /// group `group` (the others), but `except`.
    pub(super) async fn held_count(
        &self,
        tx: &mut Tx,
        cause: Cause,
        job_id: &str,
        group: &str,
        except: &str,
    ) -> Result<HeldCount, StoreError> {
        let (column, key) = match cause {
            Cause::Job => ("job_id", job_id),
            Cause::Group | Cause::Rate => ("group_name", group),
        };
        let (waiting, released): (i64, i64) = sqlx::query_as(&format!(
            "SELECT CAST(COALESCE(SUM(CASE WHEN released_at IS NULL THEN 1 ELSE 0 END), 0) \
                     AS BIGINT), \
                 CAST(COALESCE(SUM(CASE WHEN released_at IS NULL THEN 0 ELSE 1 END), 0) \
                     AS BIGINT) \
             FROM held WHERE {column} = $1 AND cause = $2 AND firing_id <> $3"
        ))
        .bind(key)
        .bind(cause.as_str())
        .bind(except)
        .fetch_one(&mut **tx)
        .await?;
        Ok(HeldCount { waiting, released })
    }

    /// Firing `id`'s held row, if it has one.
    pub(super) async fn own_hold(&self, tx: &mut Tx, id: &str) -> Result<Option<Hold>, StoreError> {
        let row: Option<(String, i64, Option<i64>)> =
            sqlx::query_as("SELECT cause, held_at, released_at FROM held WHERE firing_id = $1")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?;
        Ok(row.and_then(|(cause, held_at, released_at)| {
            let cause = Cause::parse(&cause)?;
            Some(Hold {
                cause,
                held_at,
                released: released_at.is_some(),
            })
        }))
    }

    /// Releases what the limits of job `job_id` (in `group`) and of its
    /// group leave room for, oldest held first; returns the firings
    /// released. Called wherever a slot may have freed.
    pub(super) async fn release_held(
        &self,
        tx: &mut Tx,
        job_id: &str,
        group: &str,
        now: i64,
    ) -> Result<Vec<FiringId>, StoreError> {
        // Most finishes free a slot nobody waits for: one probe, and done.
        // (Every held firing of the job is in its group.)
        let waiting: Option<String> = sqlx::query_scalar(
            "SELECT firing_id FROM held WHERE group_name = $1 AND released_at IS NULL LIMIT 1",
        )
        .bind(group)
        .fetch_optional(&mut **tx)
        .await?;
        if waiting.is_none() {
            return Ok(Vec::new());
        }
        let mut released = Vec::new();
        let job_limit = self
            .read_job(tx, job_id, false)
            .await?
            .and_then(|job| job.spec.concurrency.limit(job.spec.overlap));
        let running = self.running_in(tx, "job_id", job_id).await?;
        let room = match job_limit {
            Some(limit) => {
                let held = self.held_count(tx, Cause::Job, job_id, group, "").await?;
                i64::from(limit) - running - held.released
            }
            // The job's limit was lifted: nothing waits for it any more.
            None => i64::MAX,
        };
        released.extend(self.release(tx, Cause::Job, job_id, room, now).await?);

        let limits = self.read_group_limits(tx, group, false).await?;
        let running = self.running_in(tx, "group_name", group).await?;
        let room = match limits.as_ref().and_then(|l| l.max_concurrent) {
            Some(max) => {
                let held = self.held_count(tx, Cause::Group, job_id, group, "").await?;
                i64::from(max) - running - held.released
            }
            None => i64::MAX,
        };
        released.extend(self.release(tx, Cause::Group, group, room, now).await?);
        let room = match limits.as_ref().and_then(|l| l.max_per_second) {
            Some(max) => {
                let held = self.held_count(tx, Cause::Rate, job_id, group, "").await?;
                i64::from(max) - self.starts_in_window(tx, group, now).await? - held.released
            }
            None => i64::MAX,
        };
        released.extend(self.release(tx, Cause::Rate, group, room, now).await?);
        Ok(released)
    }

    /// The firings executing now of the job or group `key` (`column` is
    /// `job_id` or `group_name` of the executing table).
    pub(super) async fn running_in(
        &self,
        tx: &mut Tx,
        column: &str,
        key: &str,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM executing WHERE {column} = $1"
        ))
        .bind(key)
        .fetch_one(&mut **tx)
        .await?)
    }

    /// Releases up to `room` of the oldest waiting held firings of `cause`
    /// for `key` (a job id for [`Cause::Job`], else a group).
    async fn release(
        &self,
        tx: &mut Tx,
        cause: Cause,
        key: &str,
        room: i64,
        now: i64,
    ) -> Result<Vec<FiringId>, StoreError> {
        if room <= 0 {
            return Ok(Vec::new());
        }
        let column = match cause {
            Cause::Job => "job_id",
            Cause::Group | Cause::Rate => "group_name",
        };
        let ids: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT firing_id FROM held WHERE {column} = $1 AND cause = $2 \
                 AND released_at IS NULL \
             ORDER BY held_at, firing_id LIMIT $3"
        ))
        .bind(key)
        .bind(cause.as_str())
        .bind(room.min(i64::from(u32::MAX)))
        .fetch_all(&mut **tx)
        .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let batch = id_batch(&ids)?;
        let selected = format!(
            "(SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        sqlx::query(&format!(
            "UPDATE held SET released_at = $3 WHERE firing_id IN {selected}"
        ))
        .bind_rows(&batch)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        sqlx::query(&format!(
            "UPDATE firings SET state = 'staged', due_at = $3, publish_seq = publish_seq + 1 \
             WHERE id IN {selected} AND state IN {}",
            sources_sql(Transition::Release)
        ))
        .bind_rows(&batch)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        // Unadopted again: the next slice of its partition publishes it.
        sqlx::query(&format!(
            "UPDATE waiting SET slice = NULL, due_at = $3, published_at = NULL \
             WHERE firing_id IN {selected}"
        ))
        .bind_rows(&batch)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(ids
            .iter()
            .filter_map(|id| match rows::firing_id(id) {
                Ok(id) => Some(id),
                Err(e) => {
                    tracing::error!(error = %e, "released a held firing whose id is corrupt");
                    None
                }
            })
            .collect())
    }

    /// The jobs and groups that hold firings not yet released, at most
    /// `limit` of them: what the periodic release pass looks at.
    pub(crate) async fn holding(&self, limit: u32) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT DISTINCT job_id, group_name FROM held WHERE released_at IS NULL \
             ORDER BY job_id LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?)
    }

    /// Releases what the limits of job `job_id` and its `group` leave room
    /// for, in a transaction of its own (the periodic pass).
    pub async fn release_for(
        &self,
        job_id: &str,
        group: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<FiringId>, StoreError> {
        let now = super::values::ms(now);
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            // The job row lock orders this with the job's starts.
            self.read_job(&mut tx, job_id, true).await?;
            self.lock_group_limits(&mut tx, group).await?;
            let released = self.release_held(&mut tx, job_id, group, now).await?;
            tx.commit().await?;
            Ok(released)
        })
        .await
    }
}
