//! Addressed firings (a broadcast job's shares) that wait for their worker:
//! the reads the offers pass offers again, and the withdraw transition
//! that ends one `lost` when its worker is gone or never takes it.

use super::error::StoreError;
use super::handle::Store;
use super::rows::STAGED_COLUMNS;
use super::stage::decode_staged;
use super::states::{sources, Transition};
use super::types::StagedFiring;
use super::values::ms;
use chime_common::protocol::{Alert, AlertKind};
use chime_common::{FiringId, FiringState};
use chrono::{DateTime, Utc};

impl Store {
    /// Addressed firings still waiting for their start (staged or
    /// published, not held by a limit) due before `due_before`, oldest
    /// first, at most `limit`. Corrupt rows are logged and left out.
    pub async fn offered_unstarted(
        &self,
        due_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<StagedFiring>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {STAGED_COLUMNS} FROM firings f \
             WHERE f.worker_id IS NOT NULL AND f.state IN ('staged', 'published') \
                 AND f.due_at < $1 \
                 AND NOT EXISTS (SELECT 1 FROM held h \
                     WHERE h.firing_id = f.id AND h.released_at IS NULL) \
             ORDER BY f.due_at, f.id LIMIT $2"
        ))
        .bind(ms(due_before))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        Ok(decode_staged(&rows).0)
    }

    /// Ends addressed firing `id`, which its worker did not start, `lost`
    /// with `error`, without a retry: its share belongs to that worker
    /// alone. Returns the `firing_lost` alert, or `None` when it no longer
    /// waits (it started, or ended, meanwhile).
    pub async fn withdraw_offer(
        &self,
        id: &FiringId,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Alert>, StoreError> {
        let now_ms = ms(now);
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let Some(firing) = self.lock_firing(&mut tx, id).await? else {
                return Ok(None);
            };
            if firing.addressed_to.is_none()
                || !sources(Transition::Withdraw).contains(&firing.state)
            {
                return Ok(None);
            }
            self.end_unstarted(&mut tx, &firing.text, FiringState::Lost, error, now_ms)
                .await?;
            self.record_ends(&mut tx, &[firing.text.as_str()]).await?;
            tx.commit().await?;
            Ok(Some(firing.alert(
                AlertKind::FiringLost,
                format!("firing {id} was lost before it started: {error}"),
                now_ms,
            )))
        })
        .await
    }
}
