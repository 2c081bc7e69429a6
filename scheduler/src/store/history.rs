//! Firing history: listing, retention, gauges, recent activity.

use super::listing::{page_of, Conditions};
use super::rows::{self, FIRING_COLUMNS};
use super::types::{FiringFilter, Page};
use super::{ms, page_limit, RowExt, Store, StoreError};
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
        let items = found
            .iter()
            .map(rows::firing)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(page_of(items, limit, |f| f.id.to_string()))
    }

    /// Deletes firings in a final state that finished before `finished_before`,
    /// but keeps each job's newest `keep_per_job` final firings whatever their
    /// age. Returns how many were deleted.
    pub async fn prune_history(
        &self,
        finished_before: DateTime<Utc>,
        keep_per_job: u32,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM firings WHERE id IN ( \
                 SELECT id FROM ( \
                     SELECT id, finished_at, ROW_NUMBER() OVER ( \
                         PARTITION BY job_id ORDER BY scheduled_at DESC, shard DESC, attempt DESC) \
                         AS newest \
                     FROM firings WHERE state IN {FINAL_STATES} \
                 ) ranked \
                 WHERE ranked.newest > $2 AND ranked.finished_at < $1)"
        );
        self.retrying(|| async {
            let done = sqlx::query(&sql)
                .bind(ms(finished_before))
                .bind(i64::from(keep_per_job))
                .execute(&self.write)
                .await?;
            Ok(done.rows_affected())
        })
        .await
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
