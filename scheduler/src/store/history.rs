//! Firing history: listing, retention, gauges, recent activity.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::listing::{page_of, Conditions};
use super::rows::{self, FIRING_COLUMNS};
use super::types::{FiringFilter, Page};
use super::values::{id_batch, ms, RowExt};
use chime_common::api::page_limit;
use chime_common::{Firing, FiringId, FiringState};
use chrono::{DateTime, Utc};

/// Final states, as stored.
const FINAL_STATES: &str = "('succeeded', 'failed', 'lost', 'skipped', 'cancelled')";

impl Store {
    /// One page of firings, newest first (`scheduled_at`, then shard, then
    /// attempt, then id, descending: a sharded instant's firings together).
    /// The cursor is the last firing's id.
    pub async fn list_firings(&self, filter: &FiringFilter) -> Result<Page<Firing>, StoreError> {
        let limit = page_limit(filter.limit);
        let after: Option<FiringId> = filter
            .after
            .as_deref()
            .map(|c| {
                c.parse().map_err(|_| {
                    StoreError::invalid(
                        "after",
                        "is not a cursor from a previous firings.list reply",
                    )
                })
            })
            .transpose()?;
        let mut conditions = Conditions::default();
        if let Some(job_id) = &filter.job_id {
            let job_id = conditions.param(job_id.as_str());
            conditions.push(format!("job_id = {job_id}"));
        }
        if let Some(state) = filter.state {
            let state = conditions.param(state.as_str());
            conditions.push(format!("state = {state}"));
        }
        if let Some(cursor) = &after {
            let (scheduled, shard, attempt, id) = (
                conditions.param(cursor.scheduled_ms),
                conditions.param(i64::from(cursor.shard.unwrap_or(0))),
                conditions.param(i64::from(cursor.attempt)),
                conditions.param(cursor.to_string().as_str()),
            );
            conditions.push(format!(
                "(scheduled_at, shard, attempt, id) < ({scheduled}, {shard}, {attempt}, {id})"
            ));
        }
        let limit_param = conditions.param(i64::from(limit) + 1);
        let sql = format!(
            "SELECT {FIRING_COLUMNS} FROM firings {} \
             ORDER BY scheduled_at DESC, shard DESC, attempt DESC, id DESC LIMIT {limit_param}",
            conditions.where_clause()
        );
        let found = conditions
            .bind(sqlx::query(&sql))
            .fetch_all(&self.read)
            .await?;
        let mut items = found
            .iter()
            .map(rows::firing)
            .collect::<Result<Vec<_>, _>>()?;
        self.mark_held(&mut items).await?;
        Ok(page_of(items, limit, |f| f.id.to_string()))
    }

    /// One firing by its id, `None` if there is none.
    pub async fn get_firing(&self, id: &FiringId) -> Result<Option<Firing>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {FIRING_COLUMNS} FROM firings WHERE id = $1"
        ))
        .bind(id.to_string())
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(rows::firing).transpose()
    }

    /// One batch of the retention sweep (see [`RetentionCursor`]): scans the
    /// next `batch` firings after `after` scheduled before `finished_before`,
    /// then deletes, of the firings of the jobs it met scheduled no later
    /// than the last one scanned, those in a final state that finished
    /// before `finished_before`, except each job's newest `keep_per_job`
    /// final firings whatever their age.
    ///
    /// The scan reads an index from where the last batch stopped, and each
    /// job's newest final firings are read from its own index range, so a
    /// batch costs the same however long the history is; on SQLite only the
    /// delete takes the writer.
    pub async fn prune_history(
        &self,
        finished_before: DateTime<Utc>,
        keep_per_job: u32,
        after: &RetentionCursor,
        batch: u32,
    ) -> Result<Pruned, StoreError> {
        let before = ms(finished_before);
        let scanned = sqlx::query(
            // The row comparison alone, so that SQLite seeks the index to
            // the cursor (with a separate bound on `scheduled_at` it scans
            // from the start of the cursor's instant, which many firings
            // may share).
            "SELECT scheduled_at, shard, attempt, id, job_id FROM firings \
             WHERE (scheduled_at, shard, attempt, id) > ($2, $3, $4, $5) AND scheduled_at < $1 \
             ORDER BY scheduled_at, shard, attempt, id LIMIT $6",
        )
        .bind(before)
        .bind(after.scheduled_at)
        .bind(after.shard)
        .bind(after.attempt)
        .bind(after.id.as_str())
        .bind(i64::from(batch))
        .fetch_all(&self.read)
        .await?;
        let Some(last) = scanned.last() else {
            return Ok(Pruned {
                deleted: 0,
                scanned: 0,
                cursor: after.clone(),
            });
        };
        let cursor = RetentionCursor {
            scheduled_at: last.int("retention", "scheduled_at")?,
            shard: last.int("retention", "shard")?,
            attempt: last.int("retention", "attempt")?,
            id: last.text("retention", "id")?,
        };
        let mut jobs: Vec<String> = scanned
            .iter()
            .map(|row| row.text("retention", "job_id"))
            .collect::<Result<_, _>>()?;
        jobs.sort_unstable();
        jobs.dedup();
        let jobs = id_batch(&jobs)?;
        // A job's cutoff is its newest final firing past the kept ones: it
        // and every final firing before it may go. Materialized, so that it
        // is read once per job, not once per firing deleted.
        let sql = format!(
            "WITH cut AS MATERIALIZED ( \
                 SELECT r.id AS job_id, ( \
                     SELECT n.id FROM firings n WHERE n.job_id = r.id AND n.state IN {FINAL_STATES} \
                     ORDER BY n.scheduled_at DESC, n.shard DESC, n.attempt DESC LIMIT 1 OFFSET $3 \
                 ) AS cutoff \
                 FROM {}) \
             DELETE FROM firings WHERE id IN ( \
                 SELECT f.id FROM cut \
                 JOIN firings c ON c.id = cut.cutoff \
                 JOIN firings f ON f.job_id = cut.job_id \
                 WHERE f.state IN {FINAL_STATES} AND f.finished_at < $1 AND f.scheduled_at <= $2 \
                     AND (f.scheduled_at, f.shard, f.attempt) <= (c.scheduled_at, c.shard, c.attempt))",
            self.backend.json_rows(4, &[("id", Col::Text)])
        );
        let deleted = self
            .retrying(|| async {
                let done = sqlx::query(&sql)
                    .bind(before)
                    .bind(cursor.scheduled_at)
                    .bind(i64::from(keep_per_job))
                    .bind_rows(&jobs)
                    .execute(&self.write)
                    .await?;
                Ok(done.rows_affected())
            })
            .await?;
        Ok(Pruned {
            deleted,
            scanned: scanned.len(),
            cursor,
        })
    }

    /// How many firings are staged, published and executing, per group (for
    /// gauges). Groups with none in a state are absent.
    pub async fn counts_by_state(&self) -> Result<Vec<(String, FiringState, i64)>, StoreError> {
        let found = sqlx::query(
            "SELECT group_name, 'staged' AS state, COUNT(*) AS n FROM waiting \
                 WHERE published_at IS NULL GROUP BY group_name \
             UNION ALL \
             SELECT group_name, 'published' AS state, COUNT(*) AS n FROM waiting \
                 WHERE published_at IS NOT NULL GROUP BY group_name \
             UNION ALL \
             SELECT group_name, 'executing' AS state, COUNT(*) AS n FROM executing \
                 GROUP BY group_name \
             ORDER BY group_name, state",
        )
        .fetch_all(&self.read)
        .await?;
        let mut counts = Vec::with_capacity(found.len());
        for row in &found {
            let group = row.text("counts", "group_name")?;
            let state = rows::firing_state(&group, &row.text(&group, "state")?)?;
            counts.push((group.clone(), state, row.int(&group, "n")?));
        }
        Ok(counts)
    }
}

