//! The requeue transition: a running attempt whose worker vanished, whose
//! deadline passed unreported, or that its live worker says it does not
//! run, ends `lost`, and is run again without spending the job's attempts
//! while the infrastructure budget lasts (`retry.rs`). The expiry service
//! finds such attempts with [`Store::executing`].

use super::error::StoreError;
use super::executing::Lease;
use super::finish::end_firing;
use super::handle::Store;
use super::locks::Tx;
use super::retry::{exhausted, Ended, RetryDelay};
use super::types::{ExecutingRow, RequeueOutcome};
use super::values::ms;
use chime_common::protocol::AlertKind;
use chime_common::FiringState;
use chrono::{DateTime, Utc};

impl Store {
    /// Gives up on a running attempt (its worker vanished, its deadline
    /// passed, or its worker does not run it), atomically and once: only if
    /// `row` is still the firing's executing row. The attempt ends `lost`
    /// with `reason` and the next attempt is staged while the
    /// infrastructure budget lasts. Past the budget the attempt ends
    /// `failed` with a `firing_failed` alert and counts towards
    /// `alert_after_failures`; a firing whose job is gone ends `lost` with
    /// a `firing_lost` alert.
    pub async fn requeue(
        &self,
        row: &ExecutingRow,
        reason: &str,
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<Option<RequeueOutcome>, StoreError> {
        let now = ms(now);
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
        now: i64,
        retry_delay: &RetryDelay,
    ) -> Result<Option<RequeueOutcome>, StoreError> {
        let firing = self.lock_firing(tx, &row.firing_id).await?;
        let id = row.firing_id.to_string();
        let lease = Lease {
            id: &id,
            worker_id: &row.worker_id,
        };
        if self.end_executing(tx, &[lease]).await?.is_empty() {
            return Ok(None);
        }
        let mut outcome = RequeueOutcome {
            lost: row.firing_id.clone(),
            retry: None,
            released: Vec::new(),
            alert: None,
            repeated: None,
            exhausted: false,
        };
        // No readable firing row: its executing row is still cleared, once.
        let Some(firing) = firing else {
            return Ok(Some(outcome));
        };
        end_firing(tx, &id, FiringState::Lost, Some(reason), None, now).await?;
        let job_id = firing.id.job_id.as_str();
        let job = self.read_job(tx, job_id, false).await?;
        outcome.retry = self
            .retry(
                tx,
                &firing,
                job.as_ref(),
                now,
                now,
                retry_delay,
                Ended::ByTheInfrastructure,
            )
            .await?;
        if let (None, Some(job)) = (&outcome.retry, job) {
            // The budget is spent: the instant ends, as a failure.
            outcome.exhausted = true;
            let error = exhausted(reason, firing.infra_retries);
            end_firing(tx, &id, FiringState::Failed, Some(&error), None, now).await?;
            outcome.alert = Some(firing.alert(
                AlertKind::FiringFailed,
                format!("firing {id} failed: {error}"),
                now,
            ));
            outcome.repeated = self.count_failure(tx, job, &firing, now).await?;
        } else if outcome.retry.is_none() {
            outcome.alert = Some(firing.alert(
                AlertKind::FiringLost,
                format!(
                    "firing {id} was lost after {} attempt(s): {reason}",
                    firing.id.attempt
                ),
                now,
            ));
        }
        self.record_ends(tx, &[&id]).await?;
        outcome.released = self.release_held(tx, job_id, &firing.group, now).await?;
        Ok(Some(outcome))
    }
}
