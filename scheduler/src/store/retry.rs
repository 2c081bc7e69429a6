//! The retry transition: after an attempt ends `failed` or `lost`, the next
//! attempt is staged (a firing of its own, unadopted, due after the retry
//! policy's delay) while the job's policy allows another.

use super::locks::{FiringRow, JobRow, Tx};
use super::waiting::Waiting;
use super::{at_ms, Store, StoreError};
use chime_common::{FiringId, RetryPolicy};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The retry delay callback of [`Store::finish`] and [`Store::requeue`]: the
/// delay before the attempt after `attempt` failed, under the policy.
pub type RetryDelay = dyn Fn(&RetryPolicy, u32) -> Duration + Sync;

/// When the next attempt is due, `delay` after `now`; `None` when that does
/// not fit (a delay validation never lets in), which ends the firing
/// instead of retrying it.
fn retry_due(now: i64, delay: Duration) -> Option<i64> {
    i64::try_from(delay.as_millis())
        .ok()
        .and_then(|delay| now.checked_add(delay))
        .filter(|&due| DateTime::from_timestamp_millis(due).is_some())
}

impl Store {
    /// Stages the attempt after `ended` if its job (`None`: deleted or
    /// unreadable) allows another; returns it and when it is due, or `None`
    /// when no attempt remains.
    pub(super) async fn retry(
        &self,
        tx: &mut Tx,
        ended: &FiringRow,
        job: Option<&JobRow>,
        now: i64,
        retry_delay: &RetryDelay,
    ) -> Result<Option<(FiringId, DateTime<Utc>)>, StoreError> {
        let attempt = ended.id.attempt;
        let due = job
            .map(|j| &j.spec.retry)
            .filter(|policy| attempt < policy.max_attempts)
            .and_then(|policy| retry_due(now, retry_delay(policy, attempt)));
        let Some(due) = due else {
            return Ok(None);
        };
        let next = ended.id.next_attempt();
        let id = next.to_string();
        let group: Option<String> = sqlx::query_scalar(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, handler, \
                 payload, payload_sha256, timeout_ms, due_at, state, created_at, backfill, \
                 shard, shards) \
             SELECT $1, job_id, scheduled_at, attempt + 1, group_name, priority, handler, payload, \
                 payload_sha256, timeout_ms, $3, 'staged', $4, backfill, shard, shards \
             FROM firings WHERE id = $2 ON CONFLICT DO NOTHING RETURNING group_name",
        )
        .bind(id.as_str())
        .bind(ended.text.as_str())
        .bind(due)
        .bind(now)
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
