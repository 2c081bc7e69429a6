//! `overlap: queue`: the one firing a job holds back while another of its
//! firings runs (the `pending` table), and its release when none runs any
//! more. A queued firing stays `staged` or `published` meanwhile.

use super::locks::Tx;
use super::rows;
use super::states::{sources_sql, Transition};
use super::{Store, StoreError};
use chime_common::FiringId;

impl Store {
    /// Queues firing `id` of `job_id` unless another firing of the job is
    /// queued already; true if `id` is (now or before) the queued one.
    pub(super) async fn enqueue(
        &self,
        tx: &mut Tx,
        job_id: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        match self.queued_of(tx, job_id).await? {
            Some(queued) => Ok(queued == id),
            None => {
                sqlx::query("INSERT INTO pending (job_id, firing_id) VALUES ($1, $2)")
                    .bind(job_id)
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
                Ok(true)
            }
        }
    }

    /// Forgets that firing `id` was queued: it started.
    pub(super) async fn dequeue(
        &self,
        tx: &mut Tx,
        job_id: &str,
        id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM pending WHERE job_id = $1 AND firing_id = $2")
            .bind(job_id)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Forgets the job's queued firing, if any.
    pub(super) async fn forget_queued(&self, tx: &mut Tx, job_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM pending WHERE job_id = $1")
            .bind(job_id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The job's queued firing.
    async fn queued_of(&self, tx: &mut Tx, job_id: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT firing_id FROM pending WHERE job_id = $1")
                .bind(job_id)
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    /// Releases the job's queued firing if none of its firings still runs:
    /// staged again, unadopted, due now, with the next publish sequence.
    pub(super) async fn release_queued(
        &self,
        tx: &mut Tx,
        job_id: &str,
        now: i64,
    ) -> Result<Option<FiringId>, StoreError> {
        let Some(queued) = self.queued_of(tx, job_id).await? else {
            return Ok(None);
        };
        let running: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM executing WHERE job_id = $1")
            .bind(job_id)
            .fetch_one(&mut **tx)
            .await?;
        if running > 0 {
            return Ok(None);
        }
        self.forget_queued(tx, job_id).await?;
        let released = sqlx::query(&format!(
            "UPDATE firings SET state = 'staged', due_at = $2, publish_seq = publish_seq + 1 \
             WHERE id = $1 AND state IN {}",
            sources_sql(Transition::Release)
        ))
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
}
