//! The finish transition: a worker's report ends its running attempt
//! `succeeded`, `failed` or `cancelled`, once, and only while that worker
//! holds the attempt's executing row. A failure is retried or alerted on
//! (and counted towards `alert_after_failures`); a success resets that count
//! and triggers the job's `on_success` and the fan-in jobs it completes
//! (`fan_in.rs`); either releases a queued firing.
//!
//! A shard of a sharded job (`shards` above 1) succeeds on its own, but its
//! instant succeeds (and triggers `on_success` and fan-in counts, once) only
//! when its last shard does.
//!
//! A batch's plain successes (reported by the worker running the firing,
//! of an unsharded job with no `on_success`, no fan-in job waiting for it
//! and nothing queued) need no policy decision; they are first applied in
//! one round trip, the fast path (see `start.rs` for why). What is left
//! takes one transaction: the plain successes set-based, the rest one by
//! one.

use super::conditions::{NOTHING_HELD_IN_GROUP, NO_FAN_IN_DEPENDENTS};
use super::dialect::{Backend, BindRows, Col};
use super::error::StoreError;
use super::executing::Lease;
use super::handle::Store;
use super::jobs::write_spec_and_state;
use super::locks::{complete, split_batch, FiringRow, JobRow, Tx};
use super::outcomes::record_ends_sql;
use super::retry::{exhausted, Ended, RetryDelay};
use super::states::{sources_sql, Transition};
use super::types::FinishOutcome;
use super::values::{json_text, ms};
use chime_common::protocol::{Alert, AlertKind, Finished, Interruption, Outcome};
use chime_common::text;
use chime_common::{FiringId, FiringState, JobState};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashSet;

/// What a success sets on firing row `firing` (the table or its alias),
/// from the batch row `r` (`id`, `output`, `ran_ms`), applied at `$3`.
fn set_succeeded(backend: Backend, firing: &str) -> String {
    format!(
        "state = 'succeeded', finished_at = {}, error = NULL, output = r.output",
        ended_at(backend, &format!("{firing}.started_at"), "r.ran_ms", "$3")
    )
}

/// The instant a reported run ended, as history records it: the firing's
/// accepted start (`started`) plus the run time its worker measured
/// (`ran`, ms: its `finished_at` minus its `started_at`, both read on the
/// worker's clock, so an offset between the clocks cancels out), never
/// after the event is applied (`now`) nor before the start.
fn ended_at(backend: Backend, started: &str, ran: &str, now: &str) -> String {
    let start = format!("COALESCE({started}, {now})");
    match backend {
        Backend::Postgres => format!("GREATEST(LEAST({start} + {ran}, {now}), {start})"),
        Backend::Sqlite => format!("MAX(MIN({start} + {ran}, {now}), {start})"),
    }
}

/// The run time an event reports, in ms (0 for times in the wrong order).
fn ran_ms(event: &Finished) -> i64 {
    (event.finished_at - event.started_at)
        .num_milliseconds()
        .max(0)
}

/// Resets the failure count of the jobs the appended subquery names.
const RESET_FAILURES: &str =
    "UPDATE jobs SET consecutive_failures = 0 WHERE consecutive_failures <> 0 AND id IN";

/// Ends firing `id` in a final `state`.
pub(super) async fn end_firing(
    tx: &mut Tx,
    id: &str,
    state: FiringState,
    error: Option<&str>,
    output: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE firings SET state = $2, finished_at = $3, error = $4, output = $5 WHERE id = $1",
    )
    .bind(id)
    .bind(state.as_str())
    .bind(now)
    .bind(error)
    .bind(output)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Whether an event's texts can be stored as they are (no NUL, within the
/// caps): what any worker sends is checked again here.
fn is_storable(event: &Finished) -> bool {
    let fits = |text: &Option<String>, max| {
        text.as_deref()
            .is_none_or(|t| t.len() <= max && !t.contains('\0'))
    };
    fits(&event.output, text::MAX_OUTPUT_BYTES) && fits(&event.error, text::MAX_ERROR_BYTES)
}

/// The event with its output cut to its tail and its error to its head, both
/// without NUL.
fn storable(event: &Finished) -> Finished {
    Finished {
        output: event
            .output
            .as_deref()
            .map(|t| text::tail(t, text::MAX_OUTPUT_BYTES).into_owned()),
        error: event
            .error
            .as_deref()
            .map(|t| text::head(t, text::MAX_ERROR_BYTES).into_owned()),
        ..event.clone()
    }
}

