//! Exclusion calendars: `calendars.put`, `get`, `delete`, `list`, and the
//! read staging does for the calendars its due jobs exclude.
//!
//! A calendar is one row holding its JSON. Jobs name calendars by id; a put
//! refuses an id that does not exist, and a delete refuses a calendar that a
//! job still excludes (`conflict`, naming the jobs), so a job never
//! silently loses its exclusions.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::values::{id_batch, ms, truncate, RowExt};
use chime_common::calendars::Calendar;
use chime_common::JobSpec;
use chrono::{DateTime, Utc};

/// The most calendars `calendars.list` returns.
pub const MAX_CALENDARS: i64 = 10_000;

/// Jobs named in a refused delete, at most.
const NAMED_JOBS: usize = 10;

fn decode(id: &str, body: &str) -> Result<Calendar, StoreError> {
    serde_json::from_str(body)
        .map_err(|e| StoreError::corrupt(id, format!("calendar does not parse: {e}")))
}

impl Store {
    /// Creates or replaces a calendar.
    pub async fn put_calendar(
        &self,
        calendar: &Calendar,
        now: DateTime<Utc>,
    ) -> Result<Calendar, StoreError> {
        let body = serde_json::to_string(calendar)
            .map_err(|e| StoreError::Internal(format!("encoding calendar: {e}")))?;
        self.retrying(|| async {
            sqlx::query(
                "INSERT INTO calendars (id, body, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET body = excluded.body, \
                     updated_at = excluded.updated_at",
            )
            .bind(calendar.id.as_str())
            .bind(body.as_str())
            .bind(ms(truncate(now)))
            .execute(&self.write)
            .await?;
            Ok(())
        })
        .await?;
        Ok(calendar.clone())
    }

    /// The calendar, if it exists.
    pub async fn get_calendar(&self, id: &str) -> Result<Option<Calendar>, StoreError> {
        let body: Option<String> = sqlx::query_scalar("SELECT body FROM calendars WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        body.map(|b| decode(id, &b)).transpose()
    }

    /// Every calendar, by id (at most [`MAX_CALENDARS`]).
    pub async fn list_calendars(&self) -> Result<Vec<Calendar>, StoreError> {
        let rows = sqlx::query("SELECT id, body FROM calendars ORDER BY id LIMIT $1")
            .bind(MAX_CALENDARS)
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|row| {
                let id = row.text("?", "id")?;
                decode(&id, &row.text(&id, "body")?)
            })
            .collect()
    }

    /// The calendars of `ids` that exist, in the order of `ids`.
    pub async fn calendars(&self, ids: &[String]) -> Result<Vec<Calendar>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT id, body FROM calendars WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        ))
        .bind_rows(&id_batch(ids)?)
        .fetch_all(&self.read)
        .await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let id = row.text("?", "id")?;
            found.push(decode(&id, &row.text(&id, "body")?)?);
        }
        Ok(ids
            .iter()
            .filter_map(|id| found.iter().find(|c| &c.id == id).cloned())
            .collect())
    }

    /// Refuses a job whose `exclude` names a calendar that does not exist,
    /// naming the field.
    pub(crate) async fn check_calendars_exist(&self, spec: &JobSpec) -> Result<(), StoreError> {
        let found = self.calendars(&spec.time.exclude).await?;
        for (i, id) in spec.time.exclude.iter().enumerate() {
            if !found.iter().any(|c| &c.id == id) {
                return Err(StoreError::invalid(
                    format!("exclude[{i}]"),
                    format!("no calendar {id:?}; create it with calendars.put first"),
                ));
            }
        }
        Ok(())
    }

    /// Deletes a calendar no job excludes; returns it, or `None` if there
    /// was none.
    pub async fn delete_calendar(&self, id: &str) -> Result<Option<Calendar>, StoreError> {
        let Some(calendar) = self.get_calendar(id).await? else {
            return Ok(None);
        };
        let users = self.jobs_excluding(id).await?;
        if !users.is_empty() {
            return Err(StoreError::Conflict(format!(
                "calendar {id:?} is excluded by job{} {}; remove it from their exclude first",
                if users.len() == 1 { "" } else { "s" },
                users
                    .iter()
                    .map(|j| format!("{j:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        sqlx::query("DELETE FROM calendars WHERE id = $1")
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(Some(calendar))
    }

    /// Up to [`NAMED_JOBS`] ids of jobs that exclude calendar `id`. The
    /// text match only narrows the rows read; each spec decides.
    async fn jobs_excluding(&self, id: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, spec FROM jobs WHERE spec LIKE '%\"exclude\"%' AND spec LIKE $1 ORDER BY id",
        )
        .bind(format!("%\"{id}\"%"))
        .fetch_all(&self.read)
        .await?;
        let mut users = Vec::new();
        for row in &rows {
            let job_id = row.text("?", "id")?;
            let spec = super::rows::spec(&job_id, &row.text(&job_id, "spec")?)?;
            if spec.time.exclude.iter().any(|c| c == id) {
                users.push(job_id);
                if users.len() == NAMED_JOBS {
                    break;
                }
            }
        }
        Ok(users)
    }
}
