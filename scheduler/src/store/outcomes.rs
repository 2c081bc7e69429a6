//! The newest succeeded and the newest failed end of each job
//! (`job_outcomes`), for the per-job freshness gauges
//! (`ops/job_metrics.rs`).
//!
//! Every transition that ends firings `succeeded`, `failed` or `lost`
//! (finish, requeue, refuse) records them in the same transaction, from
//! the firing rows themselves: what each ended as and its `finished_at`.
//! An instant recorded never goes back, so a redelivered event or an older
//! end applied late changes nothing. Rows are written in job order, so
//! concurrent finishes lock them in one order. A deleted job's row goes
//! with it (`jobs.rs`), and the reads join `jobs`, so a job deleted while
//! one of its firings was still finishing never shows.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::values::{at_ms, id_batch};
use chime_common::Job;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// A job's newest ends, as the gauges export them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    pub job_id: String,
    /// The job's group now.
    pub group: String,
    /// `finished_at` of its newest `succeeded` firing.
    pub last_success: Option<DateTime<Utc>>,
    /// `finished_at` of its newest `failed` (timed out included) or `lost` firing.
    pub last_failure: Option<DateTime<Utc>>,
}

/// The first jobs with an end, by id, and how many there are in all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobOutcomes {
    pub jobs: Vec<JobOutcome>,
    /// Jobs with at least one end recorded (more than `jobs` holds when
    /// the read was limited).
    pub total: u64,
}

/// `column = the later of the stored value and the one being recorded`
/// (NULL on either side keeps the other): the same text on both backends.
fn keep_later(column: &str) -> String {
    format!(
        "{column} = CASE WHEN job_outcomes.{column} IS NULL \
             OR excluded.{column} > job_outcomes.{column} \
             THEN excluded.{column} ELSE job_outcomes.{column} END"
    )
}

/// Records the ends `source` selects: one row per job, with columns
/// `job_id`, `last_success_at`, `last_failure_at` in that order, ordered
/// by job id (the fast path of finish embeds it in its own statement).
pub(super) fn record_ends_sql(source: &str) -> String {
    format!(
        "INSERT INTO job_outcomes (job_id, last_success_at, last_failure_at) {source} \
         ON CONFLICT (job_id) DO UPDATE SET {}, {}",
        keep_later("last_success_at"),
        keep_later("last_failure_at")
    )
}

/// The ends of the firings `f` that `filter` selects, as
/// [`record_ends_sql`] takes them. The `WHERE` also keeps SQLite from
/// reading `ON CONFLICT` as a join's `ON`.
fn ends_of(filter: &str) -> String {
    format!(
        "SELECT f.job_id, \
             MAX(CASE WHEN f.state = 'succeeded' THEN f.finished_at END), \
             MAX(CASE WHEN f.state IN ('failed', 'lost') THEN f.finished_at END) \
         FROM firings f \
         WHERE {filter} AND f.state IN ('succeeded', 'failed', 'lost') \
             AND f.finished_at IS NOT NULL \
         GROUP BY f.job_id ORDER BY f.job_id"
    )
}

/// A row of the reads below.
type Row = (String, String, Option<i64>, Option<i64>);

const READ: &str = "SELECT o.job_id, j.group_name, o.last_success_at, o.last_failure_at \
     FROM job_outcomes o JOIN jobs j ON j.id = o.job_id";

fn outcome((job_id, group, success, failure): Row) -> JobOutcome {
    JobOutcome {
        job_id,
        group,
        last_success: success.map(at_ms),
        last_failure: failure.map(at_ms),
    }
}

impl Store {
    /// Records the ends of the firings `ids` that are `succeeded`, `failed`
    /// or `lost` (others are left out), inside the transaction that ended them.
    pub(super) async fn record_ends<S: AsRef<str>>(
        &self,
        tx: &mut Tx,
        ids: &[S],
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let rows = self.backend.json_rows(1, &[("id", Col::Text)]);
        let sql = record_ends_sql(&ends_of(&format!("f.id IN (SELECT r.id FROM {rows})")));
        sqlx::query(&sql)
            .bind_rows(&id_batch(ids)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// The first `limit` jobs with an end recorded, by id, and how many
    /// there are in all.
    pub async fn job_outcomes(&self, limit: usize) -> Result<JobOutcomes, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<Row> = sqlx::query_as(&format!("{READ} ORDER BY o.job_id LIMIT $1"))
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        let total: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_outcomes o JOIN jobs j ON j.id = o.job_id",
        )
        .fetch_one(&self.read)
        .await?;
        Ok(JobOutcomes {
            jobs: rows.into_iter().map(outcome).collect(),
            total: u64::try_from(total).unwrap_or(0),
        })
    }

