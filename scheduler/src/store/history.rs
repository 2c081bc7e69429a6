//! Firing history: listing, retention, gauges.

use super::rows::{self, FIRING_COLUMNS};
use super::types::{FiringFilter, Page};
use super::{ms, page_limit, RowExt, Store, StoreError};
use chime_common::{Firing, FiringId, FiringState};
use chrono::{DateTime, Utc};

/// Final states, as stored.
const FINAL_STATES: &str = "('succeeded', 'failed', 'lost', 'skipped', 'cancelled')";

impl Store {
    /// One page of firings, newest first (`scheduled_at`, then attempt, then
    /// id, descending). The cursor is the last firing's id.
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
        let mut conditions = Vec::new();
        let mut n = 0;
        let mut param = || {
            n += 1;
            format!("${n}")
        };
        if filter.job_id.is_some() {
            conditions.push(format!("job_id = {}", param()));
        }
        if filter.state.is_some() {
            conditions.push(format!("state = {}", param()));
        }
        if after.is_some() {
            conditions.push(format!(
                "(scheduled_at, attempt, id) < ({}, {}, {})",
                param(),
                param(),
                param()
            ));
        }
        let limit_param = param();
        let where_clause = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let sql = format!(
            "SELECT {FIRING_COLUMNS} FROM firings {where_clause} \
             ORDER BY scheduled_at DESC, attempt DESC, id DESC LIMIT {limit_param}"
        );
        let mut query = sqlx::query(&sql);
        if let Some(job_id) = &filter.job_id {
            query = query.bind(job_id.as_str());
        }
        if let Some(state) = filter.state {
            query = query.bind(state.as_str());
        }
        if let Some(cursor) = &after {
            query = query
                .bind(cursor.scheduled_ms)
                .bind(i64::from(cursor.attempt))
                .bind(cursor.to_string());
        }
        let found = query
            .bind(i64::from(limit) + 1)
            .fetch_all(&self.read)
            .await?;
        let mut items = found
            .iter()
            .map(rows::firing)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|f| f.id.to_string())
        } else {
            None
        };
        Ok(Page { items, next })
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
                         PARTITION BY job_id ORDER BY scheduled_at DESC, attempt DESC) AS newest \
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