/// The interruption an event reports, if its run did not succeed: the
/// infrastructure ended it, not the job.
fn interruption(event: &Finished) -> Option<Interruption> {
    event
        .interrupted
        .filter(|_| matches!(event.outcome, Outcome::Failed | Outcome::Cancelled))
}

/// The state an event ends its attempt in, and the error it records. An
/// interrupted run ends `failed` whatever its outcome: only a user's
/// cancellation ends `cancelled`.
fn ending(event: &Finished) -> (FiringState, Option<String>) {
    let detail = event.error.as_deref().filter(|e| !e.is_empty());
    if let Some(interrupted) = interruption(event) {
        return (
            FiringState::Failed,
            Some(detail.map_or_else(
                || format!("interrupted: {}", interrupted.as_str()),
                str::to_string,
            )),
        );
    }
    match event.outcome {
        Outcome::Succeeded => (FiringState::Succeeded, None),
        Outcome::Failed => (
            FiringState::Failed,
            Some(detail.unwrap_or("failed").to_string()),
        ),
        // A worker's own words may already say so (the reference worker's
        // do): the error says it once.
        Outcome::TimedOut => (
            FiringState::Failed,
            Some(match detail {
                Some(d) if d.starts_with("timed out") => d.to_string(),
                Some(d) => format!("timed out: {d}"),
                None => "timed out".to_string(),
            }),
        ),
        Outcome::Cancelled => (
            FiringState::Cancelled,
            Some(detail.unwrap_or("cancelled").to_string()),
        ),
    }
}

/// A plain success of a batch.
#[derive(Serialize)]
struct Succeeded<'a> {
    id: &'a str,
    job_id: &'a str,
    output: Option<&'a str>,
    ran_ms: i64,
}