    /// The ends recorded for the jobs `ids`; a job that does not exist, or
    /// has none, is left out.
    pub async fn job_outcomes_of<S: AsRef<str>>(
        &self,
        ids: &[S],
    ) -> Result<Vec<JobOutcome>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.backend.json_rows(1, &[("id", Col::Text)]);
        let rows: Vec<Row> = sqlx::query_as(&format!(
            "{READ} WHERE o.job_id IN (SELECT r.id FROM {rows}) ORDER BY o.job_id"
        ))
        .bind_rows(&id_batch(ids)?)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.into_iter().map(outcome).collect())
    }

    /// Sets each job's `last_success_at` from its recorded ends: one read
    /// for the whole page, whatever its length.
    pub async fn mark_last_success(&self, jobs: &mut [Job]) -> Result<(), StoreError> {
        let ids: Vec<&str> = jobs.iter().map(|j| j.spec.id.as_str()).collect();
        let ends: HashMap<String, Option<DateTime<Utc>>> = self
            .job_outcomes_of(&ids)
            .await?
            .into_iter()
            .map(|o| (o.job_id, o.last_success))
            .collect();
        for job in jobs {
            job.last_success_at = ends.get(&job.spec.id).copied().flatten();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_stores::TestStore;
    use super::*;
    use chime_common::protocol::{Finished, Outcome, StartRequest};
    use chime_common::FiringId;

    /// The tests' present.
    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_893_456_000, 0).expect("an instant")
    }

    fn later() -> DateTime<Utc> {
        now() + chrono::Duration::seconds(90)
    }

    /// Starts `id` at `at` for worker `w1`.
    async fn start(test: &TestStore, id: &FiringId, at: DateTime<Utc>) {
        let request = StartRequest {
            firing_id: id.clone(),
            worker_id: "w1".into(),
            group: "default".into(),
            handler: None,
            payload_sha256: None,
        };
        let started = test.store.start(&[request], at).await.expect("start");
        assert!(started[0].reply.accepted, "{started:?}");
    }

    /// Starts `id` at `at` and reports `outcome` at once, applied at `at`.
    async fn run(test: &TestStore, id: &FiringId, outcome: Outcome, at: DateTime<Utc>) {
        start(test, id, at).await;
        let event = Finished {
            firing_id: id.clone(),
            worker_id: "w1".into(),
            outcome,
            error: None,
            interrupted: None,
            output: None,
            started_at: at,
            finished_at: at,
        };
        let retry_later =
            |_: &chime_common::RetryPolicy, _: u32| std::time::Duration::from_secs(60);
        let applied = test
            .store
            .finish(&[event], at, &retry_later)
            .await
            .expect("applied");
        assert!(applied[0].applied, "{applied:?}");
    }

    fn ends(
        job: &str,
        success: Option<DateTime<Utc>>,
        failure: Option<DateTime<Utc>>,
    ) -> JobOutcome {
        JobOutcome {
            job_id: job.into(),
            group: "default".into(),
            last_success: success,
            last_failure: failure,
        }
    }

    /// A success (fast path), a failure (transaction path) and a lost
    /// attempt (requeue) are each recorded as their firing's end; an older
    /// end applied later changes nothing; a deleted job leaves the reads.
    async fn every_end_is_recorded_and_never_goes_back(test: TestStore) {
        let ok = test.triggered_job("a-ok", now()).await;
        run(&test, &ok, Outcome::Succeeded, later()).await;
        let failing = test.triggered_job("b-failing", now()).await;
        run(&test, &failing, Outcome::Failed, now()).await;
        let timed_out = test.triggered_job("c-timed-out", now()).await;
        run(&test, &timed_out, Outcome::TimedOut, later()).await;
        let lost = test.triggered_job("d-lost", now()).await;
        start(&test, &lost, now()).await;
        let executing = test.store.executing(10).await.expect("executing");
        let row = executing
            .iter()
            .find(|row| row.firing_id == lost)
            .expect("d-lost runs");
        let retry_later =
            |_: &chime_common::RetryPolicy, _: u32| std::time::Duration::from_secs(60);
        test.store
            .requeue(row, "worker vanished", later(), &retry_later)
            .await
            .expect("requeue")
            .expect("requeued");

        // An older success of a-ok, applied after the newer one.
        let older = test
            .store
            .trigger("a-ok", None, now())
            .await
            .expect("trigger")
            .expect("a firing");
        run(&test, &older, Outcome::Succeeded, now()).await;

        let read = test.store.job_outcomes(100).await.expect("read");
        assert_eq!(
            read,
            JobOutcomes {
                jobs: vec![
                    ends("a-ok", Some(later()), None),
                    ends("b-failing", None, Some(now())),
                    ends("c-timed-out", None, Some(later())),
                    ends("d-lost", None, Some(later())),
                ],
                total: 4,
            }
        );
        let limited = test.store.job_outcomes(2).await.expect("read");
        assert_eq!(limited.jobs, read.jobs[..2].to_vec());
        assert_eq!(limited.total, 4);
        let some = test
            .store
            .job_outcomes_of(&["d-lost", "no-such-job", "a-ok"])
            .await
            .expect("read");
        assert_eq!(some, vec![read.jobs[0].clone(), read.jobs[3].clone()]);

        test.store
            .delete_job("b-failing", later())
            .await
            .expect("delete")
            .expect("deleted");
        let after = test.store.job_outcomes(100).await.expect("read");
        assert_eq!(after.total, 3);
        assert!(after.jobs.iter().all(|job| job.job_id != "b-failing"));
        let again = test.triggered_job("b-failing", later()).await;
        assert!(
            test.store
                .job_outcomes_of(&["b-failing"])
                .await
                .expect("read")
                .is_empty(),
            "a job put again under a deleted job's id starts without ends ({again})"
        );
    }

    #[tokio::test]
    async fn postgres_records_every_end_and_never_goes_back() {
        every_end_is_recorded_and_never_goes_back(TestStore::postgres().await).await;
    }

    #[tokio::test]
    async fn sqlite_records_every_end_and_never_goes_back() {
        every_end_is_recorded_and_never_goes_back(TestStore::sqlite().await).await;
    }
}
