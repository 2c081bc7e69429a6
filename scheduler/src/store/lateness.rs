//! Lateness of a start: how much later than its instant a firing started,
//! and the `late` alert when that exceeds its job's `max_lateness`.
//!
//! The instant is `scheduled_at` for a first attempt, the time the retry
//! was due for a later one, and the time it was backfilled for a backfill
//! (whose `scheduled_at` is in the past on purpose). Every start statement
//! reads it, with the job's spec when that may set `max_lateness`, in the same
//! statement that starts the firing: a separate read per batch would be a round
//! trip per start on a quiet system.
//!
//! Judged once per firing attempt, by the request that started it: a
//! worker repeating an accepted start is not started again, so no second
//! alert.

use super::rows;
use super::types::StartOutcome;
use chime_common::duration::format_duration;
use chime_common::protocol::{Alert, AlertKind};
use chime_common::FiringId;
use std::time::Duration;

/// SQL: the instant the start of firing row `firing` (an alias, or the
/// table's name where an alias cannot be used) is measured from.
pub(super) fn due_instant(firing: &str) -> String {
    format!(
        "CASE WHEN {firing}.attempt = 1 AND {firing}.backfill = 0 \
         THEN {firing}.scheduled_at ELSE {firing}.due_at END"
    )
}

/// SQL: job `j`'s spec unless `jobs.no_max_lateness_version` says its
/// current version has no `max_lateness`, else NULL. The stamp is a column
/// read, where scanning the spec (payload included) for the key would cost
/// the start of every firing a pass over it.
pub(super) const LATENESS_SPEC: &str =
    "CASE WHEN j.no_max_lateness_version = j.version THEN NULL ELSE j.spec END";

/// When a firing was due to start, and how late its job lets it start.
#[derive(Debug, Clone, Copy)]
pub(super) struct Due {
    /// [`due_instant`], milliseconds.
    pub at: i64,
    /// The job's `max_lateness`; `None` when it has none (or is gone).
    pub max_lateness: Option<Duration>,
}

impl Due {
    /// Its `max_lateness` read from `spec` ([`LATENESS_SPEC`]'s column); a
    /// corrupt spec applies none (logged).
    pub fn of_spec(at: i64, job_id: &str, spec: Option<&str>) -> Due {
        let max_lateness = spec.and_then(|text| match rows::spec(job_id, text) {
            Ok(spec) => spec.time.max_lateness,
            Err(e) => {
                tracing::error!(job_id, error = %e, "job row is corrupt; its max_lateness is not applied");
                None
            }
        });
        Due { at, max_lateness }
    }

    /// The outcome of a start of firing `id` (of `group`) accepted until
    /// `deadline_ms` at `now`: its lateness, and the `late` alert if that is
    /// more than the job allows.
    pub fn started(&self, id: &FiringId, group: &str, deadline_ms: i64, now: i64) -> StartOutcome {
        let lateness =
            Duration::from_millis(u64::try_from(now.saturating_sub(self.at)).unwrap_or(0));
        let late = self
            .max_lateness
            .filter(|max| lateness > *max)
            .map(|max| late_alert(id, group, lateness, max, now));
        StartOutcome {
            lateness: Some(lateness),
            late,
            ..StartOutcome::accepted(super::values::at_ms(deadline_ms))
        }
    }
}

/// The `late` alert of firing `id`, started `lateness` after its instant.
fn late_alert(id: &FiringId, group: &str, lateness: Duration, max: Duration, now: i64) -> Alert {
    Alert {
        kind: AlertKind::Late,
        job_id: id.job_id.clone(),
        group: group.to_string(),
        firing_id: Some(id.clone()),
        message: format!(
            "firing {id} started {} after its instant, more than the job's max_lateness of {}",
            format_duration(lateness),
            format_duration(max)
        ),
        at: super::values::at_ms(now),
        consecutive_failures: None,
        paused: false,
        lateness_ms: u64::try_from(lateness.as_millis()).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_stores::TestStore;
    use super::*;
    use chime_common::{JobSpec, Limits};
    use chrono::DateTime;

    /// A start must read the column for a job without `max_lateness`, not
    /// only fall back to the spec: every write stamps it, and the spec is
    /// sent only for the job that has one.
    async fn only_a_job_with_max_lateness_sends_its_spec(test: TestStore) {
        let now = DateTime::from_timestamp(1_893_456_000, 0).expect("an instant");
        for (id, extra) in [("plain", None), ("strict", Some("1s"))] {
            let mut job =
                serde_json::json!({"id": id, "schedule": {"every": "1h"}, "handler": "h"});
            if let Some(max) = extra {
                job["max_lateness"] = max.into();
            }
            let spec = JobSpec::from_json(&job, &Limits::default()).expect("a valid spec");
            test.store.put_job(&spec, now).await.expect("put");
            test.store.put_job(&spec, now).await.expect("replace");
        }
        let sent: Vec<(String, Option<String>)> = sqlx::query_as(&format!(
            "SELECT j.id, {LATENESS_SPEC} FROM jobs j ORDER BY j.id"
        ))
        .fetch_all(&test.store.read)
        .await
        .expect("read");
        let sent: Vec<(&str, bool)> = sent
            .iter()
            .map(|(id, spec)| (id.as_str(), spec.is_some()))
            .collect();
        assert_eq!(sent, [("plain", false), ("strict", true)]);
    }

    #[tokio::test]
    async fn postgres_sends_only_the_spec_that_has_max_lateness() {
        only_a_job_with_max_lateness_sends_its_spec(TestStore::postgres().await).await;
    }

    #[tokio::test]
    async fn sqlite_sends_only_the_spec_that_has_max_lateness() {
        only_a_job_with_max_lateness_sends_its_spec(TestStore::sqlite().await).await;
    }
}