impl Store {
    /// Applies finished events: the plain successes on the fast path (unless
    /// [`super::StoreOptions::fast_paths`] turns it off), then the rest, in
    /// order, in one transaction. An event applies only while its worker holds the firing's executing row, so a
    /// re-delivered event changes nothing (`applied: false`).
    pub async fn finish(
        &self,
        events: &[Finished],
        now: DateTime<Utc>,
        retry_delay: &RetryDelay,
    ) -> Result<Vec<FinishOutcome>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let now = ms(now);
        let events: Cow<[Finished]> = if events.iter().all(is_storable) {
            Cow::Borrowed(events)
        } else {
            Cow::Owned(events.iter().map(storable).collect())
        };
        let events = events.as_ref();
        let mut applied: Vec<Option<FinishOutcome>> = vec![None; events.len()];
        if self.fast_paths {
            self.finish_at_once(events, now, &mut applied).await;
        }
        complete(events, applied, |rest| async move {
            self.finish_in_transaction(&rest, now, retry_delay).await
        })
        .await
    }

    /// The fast path: applies the plain successes of a batch (each firing
    /// named once) in one round trip, and leaves the rest unapplied. On
    /// PostgreSQL the firing row is locked first, as on the transaction
    /// path, and its state re-checked if a concurrent expiry changed it; on
    /// SQLite the command holds the one writer. Any error (a corrupt spec, a
    /// deadlock, the database down) leaves the whole batch to
    /// [`Store::finish_in_transaction`].
    async fn finish_at_once(
        &self,
        events: &[Finished],
        now: i64,
        applied: &mut [Option<FinishOutcome>],
    ) {
        #[derive(Serialize)]
        struct Done<'a> {
            id: String,
            worker_id: &'a str,
            output: Option<&'a str>,
            ran_ms: i64,
            /// Which event it records (not sent).
            #[serde(skip)]
            event: usize,
        }
        let ids: Vec<&FiringId> = events.iter().map(|e| &e.firing_id).collect();
        let (succeeded, _) = split_batch(&ids, |i| events[i].outcome == Outcome::Succeeded);
        let mut done: Vec<Done> = succeeded
            .into_iter()
            .map(|i| Done {
                id: events[i].firing_id.to_string(),
                worker_id: events[i].worker_id.as_str(),
                output: events[i].output.as_deref(),
                ran_ms: ran_ms(&events[i]),
                event: i,
            })
            .collect();
        if done.is_empty() {
            return;
        }
        // Firing-id order, so concurrent batches lock in one order.
        done.sort_by(|a, b| a.id.cmp(&b.id));
        let done_rows = self.backend.json_rows(
            1,
            &[
                ("id", Col::Text),
                ("worker_id", Col::Text),
                ("output", Col::Text),
                ("ran_ms", Col::Int),
            ],
        );
        let set_succeeded = set_succeeded(self.backend, "f");
        // Of firing `f` of batch row `r`, its job joined as `j`.
        let plain = format!(
            "f.state IN {} \
             AND EXISTS (SELECT 1 FROM executing e \
                 WHERE e.firing_id = f.id AND e.worker_id = r.worker_id) \
             AND {NOTHING_HELD_IN_GROUP} \
             AND f.shards = 1 \
             AND j.no_on_success_version = j.version \
             AND {NO_FAN_IN_DEPENDENTS}",
            sources_sql(Transition::Finish),
        );
        let sql = match self.backend {
            // The job is read once: the join that tests it also tells which
            // jobs have failures to reset, so a job without any is not
            // looked up again.
            Backend::Postgres => format!(
                "WITH succeeded AS ( \
                     UPDATE firings f SET {set_succeeded} \
                     FROM {done_rows}, jobs j \
                     WHERE f.id = r.id AND j.id = f.job_id AND {plain} \
                     RETURNING f.id, f.job_id, f.finished_at, \
                         j.consecutive_failures <> 0 AS failed_before), \
                 ended AS (DELETE FROM executing e USING succeeded s WHERE e.firing_id = s.id), \
                 reset AS ({RESET_FAILURES} (SELECT job_id FROM succeeded WHERE failed_before)), \
                 outcomes AS ({}) \
                 SELECT id FROM succeeded",
                record_ends_sql(
                    "SELECT job_id, MAX(finished_at), CAST(NULL AS BIGINT) FROM succeeded \
                     GROUP BY job_id ORDER BY job_id"
                )
            ),
            // The same steps as statements of one transaction, each driven
            // by the batch (see `start_at_once`): the plain successes reset
            // their jobs' failure counts and end `succeeded`, their
            // executing rows go, and their jobs' newest success is recorded.
            Backend::Sqlite => format!(
                "BEGIN IMMEDIATE; \
                 {RESET_FAILURES} (SELECT f.job_id FROM {done_rows} \
                     JOIN firings f ON f.id = r.id JOIN jobs j ON j.id = f.job_id \
                     WHERE {plain}); \
                 UPDATE firings AS f SET {set_succeeded} \
                 FROM {done_rows}, jobs j WHERE f.id = r.id AND j.id = f.job_id AND {plain} \
                 RETURNING id; \
                 DELETE FROM executing WHERE firing_id IN (SELECT r.id FROM {done_rows}) \
                     AND EXISTS (SELECT 1 FROM firings f \
                         WHERE f.id = executing.firing_id AND f.state = 'succeeded'); \
                 {}; \
                 COMMIT",
                record_ends_sql(&format!(
                    "SELECT f.job_id, MAX(f.finished_at), CAST(NULL AS BIGINT) \
                     FROM {done_rows} JOIN firings f ON f.id = r.id \
                     WHERE f.state = 'succeeded' GROUP BY f.job_id ORDER BY f.job_id"
                ))
            ),
        };
        let body = match json_text(&done) {
            Ok(body) => body,
            Err(e) => {
                tracing::debug!(error = %e, "finish batch left to the transaction path");
                return;
            }
        };
        let succeeded: HashSet<String> = match self
            .fast_path(sqlx::query_as(&sql).bind_rows(&body).bind(now))
            .await
        {
            Ok(ids) => ids.into_iter().map(|(id,): (String,)| id).collect(),
            Err(e) => {
                tracing::debug!(error = %e, "finish batch left to the transaction path");
                return;
            }
        };
        for row in done.iter().filter(|row| succeeded.contains(&row.id)) {
            applied[row.event] = Some(FinishOutcome::new(
                events[row.event].firing_id.clone(),
                true,
                Some(FiringState::Succeeded),
            ));
        }
    }

    /// Applies finished events in one transaction: the plain successes
    /// set-based, the rest one by one.
    async fn finish_in_transaction(
        &self,
        events: &[Finished],
        now: i64,
        retry_delay: &RetryDelay,
    ) -> Result<Vec<FinishOutcome>, StoreError> {
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let ids: Vec<&FiringId> = events.iter().map(|e| &e.firing_id).collect();
            let rows = self.lock_batch(&mut tx, &ids).await?;
            let (plain, other) = split_batch(&ids, |i| {
                rows.get(ids[i])
                    .is_some_and(|row| row.plain_success(&events[i]))
            });
            let mut outcomes: Vec<Option<FinishOutcome>> = vec![None; events.len()];
            let mut done = Vec::with_capacity(plain.len());
            let mut leases = Vec::with_capacity(plain.len());
            for &i in &plain {
                let event = &events[i];
                if let Some(row) = rows.get(&event.firing_id) {
                    done.push(Succeeded {
                        id: row.firing.text.as_str(),
                        job_id: row.firing.id.job_id.as_str(),
                        output: event.output.as_deref(),
                        ran_ms: ran_ms(event),
                    });
                    leases.push(Lease {
                        id: row.firing.text.as_str(),
                        worker_id: event.worker_id.as_str(),
                    });
                }
            }
            let ended = self.end_executing(&mut tx, &leases).await?;
            done.retain(|d| ended.contains(d.id));
            self.succeed(&mut tx, &done, now).await?;
            for &i in &plain {
                let id = &events[i].firing_id;
                let row = rows.get(id);
                let applied = row.is_some_and(|row| ended.contains(&row.firing.text));
                let state = row.map(|row| {
                    if applied {
                        FiringState::Succeeded
                    } else {
                        row.firing.state
                    }
                });
                outcomes[i] = Some(FinishOutcome::new(id.clone(), applied, state));
            }
            for i in other {
                outcomes[i] = Some(
                    self.finish_one(&mut tx, &events[i], now, retry_delay)
                        .await?,
                );
            }
            let ended: Vec<String> = outcomes
                .iter()
                .flatten()
                .filter(|outcome| outcome.applied)
                .map(|outcome| outcome.firing_id.to_string())
                .collect();
            self.record_ends(&mut tx, &ended).await?;
            tx.commit().await?;
            Ok(outcomes.into_iter().flatten().collect())
        })
        .await
    }

    /// Ends the attempts of `done` (their executing rows ended) `succeeded`
    /// and resets their jobs' failure counts.
    async fn succeed(
        &self,
        tx: &mut Tx,
        done: &[Succeeded<'_>],
        now: i64,
    ) -> Result<(), StoreError> {
        if done.is_empty() {
            return Ok(());
        }
        let batch = json_text(done)?;
        let update = format!(
            "UPDATE firings SET {} FROM {} WHERE firings.id = r.id",
            set_succeeded(self.backend, "firings"),
            self.backend.json_rows(
                1,
                &[
                    ("id", Col::Text),
                    ("output", Col::Text),
                    ("ran_ms", Col::Int)
                ]
            )
        );
        sqlx::query(&update)
            .bind_rows(&batch)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        let reset = format!(
            "{RESET_FAILURES} (SELECT r.job_id FROM {})",
            self.backend.json_rows(1, &[("job_id", Col::Text)])
        );
        sqlx::query(&reset)
            .bind_rows(&batch)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Ends firing `id` in a final `state` as reported by `event`: its
    /// output, and the end its worker measured (see [`ended_at`]), which it
    /// returns (UTC ms).
    async fn end_reported(
        &self,
        tx: &mut Tx,
        id: &str,
        state: FiringState,
        error: Option<&str>,
        event: &Finished,
        now: i64,
    ) -> Result<i64, StoreError> {
        let sql = format!(
            "UPDATE firings SET state = $2, finished_at = {}, error = $4, output = $5 \
             WHERE id = $1 RETURNING finished_at",
            ended_at(self.backend, "started_at", "$6", "$3")
        );
        let ended: Option<i64> = sqlx::query_scalar(&sql)
            .bind(id)
            .bind(state.as_str())
            .bind(now)
            .bind(error)
            .bind(event.output.as_deref())
            .bind(ran_ms(event))
            .fetch_optional(&mut **tx)
            .await?;
        Ok(ended.unwrap_or(now))
    }

    /// Applies one finished event with every policy.
    async fn finish_one(
        &self,
        tx: &mut Tx,
        event: &Finished,
        now: i64,
        retry_delay: &RetryDelay,
    ) -> Result<FinishOutcome, StoreError> {
        let Some(firing) = self.lock_firing(tx, &event.firing_id).await? else {
            return Ok(FinishOutcome::new(event.firing_id.clone(), false, None));
        };
        let id = firing.text.as_str();
        let lease = Lease {
            id,
            worker_id: event.worker_id.as_str(),
        };
        if self.end_executing(tx, &[lease]).await?.is_empty() {
            return Ok(FinishOutcome::new(
                event.firing_id.clone(),
                false,
                Some(firing.state),
            ));
        }
        let (state, error) = ending(event);
        let mut outcome = FinishOutcome::new(event.firing_id.clone(), true, Some(state));
        let job_id = firing.id.job_id.as_str();
        // When the run ended, as recorded: a retry's delay counts from it.
        let ended = if state == FiringState::Succeeded {
            let done = Succeeded {
                id,
                job_id,
                output: event.output.as_deref(),
                ran_ms: ran_ms(event),
            };
            self.succeed(tx, &[done], now).await?;
            now
        } else {
            self.end_reported(tx, id, state, error.as_deref(), event, now)
                .await?
        };

        // A shard's success decides its instant's: the job row is locked
        // first, so two last shards finishing at once decide one after the
        // other and exactly one of them sees every shard succeeded.
        let sharded = firing.id.shard.is_some();
        let job = self
            .read_job(tx, job_id, sharded && state == FiringState::Succeeded)
            .await?;
        let instant_succeeded = state == FiringState::Succeeded
            && (!sharded || self.all_shards_succeeded(tx, &firing).await?);
        if state == FiringState::Failed {
            let interrupted = interruption(event);
            outcome.interrupted = interrupted;
            outcome.group = firing.group.clone();
            let by = match interrupted {
                Some(_) => Ended::ByTheInfrastructure,
                None => Ended::ByTheJob,
            };
            outcome.retry = self
                .retry(tx, &firing, job.as_ref(), now, ended, retry_delay, by)
                .await?;
            let mut error = error.unwrap_or_else(|| "failed".to_string());
            if outcome.retry.is_none() && interrupted.is_some() && job.is_some() {
                outcome.exhausted = true;
                error = exhausted(&error, firing.infra_retries);
                self.end_reported(tx, id, state, Some(&error), event, now)
                    .await?;
            }
            if outcome.retry.is_none() {
                outcome.alerts.push(firing.alert(
                    AlertKind::FiringFailed,
                    format!(
                        "firing {id} failed after {} attempt(s): {error}",
                        firing.id.attempt
                    ),
                    now,
                ));
                if let Some(job) = job {
                    if let Some(alert) = self.count_failure(tx, job, &firing, now).await? {
                        outcome.alerts.push(alert);
                    }
                }
            }
        } else if instant_succeeded {
            if let Some(job) = job {
                for target in &job.spec.on_success {
                    if let Some(triggered) = self.trigger_in(tx, target, None, None, now).await? {
                        outcome.triggered.push(triggered);
                    }
                }
            }
            let fanned_in = self.count_fan_in_success(tx, job_id, now).await?;
            outcome.triggered.extend(fanned_in);
        }
        outcome.released = self.release_held(tx, job_id, &firing.group, now).await?;
        Ok(outcome)
    }

    /// Whether this success of `firing` (written already) completes its
    /// instant: every shard has succeeded as many times as this shard now
    /// has. The first run of an instant completes when its last shard
    /// first succeeds; a re-run of the whole instant (`jobs.backfill`, one
    /// more attempt of every shard) completes once more, when its last
    /// shard succeeds, not at each shard of it. The instant's shard count
    /// is the one its firings were staged with, whatever the job says now.
    async fn all_shards_succeeded(
        &self,
        tx: &mut Tx,
        firing: &FiringRow,
    ) -> Result<bool, StoreError> {
        let missing: i64 = sqlx::query_scalar(
            "SELECT (SELECT shards FROM firings WHERE id = $3) - COUNT(*) \
             FROM (SELECT shard, COUNT(*) AS n FROM firings \
                 WHERE job_id = $1 AND scheduled_at = $2 AND state = 'succeeded' \
                 GROUP BY shard) done \
             WHERE done.n >= (SELECT COUNT(*) FROM firings \
                 WHERE job_id = $1 AND scheduled_at = $2 AND state = 'succeeded' \
                     AND shard = $4)",
        )
        .bind(firing.id.job_id.as_str())
        .bind(firing.id.scheduled_ms)
        .bind(firing.text.as_str())
        .bind(i64::from(firing.id.shard.unwrap_or(0)))
        .fetch_one(&mut **tx)
        .await?;
        Ok(missing <= 0)
    }

    /// Counts a firing that failed for good against its job; at
    /// `alert_after_failures` in a row, alerts (and pauses the job if asked).
    pub(super) async fn count_failure(
        &self,
        tx: &mut Tx,
        job: JobRow,
        firing: &FiringRow,
        now: i64,
    ) -> Result<Option<Alert>, StoreError> {
        let job_id = firing.id.job_id.as_str();
        let failures: i64 = sqlx::query_scalar(
            "UPDATE jobs SET consecutive_failures = consecutive_failures + 1 WHERE id = $1 \
             RETURNING consecutive_failures",
        )
        .bind(job_id)
        .fetch_one(&mut **tx)
        .await?;
        let Some(threshold) = job.spec.alert_after_failures else {
            return Ok(None);
        };
        if failures != i64::from(threshold) {
            return Ok(None);
        }
        let mut pause = false;
        if job.spec.pause_after_alert {
            // Re-read under a lock, so a concurrent put is not overwritten.
            if let Some(current) = self.read_job(tx, job_id, true).await? {
                if current.state == JobState::Active && current.spec.pause_after_alert {
                    let mut spec = current.spec;
                    spec.paused = true;
                    write_spec_and_state(tx, &spec, JobState::Paused, now).await?;
                    pause = true;
                }
            }
        }
        let message = format!(
            "job {job_id} failed {failures} times in a row{}",
            if pause { "; it was paused" } else { "" }
        );
        Ok(Some(Alert {
            group: job.spec.group.clone(),
            consecutive_failures: Some(threshold),
            paused: pause,
            lateness_ms: None,
            ..firing.alert(AlertKind::RepeatedFailures, message, now)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_stores::TestStore;
    use super::*;
    use chime_common::protocol::StartRequest;

    /// The tests' present.
    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_893_456_000, 0).expect("an instant")
    }

    /// Starts `id` for worker `w1` and reports `outcome` as the worker would.
    async fn run(test: &TestStore, id: &FiringId, outcome: Outcome) -> Finished {
        let now = now();
        let request = StartRequest {
            firing_id: id.clone(),
            worker_id: "w1".into(),
            group: "default".into(),
            handler: None,
            payload_sha256: None,
        };
        let started = test.store.start(&[request], now).await.expect("start");
        assert!(started[0].reply.accepted, "{started:?}");
        Finished {
            firing_id: id.clone(),
            worker_id: "w1".into(),
            outcome,
            error: None,
            interrupted: None,
            output: None,
            started_at: now,
            finished_at: now,
        }
    }

    /// Applies `event` on the fast path alone and checks it was applied there.
    async fn succeed_on_the_fast_path(test: &TestStore, event: Finished) {
        let mut applied = vec![None];
        test.store
            .finish_at_once(std::slice::from_ref(&event), ms(now()), &mut applied)
            .await;
        let outcome = applied[0].take().expect("applied on the fast path");
        assert!(outcome.applied, "{outcome:?}");
        assert_eq!(outcome.state, Some(FiringState::Succeeded));
    }

    /// As for starts (`start.rs`): a plain success must be applied on the
    /// fast path, not only by the transaction path behind it.
    async fn a_plain_success_is_applied_on_the_fast_path(test: TestStore) {
        let id = test.triggered(now()).await;
        let event = run(&test, &id, Outcome::Succeeded).await;
        succeed_on_the_fast_path(&test, event).await;
    }

    /// The fast path reads the job once, and resets the failure count only
    /// of jobs that have one: a success after a failure must still reset it.
    async fn a_success_on_the_fast_path_resets_the_failure_count(test: TestStore) {
        let failing = test.triggered(now()).await;
        let failed = run(&test, &failing, Outcome::Failed).await;
        let retry_at_once = |_: &chime_common::RetryPolicy, _: u32| std::time::Duration::ZERO;
        test.store
            .finish(&[failed], now(), &retry_at_once)
            .await
            .expect("the failure applied");
        let failures = || async {
            let (count,): (i64,) =
                sqlx::query_as("SELECT consecutive_failures FROM jobs WHERE id = 'hourly'")
                    .fetch_one(&test.store.read)
                    .await
                    .expect("the job's failure count");
            count
        };
        assert_eq!(failures().await, 1);
        let next = test
            .store
            .trigger("hourly", None, now())
            .await
            .expect("trigger")
            .expect("a firing");
        let event = run(&test, &next, Outcome::Succeeded).await;
        succeed_on_the_fast_path(&test, event).await;
        assert_eq!(failures().await, 0);
    }

    /// The recorded end of firing `id` (UTC ms).
    async fn recorded_end(test: &TestStore, id: &FiringId) -> i64 {
        let (at,): (i64,) = sqlx::query_as("SELECT finished_at FROM firings WHERE id = $1")
            .bind(id.to_string())
            .fetch_one(&test.store.read)
            .await
            .expect("the firing's end");
        at
    }

    /// History records when a run ended as the accepted start plus the run
    /// time its worker measured, whatever the worker's clock says, bounded
    /// by the start and by when the event is applied; on the fast path (a
    /// plain success) and the transaction path (a failure, a timeout) alike.
    async fn the_end_is_the_start_plus_the_reported_run_time(test: TestStore) {
        let second = chrono::Duration::seconds(1);
        let applied = now() + second * 60;
        let retry_later =
            |_: &chime_common::RetryPolicy, _: u32| std::time::Duration::from_secs(3600);
        // A worker whose clock is an hour behind ran it for 3 s.
        let behind = now() - second * 3600;
        let cases = [
            (
                Outcome::Succeeded,
                behind,
                behind + second * 3,
                ms(now()) + 3_000,
            ),
            (
                Outcome::Failed,
                behind,
                behind + second * 3,
                ms(now()) + 3_000,
            ),
            (
                Outcome::TimedOut,
                behind,
                behind + second * 3,
                ms(now()) + 3_000,
            ),
            // A run longer than the time since the start: the end is when
            // the event is applied.
            (
                Outcome::Succeeded,
                now(),
                now() + second * 3600,
                ms(applied),
            ),
            (Outcome::Failed, now(), now() + second * 3600, ms(applied)),
            // Times in the wrong order: the end is the start.
            (Outcome::Succeeded, now(), now() - second * 5, ms(now())),
            (Outcome::Failed, now(), now() - second * 5, ms(now())),
        ];
        for (i, (outcome, started_at, finished_at, expected)) in cases.into_iter().enumerate() {
            let id = test.triggered_job(&format!("job-{i}"), now()).await;
            let event = Finished {
                started_at,
                finished_at,
                ..run(&test, &id, outcome).await
            };
            let applied_events = test
                .store
                .finish(&[event], applied, &retry_later)
                .await
                .expect("applied");
            assert!(applied_events[0].applied, "{applied_events:?}");
            assert_eq!(
                recorded_end(&test, &id).await,
                expected,
                "case {i}: {outcome:?}"
            );
        }
    }

    #[tokio::test]
    async fn postgres_records_the_start_plus_the_reported_run_time() {
        the_end_is_the_start_plus_the_reported_run_time(TestStore::postgres().await).await;
    }

    #[tokio::test]
    async fn sqlite_records_the_start_plus_the_reported_run_time() {
        the_end_is_the_start_plus_the_reported_run_time(TestStore::sqlite().await).await;
    }

    #[tokio::test]
    async fn postgres_resets_the_failure_count_on_the_fast_path() {
        a_success_on_the_fast_path_resets_the_failure_count(TestStore::postgres().await).await;
    }

    #[tokio::test]
    async fn sqlite_resets_the_failure_count_on_the_fast_path() {
        a_success_on_the_fast_path_resets_the_failure_count(TestStore::sqlite().await).await;
    }

    #[tokio::test]
    async fn postgres_applies_a_plain_success_on_the_fast_path() {
        a_plain_success_is_applied_on_the_fast_path(TestStore::postgres().await).await;
    }

    #[tokio::test]
    async fn sqlite_applies_a_plain_success_on_the_fast_path() {
        a_plain_success_is_applied_on_the_fast_path(TestStore::sqlite().await).await;
    }
}
