//! The retry transition: after an attempt ends `failed` or `lost`, the next
//! attempt is staged (a firing of its own, unadopted, due after the retry
//! policy's delay) while the job's policy allows another.
//!
//! An attempt the infrastructure ended (its worker lost or silent, its run
//! fenced or cut by a drain, its start never run) does not spend the job's
//! `max_attempts`: it is run again while the store's own infrastructure
//! budget (`--infra-retries`) lasts, and each firing carries how many such
//! retries led to it, so the job's attempts spent are
//! `attempt - infra_retries`.

use super::error::StoreError;
use super::handle::Store;
use super::locks::{FiringRow, JobRow, Tx};
use super::values::at_ms;
use super::waiting::Waiting;
use chime_common::{FiringId, RetryPolicy};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The error of an attempt the infrastructure ended once its instant had
/// been run again `retries` times for such faults already.
pub(super) fn exhausted(reason: &str, retries: u32) -> String {
    format!(
        "{reason}; not run again: its instant was already run again {retries} time(s) \
         after faults of the infrastructure (--infra-retries)"
    )
}

/// The retry delay callback of [`Store::finish`] and [`Store::requeue`]: the
/// delay before the attempt after `attempt` failed, under the policy.
pub type RetryDelay = dyn Fn(&RetryPolicy, u32) -> Duration + Sync;

/// What ended an attempt that is to be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The job's run failed: spends one of the job's attempts.
    ByTheJob,
    /// A fault of the infrastructure: spends one of the infrastructure budget.
    ByTheInfrastructure,
}

/// When the next attempt is due, `delay` after `now` (its attempt's end); `None` when that does
/// not fit (a delay validation never lets in), which ends the firing
/// instead of retrying it.
fn retry_due(now: i64, delay: Duration) -> Option<i64> {
    i64::try_from(delay.as_millis())
        .ok()
        .and_then(|delay| now.checked_add(delay))
        .filter(|&due| DateTime::from_timestamp_millis(due).is_some())
}

impl Store {
    /// Whether the infrastructure budget allows running `ended`'s instant
    /// again after a fault of the infrastructure.
    pub(super) fn infra_budget_left(&self, ended: &FiringRow) -> bool {
        ended.infra_retries < self.infra_retries
    }

    /// Stages the attempt after `ended` if its job (`None`: deleted or
    /// unreadable) allows another, `by` the job's retry policy or the
    /// infrastructure budget; returns it and when it is due, or `None` when
    /// no attempt remains. Either waits the job's retry delay for the
    /// retries of its kind so far, counted from `ended_at`, when the
    /// attempt ended (`now` for an attempt the scheduler ended itself).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn retry(
        &self,
        tx: &mut Tx,
        ended: &FiringRow,
        job: Option<&JobRow>,
        now: i64,
        ended_at: i64,
        retry_delay: &RetryDelay,
        by: Ended,
    ) -> Result<Option<(FiringId, DateTime<Utc>)>, StoreError> {
        let spent = ended.attempts_spent();
        let (allowed, nth, infra_retries) = match by {
            Ended::ByTheJob => (
                job.is_some_and(|j| spent < j.spec.retry.max_attempts),
                spent,
                ended.infra_retries,
            ),
            Ended::ByTheInfrastructure => (
                self.infra_budget_left(ended),
                ended.infra_retries.saturating_add(1),
                ended.infra_retries.saturating_add(1),
            ),
        };
        let due = job
            .map(|j| &j.spec.retry)
            .filter(|_| allowed)
            .and_then(|policy| retry_due(ended_at, retry_delay(policy, nth)));
        let Some(due) = due else {
            return Ok(None);
        };
        let next = ended.id.next_attempt();
        let id = next.to_string();
        let group: Option<String> = sqlx::query_scalar(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, handler, \
                 payload, payload_sha256, timeout_ms, due_at, state, created_at, backfill, \
                 shard, shards, infra_retries, traceparent, worker_id) \
             SELECT $1, job_id, scheduled_at, attempt + 1, group_name, priority, handler, payload, \
                 payload_sha256, timeout_ms, $3, 'staged', $4, backfill, shard, shards, $5, \
                 traceparent, worker_id \
             FROM firings WHERE id = $2 ON CONFLICT DO NOTHING RETURNING group_name",
        )
        .bind(id.as_str())
        .bind(ended.text.as_str())
        .bind(due)
        .bind(now)
        .bind(i64::from(infra_retries))
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(group) = group {
            let waiting = Waiting {
                id: &id,
                group_name: &group,
                part: self.partition_of(&ended.id.job_id),
                due_at: due,
                slice: None,
            };
            self.add_waiting(tx, &[waiting]).await?;
        }
        Ok(Some((next, at_ms(due))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_instant_that_does_not_fit_ends_the_firing() {
        assert_eq!(retry_due(1_000, Duration::from_secs(2)), Some(3_000));
        assert_eq!(retry_due(1_000, Duration::MAX), None);
        assert_eq!(retry_due(i64::MAX - 1, Duration::from_millis(5)), None);
    }
}
