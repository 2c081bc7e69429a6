//! Lateness of a start: how much later than its instant a firing started
//! (its scheduled instant; for a retry, the instant the retry was due), and
//! the `late` alert when that exceeds its job's `max_lateness`.
//!
//! Judged once per firing attempt, by the request that started it: a
//! worker repeating an accepted start is not started again
//! ([`StartOutcome::lateness`] is unset), so no second alert.
//!
//! Apart from [`Store::start`], and called after the start replies are
//! sent (`worker_reports.rs`): it costs a read per batch, which on the
//! start's path doubled how long a worker waited for its answer
//! (BENCHMARKS.md, milestone 2, third session).

use super::dialect::Col;
use super::types::StartOutcome;
use super::{id_batch, rows, RowExt, Store, StoreError};
use chime_common::duration::format_duration;
use chime_common::protocol::{Alert, AlertKind, StartRequest};
use chime_common::FiringId;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;

/// What a start's lateness is measured from, and against.
struct Instant {
    group: String,
    /// The scheduled instant, or `due_at` for a retry.
    at: i64,
    /// The job's `max_lateness`; `None` when it has none (or is gone).
    max_lateness: Option<Duration>,
}

impl Store {
    /// Fills in the lateness of each start in `outcomes` (made at `now`)
    /// and adds a `late` alert to those that started later than their job's
    /// `max_lateness`. Best effort: the starts are decided and committed; a
    /// failed read leaves them without a lateness and is logged.
    pub async fn judge_lateness(
        &self,
        requests: &[StartRequest],
        outcomes: &mut [StartOutcome],
        now: DateTime<Utc>,
    ) {
        let now = super::ms(now);
        let started: Vec<String> = requests
            .iter()
            .zip(outcomes.iter())
            .filter(|(_, o)| o.lateness.is_some())
            .map(|(r, _)| r.firing_id.to_string())
            .collect();
        if started.is_empty() {
            return;
        }
        let instants = match self.start_instants(&started).await {
            Ok(instants) => instants,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the instants of started firings; lateness not judged");
                for o in outcomes.iter_mut() {
                    o.lateness = None;
                }
                return;
            }
        };
        for (request, outcome) in requests.iter().zip(outcomes.iter_mut()) {
            if outcome.lateness.is_none() {
                continue;
            }
            let Some(instant) = instants.get(&request.firing_id.to_string()) else {
                outcome.lateness = None;
                continue;
            };
            let late_ms = u64::try_from(now.saturating_sub(instant.at)).unwrap_or(0);
            let lateness = Duration::from_millis(late_ms);
            outcome.lateness = Some(lateness);
            if let Some(max) = instant.max_lateness.filter(|max| lateness > *max) {
                outcome
                    .alerts
                    .push(late_alert(&request.firing_id, instant, lateness, max, now));
            }
        }
    }

    /// The instant and `max_lateness` of each firing of `ids`, by firing id.
    async fn start_instants(&self, ids: &[String]) -> Result<HashMap<String, Instant>, StoreError> {
        // Only specs that mention `max_lateness` are read and parsed: a spec
        // without one does not carry the key (it is skipped when unset).
        let sql = format!(
            "SELECT f.id, f.job_id, f.group_name, CASE WHEN f.attempt = 1 THEN f.scheduled_at \
                 ELSE f.due_at END AS instant, \
                 CASE WHEN j.spec LIKE '%\"max_lateness\"%' THEN j.spec END AS spec \
             FROM firings f LEFT JOIN jobs j ON j.id = f.job_id \
             WHERE f.id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        let rows = sqlx::query(&sql)
            .bind(id_batch(ids)?)
            .fetch_all(&self.write)
            .await?;
        let mut instants = HashMap::with_capacity(rows.len());
        for row in &rows {
            let id = row.text("?", "id")?;
            let job_id = row.text(&id, "job_id")?;
            let max_lateness = match row.opt_text(&id, "spec")? {
                Some(text) => match rows::spec(&job_id, &text) {
                    Ok(spec) => spec.time.max_lateness,
                    Err(e) => {
                        tracing::error!(job_id, error = %e, "job row is corrupt; its max_lateness is not applied");
                        None
                    }
                },
                None => None,
            };
            let instant = Instant {
                group: row.text(&id, "group_name")?,
                at: row.int(&id, "instant")?,
                max_lateness,
            };
            instants.insert(id, instant);
        }
        Ok(instants)
    }
}

/// The `late` alert of firing `id`, started `lateness` after its instant.
fn late_alert(
    id: &FiringId,
    instant: &Instant,
    lateness: Duration,
    max: Duration,
    now: i64,
) -> Alert {
    Alert {
        kind: AlertKind::Late,
        job_id: id.job_id.clone(),
        group: instant.group.clone(),
        firing_id: Some(id.clone()),
        message: format!(
            "firing {id} started {} after its instant, more than the job's max_lateness of {}",
            format_duration(lateness),
            format_duration(max)
        ),
        at: super::at_ms(now),
        consecutive_failures: None,
        paused: false,
        lateness_ms: u64::try_from(lateness.as_millis()).ok(),
    }
}