/// Where the retention sweep has got to: the last firing it scanned, in
/// the order of `firings_recent_shard` (`scheduled_at`, shard, attempt,
/// id). The sweep starts from the oldest firing and then follows the
/// retention age forward, so each firing is scanned about once, as it
/// comes of age: its job's older firings are then deleted with it. A
/// firing kept because it was among its job's newest (or not yet final)
/// goes when a later firing of its job comes of age; a job that no longer
/// fires keeps its newest `keep_per_job`, as it should.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionCursor {
    scheduled_at: i64,
    shard: i64,
    attempt: i64,
    id: String,
}

impl Default for RetentionCursor {
    /// Before every firing.
    fn default() -> Self {
        RetentionCursor {
            scheduled_at: i64::MIN,
            shard: i64::MIN,
            attempt: i64::MIN,
            id: String::new(),
        }
    }
}

/// What one batch of the retention sweep did.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    pub deleted: u64,
    /// Firings scanned: fewer than the batch asked once the sweep has
    /// reached the retention age.
    pub scanned: usize,
    /// Where the next batch starts.
    pub cursor: RetentionCursor,
}

/// What firings did lately, for the console's overview: read from the
/// newest rows of `firings_recent`, at most `cap` of them, so the cost is
/// bounded whatever the rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    /// The span the counts cover: the window asked for, or less when the cap was reached.
    pub covered_ms: i64,
    pub started: u64,
    pub succeeded: u64,
    /// Ended `failed` or `lost`.
    pub failed: u64,
    /// Start lateness (started − due) of the firings that started, sorted.
    pub lateness_ms: Vec<i64>,
    /// Rows of the `executing` table now.
    pub executing: i64,
}

impl Store {
    /// Firings scheduled in the `window` before `now`.
    pub async fn activity(
        &self,
        now: DateTime<Utc>,
        window: std::time::Duration,
        cap: u32,
    ) -> Result<Activity, StoreError> {
        let now_ms = ms(now);
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let since = now_ms.saturating_sub(window_ms);
        let found = sqlx::query(
            "SELECT state, scheduled_at, due_at, started_at FROM firings \
             WHERE scheduled_at >= $1 AND scheduled_at <= $2 \
             ORDER BY scheduled_at DESC, shard DESC, attempt DESC, id DESC LIMIT $3",
        )
        .bind(since)
        .bind(now_ms)
        .bind(i64::from(cap))
        .fetch_all(&self.read)
        .await?;
        let mut activity = Activity {
            covered_ms: window_ms,
            ..Activity::default()
        };
        if found.len() >= cap as usize {
            if let Some(oldest) = found.last() {
                let oldest = oldest.int("activity", "scheduled_at")?;
                activity.covered_ms = now_ms.saturating_sub(oldest).max(1);
            }
        }
        for row in &found {
            match row.text("activity", "state")?.as_str() {
                "succeeded" => activity.succeeded += 1,
                "failed" | "lost" => activity.failed += 1,
                _ => {}
            }
            if let Some(started) = row.opt_int("activity", "started_at")? {
                activity.started += 1;
                let due = row.int("activity", "due_at")?;
                activity
                    .lateness_ms
                    .push(started.saturating_sub(due).max(0));
            }
        }
        activity.lateness_ms.sort_unstable();
        activity.executing = sqlx::query("SELECT COUNT(*) AS n FROM executing")
            .fetch_one(&self.read)
            .await?
            .int("activity", "n")?;
        Ok(activity)
    }
}
