//! Limits of whole groups (`groups.put`, `get`, `list`), and what a start
//! in a limited group reads and records: the running count and the starts
//! of the last second.
//!
//! A group has a `group_limits` row only while it has a limit; a put
//! without limits removes it. Starts in a limited group lock that row, so
//! replicas deciding starts of one group at once decide one after the
//! other, and the count they judge on is exact.

use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::values::{ms, truncate, RowExt};
use chime_common::concurrency::{Group, GroupLimits};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// The rate window: `max_per_second` counts the starts of the last this
/// many milliseconds. A little over a second, so that no one-second window
/// of the handlers' own start times holds more either: a handler starts a
/// few milliseconds after its start is decided, not always the same few.
pub(super) const RATE_WINDOW_MS: i64 = 1_050;

/// The most groups `groups.list` returns.
pub const MAX_GROUPS: usize = 10_000;

impl Store {
    /// Sets a group's limits (a put replaces both; none removes them).
    /// Firings held by a limit that was raised or removed are released by
    /// the next pass of the release service (`recovery/limit_release.rs`).
    pub async fn put_group_limits(
        &self,
        limits: &GroupLimits,
        now: DateTime<Utc>,
    ) -> Result<Group, StoreError> {
        let now = ms(truncate(now));
        self.retrying(|| async {
            if limits.is_limited() {
                sqlx::query(
                    "INSERT INTO group_limits (name, max_concurrent, max_per_second, updated_at) \
                     VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (name) DO UPDATE SET max_concurrent = excluded.max_concurrent, \
                         max_per_second = excluded.max_per_second, \
                         updated_at = excluded.updated_at",
                )
                .bind(limits.name.as_str())
                .bind(limits.max_concurrent.map(i64::from))
                .bind(limits.max_per_second.map(i64::from))
                .bind(now)
                .execute(&self.write)
                .await?;
            } else {
                sqlx::query("DELETE FROM group_limits WHERE name = $1")
                    .bind(limits.name.as_str())
                    .execute(&self.write)
                    .await?;
            }
            Ok(())
        })
        .await?;
        self.get_group(&limits.name).await
    }

    /// A group: its limits (none if it has none) and what runs and waits
    /// in it. Every valid name is a group, with or without jobs.
    pub async fn get_group(&self, name: &str) -> Result<Group, StoreError> {
        let mut groups = self.groups(Some(name)).await?;
        Ok(groups.pop().unwrap_or_else(|| unlimited(name)))
    }

    /// Every group that has a limit, a job, or a firing running or held,
    /// by name.
    pub async fn list_groups(&self) -> Result<Vec<Group>, StoreError> {
        self.groups(None).await
    }

    /// The groups [`Store::list_groups`] lists, or just `only`.
    async fn groups(&self, only: Option<&str>) -> Result<Vec<Group>, StoreError> {
        let filter = if only.is_some() {
            "WHERE name = $1"
        } else {
            ""
        };
        let sql = format!(
            "SELECT name, CAST(MAX(max_concurrent) AS BIGINT) AS max_concurrent, \
                 CAST(MAX(max_per_second) AS BIGINT) AS max_per_second, \
                 CAST(SUM(running) AS BIGINT) AS running, CAST(SUM(held) AS BIGINT) AS held \
             FROM ( \
                 SELECT name AS name, max_concurrent AS max_concurrent, \
                     max_per_second AS max_per_second, 0 AS running, 0 AS held \
                 FROM group_limits \
                 UNION ALL SELECT DISTINCT group_name, CAST(NULL AS BIGINT), \
                     CAST(NULL AS BIGINT), 0, 0 FROM jobs \
                 UNION ALL SELECT group_name, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), 1, 0 \
                     FROM executing \
                 UNION ALL SELECT group_name, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), 0, 1 \
                     FROM held WHERE released_at IS NULL \
             ) AS g \
             {filter} GROUP BY name ORDER BY name LIMIT {MAX_GROUPS}"
        );
        let mut query = sqlx::query(&sql);
        if let Some(name) = only {
            query = query.bind(name);
        }
        let rows = query.fetch_all(&self.read).await?;
        let mut groups = BTreeMap::new();
        for row in &rows {
            let name = row.text("group", "name")?;
            let limit = |column: &str| -> Result<Option<u32>, StoreError> {
                row.opt_int(&name, column)?
                    .map(|n| {
                        u32::try_from(n).map_err(|_| {
                            StoreError::corrupt(&name, format!("{column} {n} is out of range"))
                        })
                    })
                    .transpose()
            };
            let count = |column: &str| -> Result<u64, StoreError> {
                Ok(u64::try_from(row.int(&name, column)?).unwrap_or(0))
            };
            let group = Group {
                limits: GroupLimits {
                    name: name.clone(),
                    max_concurrent: limit("max_concurrent")?,
                    max_per_second: limit("max_per_second")?,
                },
                running: count("running")?,
                held: count("held")?,
            };
            groups.insert(name, group);
        }
        Ok(groups.into_values().collect())
    }

    /// The group's limits (`None`: unlimited), locked for the rest of the
    /// transaction when `lock` is set.
    pub(super) async fn read_group_limits(
        &self,
        tx: &mut Tx,
        group: &str,
        lock: bool,
    ) -> Result<Option<GroupLimits>, StoreError> {
        let lock = if lock { self.backend.for_update() } else { "" };
        let row = sqlx::query(&format!(
            "SELECT max_concurrent, max_per_second FROM group_limits WHERE name = $1{lock}"
        ))
        .bind(group)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        // A stored value out of range reads as no limit, logged: a start
        // must not fail for it.
        let limit = |column: &str| match row.opt_int(group, column) {
            Ok(n) => n.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0),
            Err(e) => {
                tracing::error!(group, error = %e, "group limit is corrupt; not applied");
                None
            }
        };
        Ok(Some(GroupLimits {
            name: group.to_string(),
            max_concurrent: limit("max_concurrent"),
            max_per_second: limit("max_per_second"),
        }))
    }

    /// Locks the group's limits row, if it has one, and returns the limits.
    pub(super) async fn lock_group_limits(
        &self,
        tx: &mut Tx,
        group: &str,
    ) -> Result<Option<GroupLimits>, StoreError> {
        self.read_group_limits(tx, group, true).await
    }

    /// The starts of the group in the rate window that ends at `now`.
    pub(super) async fn starts_in_window(
        &self,
        tx: &mut Tx,
        group: &str,
        now: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM group_starts WHERE group_name = $1 AND started_at > $2",
        )
        .bind(group)
        .bind(now.saturating_sub(RATE_WINDOW_MS))
        .fetch_one(&mut **tx)
        .await?)
    }

    /// Records a start of a rate-limited group, and forgets the group's
    /// starts that left the window.
    pub(super) async fn record_group_start(
        &self,
        tx: &mut Tx,
        group: &str,
        id: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM group_starts WHERE group_name = $1 AND started_at <= $2")
            .bind(group)
            .bind(now.saturating_sub(RATE_WINDOW_MS))
            .execute(&mut **tx)
            .await?;
        sqlx::query(
            "INSERT INTO group_starts (group_name, started_at, firing_id) VALUES ($1, $2, $3)",
        )
        .bind(group)
        .bind(now)
        .bind(id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// A group without limits, running or holding nothing.
fn unlimited(name: &str) -> Group {
    Group {
        limits: GroupLimits {
            name: name.to_string(),
            max_concurrent: None,
            max_per_second: None,
        },
        running: 0,
        held: 0,
    }
}
