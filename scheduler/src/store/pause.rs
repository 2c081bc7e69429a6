//! Pausing and resuming jobs, one by id or many by group and selector, and
//! maintenance windows: a pause with `until` that the maintenance service
//! (`maintenance.rs`) ends with [`Store::resume_due_pauses`].
//!
//! Resuming keeps `next_fire_at`, so the slicer applies the job's misfire
//! policy to the instants the pause covered. Firings already staged still
//! fire.

use super::error::StoreError;
use super::handle::Store;
use super::jobs::{unpaused_state, write_spec_and_state};
use super::types::JobFilter;
use super::values::{ms, truncate};
use chime_common::bounds::check_time;
use chime_common::labels::Selector;
use chime_common::{Job, JobState};
use chrono::{DateTime, Utc};

/// Most jobs one pause or resume by group or selector changes: its reply
/// lists every one, and a NATS reply is bounded.
pub const MAX_PAUSED_AT_ONCE: usize = 1_000;

/// Which jobs a pause or resume of many changes.
#[derive(Debug, Clone, Default)]
pub struct JobSelection {
    pub group: Option<String>,
    pub selector: Option<Selector>,
}

/// The pause a job is put in, or its resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Paused until resumed, or until the instant given.
    Until(Option<DateTime<Utc>>),
    Resume,
}

impl Pause {
    /// Refuses an `until` that is not after `now` (field `until`).
    fn check(self, now: DateTime<Utc>) -> Result<(), StoreError> {
        let Pause::Until(Some(until)) = self else {
            return Ok(());
        };
        if let Some(e) = check_time(until) {
            return Err(StoreError::invalid("until", e));
        }
        if until <= now {
            return Err(StoreError::invalid(
                "until",
                "is not in the future; a pause that ends at once would change nothing",
            ));
        }
        Ok(())
    }
}

impl Store {
    /// Pauses or resumes a job (`version` + 1, `spec.paused` follows). A
    /// pause with `until` ends by itself then; a pause without one, and a
    /// resume, clear it. `None` if there is no such job.
    pub async fn set_paused(
        &self,
        id: &str,
        pause: Pause,
        now: DateTime<Utc>,
    ) -> Result<Option<Job>, StoreError> {
        pause.check(now)?;
        let now = truncate(now);
        let Some(job) = self
            .retrying(|| self.set_paused_once(id, pause, now, false))
            .await?
        else {
            return Ok(None);
        };
        let mut job = [job];
        self.mark_upstream_missing(&mut job).await?;
        let [job] = job;
        Ok(Some(job))
    }

    /// [`Store::set_paused`] for every job of `selection` (a group, a label
    /// selector, or both), each job in its own transaction. Refused,
    /// changing nothing, if more than [`MAX_PAUSED_AT_ONCE`] jobs match.
    pub async fn set_paused_many(
        &self,
        selection: &JobSelection,
        pause: Pause,
        now: DateTime<Utc>,
    ) -> Result<Vec<Job>, StoreError> {
        pause.check(now)?;
        let now = truncate(now);
        let mut filter = JobFilter {
            group: selection.group.clone(),
            selector: selection.selector.clone(),
            limit: 1_000,
            ..JobFilter::default()
        };
        let mut ids = Vec::new();
        loop {
            let page = self.list_jobs(&filter).await?;
            ids.extend(page.items.into_iter().map(|job| job.spec.id));
            if ids.len() > MAX_PAUSED_AT_ONCE {
                let field = if selection.selector.is_some() {
                    "selector"
                } else {
                    "group"
                };
                return Err(StoreError::invalid(
                    field,
                    format!("matches more than {MAX_PAUSED_AT_ONCE} jobs; narrow it"),
                ));
            }
            match page.next {
                Some(next) => filter.after = Some(next),
                None => break,
            }
        }
        let mut jobs = Vec::with_capacity(ids.len());
        for id in &ids {
            // A job deleted since it was listed is simply not in the reply.
            if let Some(job) = self
                .retrying(|| self.set_paused_once(id, pause, now, false))
                .await?
            {
                jobs.push(job);
            }
        }
        self.mark_upstream_missing(&mut jobs).await?;
        Ok(jobs)
    }

    /// Resumes the jobs whose pause `until` is at or before `now`, at most
    /// `batch`, earliest first; returns them. A job paused again (or
    /// resumed) since it was read is left as it now is.
    pub async fn resume_due_pauses(
        &self,
        now: DateTime<Utc>,
        batch: u32,
    ) -> Result<Vec<Job>, StoreError> {
        let now = truncate(now);
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT job_id FROM job_schedule WHERE paused_until <= $1 \
             ORDER BY paused_until LIMIT $2",
        )
        .bind(ms(now))
        .bind(i64::from(batch))
        .fetch_all(&self.read)
        .await?;
        let mut resumed = Vec::with_capacity(ids.len());
        for id in &ids {
            if let Some(job) = self
                .retrying(|| self.set_paused_once(id, Pause::Resume, now, true))
                .await?
            {
                resumed.push(job);
            }
        }
        Ok(resumed)
    }

    /// One pause or resume; with `only_if_due`, only of a job whose
    /// `until` has passed (checked under the job's lock).
    async fn set_paused_once(
        &self,
        id: &str,
        pause: Pause,
        now: DateTime<Utc>,
        only_if_due: bool,
    ) -> Result<Option<Job>, StoreError> {
        let mut tx = self.begin().await?;
        let Some(mut job) = self.lock_job(&mut tx, id).await? else {
            return Ok(None);
        };
        if only_if_due && job.paused_until.is_none_or(|until| until > now) {
            return Ok(None);
        }
        let paused = matches!(pause, Pause::Until(_));
        job.spec.paused = paused;
        job.paused_until = match pause {
            Pause::Until(until) => until.map(truncate),
            Pause::Resume => None,
        };
        job.state = if paused {
            JobState::Paused
        } else {
            unpaused_state(&job.spec, job.next_fire_at.map(ms))
        };
        job.version += 1;
        job.updated_at = now;
        write_spec_and_state(&mut tx, &job.spec, job.state, ms(now)).await?;
        sqlx::query("UPDATE job_schedule SET paused_until = $2 WHERE job_id = $1")
            .bind(id)
            .bind(job.paused_until.map(ms))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(job))
    }
}
