//! The start transition: `staged` or `published` → `executing`, under the
//! job's overlap policy and concurrency limits and its group's limits
//! (which may instead skip, hold, or ask for others to be cancelled), once
//! per attempt.
//!
//! A batch's plain starts (waiting to start, not running anywhere, a valid
//! timeout, the job's overlap `allow` and no limits: [`PLAIN_START`]) need
//! no policy decision. They are first decided in one round trip, the fast
//! path (one statement on PostgreSQL, one command of statements on SQLite):
//! a round trip costs more than the work. What is left takes one
//! transaction: the plain starts set-based, the others one by one. Both paths write a start through
//! [`Store::begin_executing`]'s statements and decide "plain" with the same
//! SQL.

use super::conditions::{MAX_TIMEOUT_MS, PLAIN_START};
use super::dialect::{Backend, BindRows, Col};
use super::error::StoreError;
use super::executing::Started;
use super::handle::Store;
use super::hold::Hold;
use super::lateness::{due_instant, Due, LATENESS_SPEC};
use super::locks::{complete, split_batch, FiringRow, JobRow, Tx};
use super::types::HoldCause as Cause;
use super::types::StartOutcome;
use super::values::{instant, json_text, ms, RowExt};
use chime_common::bounds::MAX_TIMEOUT;
use chime_common::concurrency::GroupLimits;
use chime_common::duration::format_duration;
use chime_common::protocol::{AlertKind, StartRefusal, StartRequest};
use chime_common::{FiringId, FiringState, Overlap};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

/// What a start sets on the firing row, from the batch row `r` (`id`,
/// `worker_id`) at `$3`.
const SET_EXECUTING: &str = "state = 'executing', worker = r.worker_id, started_at = $3, \
     published_at = COALESCE(published_at, $3)";

/// The batch columns [`SET_EXECUTING`] reads.
const STARTED_COLUMNS: [(&str, Col); 2] = [("id", Col::Text), ("worker_id", Col::Text)];

/// Whether the batch row `r` asks as the firing `f` was staged: a worker of
/// its group that received its handler and payload (each compared only if
/// the request carries it). [`super::locks::FiringRow::refusal_for`] says
/// the same for the transaction path, and names the refusal.
const AS_STAGED: &str = "f.group_name = r.group_name \
     AND (f.worker_id IS NULL OR f.worker_id = r.worker_id) \
     AND (r.handler IS NULL OR f.handler = r.handler) \
     AND (r.payload_sha256 IS NULL OR f.payload_sha256 IS NULL \
          OR f.payload_sha256 = r.payload_sha256)";

/// The fast path's batch columns: the start's, and what [`AS_STAGED`] compares.
const ASKED_COLUMNS: [(&str, Col); 5] = [
    ("id", Col::Text),
    ("worker_id", Col::Text),
    ("group_name", Col::Text),
    ("handler", Col::Text),
    ("payload_sha256", Col::Text),
];

/// How long after a start the same worker asking again is answered the
/// same: its own second request after a lost reply comes within seconds.
/// Later, the ask is a delivery of the message again (an ack lost, or sent
/// after `ack_wait`), possibly of an attempt the worker has run and
/// forgotten: refused `already_started`, so no attempt runs twice. A
/// worker that gave up on a start recorded late, and so never ran it, has
/// it re-queued when its heartbeats leave it out of `running`.
const REPEATED_START_MS: i64 = 5_000;

/// Whether a stored timeout is one validation accepts; only those start.
fn timeout_in_range(timeout_ms: i64) -> bool {
    (1..=MAX_TIMEOUT_MS).contains(&timeout_ms)
}

impl Store {
    /// Decides start requests (see docs/PROTOCOL.md): the plain ones on the
    /// fast path (unless `StoreOptions::fast_paths` turns it off), then the
    /// rest, in order, in one transaction. A firing's attempt is accepted at most once: a second
    /// worker is refused `already_started`, the same worker gets the same
    /// deadline again. Each start is judged for lateness by the statement
    /// that makes it (`lateness.rs`).
    pub async fn start(
        &self,
        requests: &[StartRequest],
        now: DateTime<Utc>,
    ) -> Result<Vec<StartOutcome>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let now = ms(now);
        let mut decided: Vec<Option<StartOutcome>> = vec![None; requests.len()];
        if self.fast_paths {
            self.start_at_once(requests, now, &mut decided).await;
        }
        complete(requests, decided, |rest| async move {
            self.start_in_transaction(&rest, now).await
        })
        .await
    }

    /// The fast path: accepts the plain starts of a batch (each firing named
    /// once) in one round trip, and leaves the rest undecided.
    ///
    /// A start is on the path of every firing, and on a busy machine where
    /// the database, NATS and the workers share the CPUs each round trip of
    /// a transaction (begin, lock, insert, update, commit) costs more than
    /// the work. On PostgreSQL the conditional update takes the row locks
    /// and re-checks the state of a row another start changed meanwhile; on
    /// SQLite the command holds the one writer. Either way a firing is
    /// still started once. Any error (on PostgreSQL a conflicting executing
    /// row, a deadlock; the database down) leaves the whole batch to
    /// [`Store::start_in_transaction`], which decides it and reports errors.
    async fn start_at_once(
        &self,
        requests: &[StartRequest],
        now: i64,
        decided: &mut [Option<StartOutcome>],
    ) {
        #[derive(Serialize)]
        struct Ask<'a> {
            id: String,
            worker_id: &'a str,
            group_name: &'a str,
            handler: Option<&'a str>,
            payload_sha256: Option<&'a str>,
            /// Which request it answers (not sent).
            #[serde(skip)]
            request: usize,
        }
        let ids: Vec<&FiringId> = requests.iter().map(|r| &r.firing_id).collect();
        let (once, _) = split_batch(&ids, |_| true);
        let mut asks: Vec<Ask> = once
            .into_iter()
            .map(|i| Ask {
                id: requests[i].firing_id.to_string(),
                worker_id: requests[i].worker_id.as_str(),
                group_name: requests[i].group.as_str(),
                handler: requests[i].handler.as_deref(),
                payload_sha256: requests[i].payload_sha256.as_deref(),
                request: i,
            })
            .collect();
        if asks.is_empty() {
            return;
        }
        // Firing-id order, so concurrent batches lock in one order.
        asks.sort_by(|a, b| a.id.cmp(&b.id));
        let asked = self.backend.json_rows(1, &ASKED_COLUMNS);
        let plain = PLAIN_START.as_str();
        let due = due_instant("f");
        let sql = match self.backend {
            Backend::Postgres => format!(
                "WITH started AS ( \
                     UPDATE firings f SET {SET_EXECUTING} \
                     FROM {asked}, jobs j \
                     WHERE f.id = r.id AND j.id = f.job_id AND {plain} AND {AS_STAGED} \
                     RETURNING f.id, f.job_id, f.group_name, r.worker_id, f.attempt, \
                         f.timeout_ms, {due} AS due_instant, {LATENESS_SPEC} AS lateness_spec), \
                 executing_rows AS ( \
                     INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, \
                         started_at, deadline_at) \
                     SELECT id, job_id, group_name, worker_id, attempt, $3, $3 + timeout_ms \
                     FROM started), \
                 no_longer_waiting AS ( \
                     DELETE FROM waiting w USING started WHERE w.firing_id = started.id) \
                 SELECT id, timeout_ms, due_instant, lateness_spec FROM started"
            ),
            // The same steps as statements of one transaction, each driven
            // by the batch (SQLite plans a join from `json_each` outwards; a
            // table of the command's own would be planned as if it were
            // large). The update reports what it started (`RETURNING` names
            // the table, not its alias); the firings it started are then
            // the batch's executing since `$3` for their worker without an
            // executing row. One already running is left to the
            // transaction path.
            Backend::Sqlite => format!(
                "BEGIN IMMEDIATE; \
                 UPDATE firings AS f SET {SET_EXECUTING} \
                 FROM {asked}, jobs j \
                 WHERE f.id = r.id AND j.id = f.job_id AND {plain} AND {AS_STAGED} \
                     AND NOT EXISTS (SELECT 1 FROM executing e WHERE e.firing_id = f.id) \
                 RETURNING firings.id, firings.timeout_ms, {}, \
                     (SELECT {LATENESS_SPEC} FROM jobs j WHERE j.id = firings.job_id); \
                 INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, \
                     started_at, deadline_at) \
                 SELECT f.id, f.job_id, f.group_name, f.worker, f.attempt, $3, $3 + f.timeout_ms \
                 FROM {asked} JOIN firings f ON f.id = r.id \
                 WHERE f.state = 'executing' AND f.started_at = $3 AND f.worker = r.worker_id \
                     AND NOT EXISTS (SELECT 1 FROM executing e WHERE e.firing_id = f.id); \
                 DELETE FROM waiting WHERE firing_id IN (SELECT r.id FROM {asked}) \
                     AND EXISTS (SELECT 1 FROM firings f \
                         WHERE f.id = waiting.firing_id AND f.state = 'executing'); \
                 COMMIT",
                due_instant("firings")
            ),
        };
        let body = match json_text(&asks) {
            Ok(body) => body,
            Err(e) => {
                tracing::debug!(error = %e, "start batch left to the transaction path");
                return;
            }
        };
        let started: Vec<(String, i64, i64, Option<String>)> = match self
            .fast_path(sqlx::query_as(&sql).bind_rows(&body).bind(now))
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "start batch left to the transaction path");
                return;
            }
        };
        let started: HashMap<String, (i64, i64, Option<String>)> = started
            .into_iter()
            .map(|(id, timeout_ms, due_instant, spec)| (id, (timeout_ms, due_instant, spec)))
            .collect();
        for ask in &asks {
            if let Some((timeout_ms, due_instant, spec)) = started.get(&ask.id) {
                let request = &requests[ask.request];
                let due = Due::of_spec(*due_instant, &request.firing_id.job_id, spec.as_deref());
                decided[ask.request] = Some(due.started(
                    &request.firing_id,
                    &request.group,
                    now.saturating_add(*timeout_ms),
                    now,
                ));
            }
        }
    }

    /// Decides start requests in one transaction: the plain ones set-based,
    /// the rest one by one.
    async fn start_in_transaction(
        &self,
        requests: &[StartRequest],
        now: i64,
    ) -> Result<Vec<StartOutcome>, StoreError> {
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let ids: Vec<&FiringId> = requests.iter().map(|r| &r.firing_id).collect();
            let rows = self.lock_batch(&mut tx, &ids).await?;
            let (plain, other) = split_batch(&ids, |i| {
                rows.get(ids[i]).is_some_and(|row| {
                    row.plain_start && row.firing.refusal_for(&requests[i]).is_none()
                })
            });
            let mut outcomes: Vec<Option<StartOutcome>> = vec![None; requests.len()];
            let mut started = Vec::with_capacity(plain.len());
            for &i in &plain {
                let request = &requests[i];
                if let Some(row) = rows.get(&request.firing_id) {
                    started.push(Started {
                        id: row.firing.text.as_str(),
                        job_id: row.firing.id.job_id.as_str(),
                        group_name: row.firing.group.as_str(),
                        worker_id: request.worker_id.as_str(),
                        attempt: i64::from(row.firing.id.attempt),
                        deadline_at: now.saturating_add(row.firing.timeout_ms),
                    });
                }
            }
            let accepted = self.begin_executing(&mut tx, started, now).await?;
            for &i in &plain {
                let id = &requests[i].firing_id;
                // The row locks make a conflict impossible; refuse it if one happens.
                outcomes[i] = Some(
                    match rows.get(id).and_then(|row| {
                        let deadline = accepted.get(&row.firing.text)?;
                        Some(row.due.started(id, &row.firing.group, *deadline, now))
                    }) {
                        Some(started) => started,
                        None => StartOutcome::refused(StartRefusal::AlreadyStarted),
                    },
                );
            }
            for i in other {
                outcomes[i] = Some(self.start_one(&mut tx, &requests[i], now).await?);
            }
            tx.commit().await?;
            Ok(outcomes.into_iter().flatten().collect())
        })
        .await
    }

    /// Starts `started` (firings locked, their starts decided): takes each
    /// one's executing row, then moves it to `executing` and out of
    /// `waiting`. Returns the deadline of each firing it started; one whose
    /// executing row was already taken is left as it was.
    async fn begin_executing(
        &self,
        tx: &mut Tx,
        mut started: Vec<Started<'_>>,
        now: i64,
    ) -> Result<HashMap<String, i64>, StoreError> {
        let inserted = self.insert_executing(tx, &started, now).await?;
        started.retain(|s| inserted.contains(s.id));
        if started.is_empty() {
            return Ok(HashMap::new());
        }
        let update = format!(
            "UPDATE firings SET {SET_EXECUTING} FROM {} WHERE firings.id = r.id",
            self.backend.json_rows(1, &STARTED_COLUMNS)
        );
        sqlx::query(&update)
            .bind_rows(&json_text(&started)?)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        let ids: Vec<&str> = started.iter().map(|s| s.id).collect();
        self.remove_waiting(tx, &ids).await?;
        Ok(started
            .into_iter()
            .map(|s| (s.id.to_string(), s.deadline_at))
            .collect())
    }

    /// Decides one start request under its job's overlap policy.
    async fn start_one(
        &self,
        tx: &mut Tx,
        request: &StartRequest,
        now: i64,
    ) -> Result<StartOutcome, StoreError> {
        let Some(firing) = self.lock_firing(tx, &request.firing_id).await? else {
            return Ok(StartOutcome::refused(StartRefusal::UnknownFiring));
        };
        if let Some(refusal) = firing.refusal_for(request) {
            return Ok(StartOutcome::refused(refusal));
        }
        match firing.state {
            FiringState::Cancelled => return Ok(StartOutcome::refused(StartRefusal::Cancelled)),
            FiringState::Skipped => return Ok(StartOutcome::refused(StartRefusal::Skipped)),
            s if s.is_final() => return Ok(StartOutcome::refused(StartRefusal::AlreadyFinished)),
            _ => {}
        }
        let id = firing.text.as_str();
        if let Some(row) = sqlx::query(
            "SELECT worker_id, started_at, deadline_at FROM executing WHERE firing_id = $1",
        )
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
        {
            let repeated = row.text(id, "worker_id")? == request.worker_id
                && now.saturating_sub(row.int(id, "started_at")?) <= REPEATED_START_MS;
            return Ok(if repeated {
                let deadline = instant(id, "deadline_at", row.int(id, "deadline_at")?)?;
                StartOutcome::accepted(deadline)
            } else {
                StartOutcome::refused(StartRefusal::AlreadyStarted)
            });
        }
        if firing.state == FiringState::Executing {
            // Executing without an executing row: someone else owns it.
            return Ok(StartOutcome::refused(StartRefusal::AlreadyStarted));
        }
        if !timeout_in_range(firing.timeout_ms) {
            // Validation lets no such timeout in; a row written before it
            // did (or by a bug) ends here instead of computing a deadline.
            let error = format!(
                "the firing's stored timeout of {} ms is outside the accepted range \
                 (1 ms to {}); put the job again with a valid timeout",
                firing.timeout_ms,
                format_duration(MAX_TIMEOUT)
            );
            self.fail_unstarted(tx, id, &error, now).await?;
            return Ok(StartOutcome {
                alerts: vec![firing.alert(
                    AlertKind::FiringFailed,
                    format!("firing {id} failed before it started: {error}"),
                    now,
                )],
                ..StartOutcome::refused(StartRefusal::AlreadyFinished)
            });
        }

        let job_id = firing.id.job_id.as_str();
        let group = firing.group.as_str();
        let own_hold = self.own_hold(tx, id).await?;
        let mut cancel = Vec::new();
        let policy = self.start_policy(tx, job_id).await?;
        if let Some(limit) = policy.limit {
            let running = self.running_firings(tx, job_id, id).await?;
            let held = self.held_count(tx, Cause::Job, job_id, group, id).await?;
            let released = own_hold.is_some_and(|h| h.is_released(Cause::Job));
            let busy = i64::try_from(running.len())
                .unwrap_or(i64::MAX)
                .saturating_add(held.released);
            // A firing that was not released into a slot waits behind those
            // held before it.
            let over = busy >= i64::from(limit) || (!released && held.waiting > 0);
            if over {
                match policy.overlap {
                    Overlap::Forbid => {
                        self.skip_for_overlap(tx, id, &still_running(limit), now)
                            .await?;
                        return Ok(StartOutcome::refused(StartRefusal::Skipped));
                    }
                    Overlap::Queue => {
                        let capacity = policy.queue_capacity;
                        if own_hold.is_some() || held.waiting < i64::from(capacity) {
                            return self.hold_start(tx, &firing, Cause::Job, now).await;
                        }
                        let reason = format!("overlap: the queue is full (queue_limit {capacity})");
                        self.skip_for_overlap(tx, id, &reason, now).await?;
                        return Ok(StartOutcome::refused(StartRefusal::Skipped));
                    }
                    Overlap::Allow => {
                        return self.hold_start(tx, &firing, Cause::Job, now).await;
                    }
                    Overlap::Replace => {
                        // The oldest runs make room: as many as keep the
                        // job within its limit once this one runs.
                        let excess = busy.saturating_sub(i64::from(limit)).saturating_add(1);
                        let n = usize::try_from(excess).unwrap_or(usize::MAX);
                        cancel = running.into_iter().take(n).collect();
                    }
                }
            }
        }
        let limits = self.lock_group_limits(tx, group).await?;
        if let Some(cause) = self
            .group_holds(tx, limits.as_ref(), (job_id, group, id), own_hold, now)
            .await?
        {
            return self.hold_start(tx, &firing, cause, now).await;
        }

        let started = Started {
            id,
            job_id,
            group_name: group,
            worker_id: request.worker_id.as_str(),
            attempt: i64::from(firing.id.attempt),
            deadline_at: now.saturating_add(firing.timeout_ms),
        };
        let Some(deadline) = self
            .begin_executing(tx, vec![started], now)
            .await?
            .remove(id)
        else {
            // Lost a race the firing row lock should have prevented; refuse.
            return Ok(StartOutcome::refused(StartRefusal::AlreadyStarted));
        };
        if limits.is_some_and(|l| l.max_per_second.is_some()) {
            self.record_group_start(tx, group, id, now).await?;
        }
        let due = Due {
            at: firing.due_instant,
            max_lateness: policy.max_lateness,
        };
        let mut outcome = StartOutcome {
            cancel,
            ..due.started(&firing.id, group, deadline, now)
        };
        if let Some(hold) = own_hold {
            self.unhold(tx, &[id]).await?;
            let waited = u64::try_from(now.saturating_sub(hold.held_at)).unwrap_or(0);
            outcome.limit_wait = Some((hold.cause, Duration::from_millis(waited)));
        }
        Ok(outcome)
    }

    /// The limit of the firing's group (`max_concurrent`, then
    /// `max_per_second`) that holds it back, if any. A firing that was not
    /// released into a slot waits behind those held before it.
    async fn group_holds(
        &self,
        tx: &mut Tx,
        limits: Option<&GroupLimits>,
        (job_id, group, id): (&str, &str, &str),
        own_hold: Option<Hold>,
        now: i64,
    ) -> Result<Option<Cause>, StoreError> {
        let Some(limits) = limits else {
            return Ok(None);
        };
        if let Some(max) = limits.max_concurrent {
            let running = self.running_in(tx, "group_name", group).await?;
            let held = self.held_count(tx, Cause::Group, job_id, group, id).await?;
            let released = own_hold.is_some_and(|h| h.is_released(Cause::Group));
            if running.saturating_add(held.released) >= i64::from(max)
                || (!released && held.waiting > 0)
            {
                return Ok(Some(Cause::Group));
            }
        }
        if let Some(max) = limits.max_per_second {
            let started = self.starts_in_window(tx, group, now).await?;
            let held = self.held_count(tx, Cause::Rate, job_id, group, id).await?;
            let released = own_hold.is_some_and(|h| h.is_released(Cause::Rate));
            if started.saturating_add(held.released) >= i64::from(max)
                || (!released && held.waiting > 0)
            {
                return Ok(Some(Cause::Rate));
            }
        }
        Ok(None)
    }

    /// Holds a firing over a limit: it waits (`queued`) until a slot frees.
    async fn hold_start(
        &self,
        tx: &mut Tx,
        firing: &FiringRow,
        cause: Cause,
        now: i64,
    ) -> Result<StartOutcome, StoreError> {
        let job_id = firing.id.job_id.as_str();
        self.hold(tx, &firing.text, job_id, &firing.group, cause, now)
            .await?;
        Ok(StartOutcome {
            held: Some(cause),
            ..StartOutcome::refused(StartRefusal::Queued)
        })
    }

    /// The job's overlap policy and limits; `allow` without a limit if it
    /// was deleted or cannot be read. A limited job's row is locked, so the
    /// limit is judged by one of its starts at a time.
    async fn start_policy(&self, tx: &mut Tx, job_id: &str) -> Result<StartPolicy, StoreError> {
        let mut policy = StartPolicy::of(self.read_job(tx, job_id, false).await?);
        if policy.limit.is_some() {
            policy = StartPolicy::of(self.read_job(tx, job_id, true).await?);
        }
        Ok(policy)
    }
}

/// What a start of a job decides on.
struct StartPolicy {
    overlap: Overlap,
    /// The job's firings that may run at once (`None`: no limit).
    limit: Option<u32>,
    queue_capacity: u32,
    max_lateness: Option<Duration>,
}

impl StartPolicy {
    fn of(job: Option<JobRow>) -> Self {
        match job {
            Some(job) => StartPolicy {
                overlap: job.spec.overlap,
                limit: job.spec.concurrency.limit(job.spec.overlap),
                queue_capacity: job.spec.concurrency.queue_capacity(),
                max_lateness: job.spec.time.max_lateness,
            },
            None => StartPolicy {
                overlap: Overlap::Allow,
                limit: None,
                queue_capacity: 1,
                max_lateness: None,
            },
        }
    }
}

/// Why a firing is skipped under `forbid` with `limit` firings running.
fn still_running(limit: u32) -> String {
    if limit == 1 {
        "overlap: previous firing still running".to_string()
    } else {
        format!("overlap: {limit} firings still running (max_concurrent)")
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_stores::TestStore;
    use super::*;

    /// Falling back to the transaction path decides the same (the store
    /// suite runs both paths), so only this test sees a fast path that no
    /// longer decides anything: a plain start must be decided on it.
    async fn a_plain_start_is_decided_on_the_fast_path(test: TestStore) {
        let now = DateTime::from_timestamp(1_893_456_000, 0).expect("an instant");
        let id = test.triggered(now).await;
        let request = StartRequest {
            firing_id: id,
            worker_id: "w1".into(),
            group: "default".into(),
            handler: Some("test".into()),
            payload_sha256: None,
        };
        let mut decided = vec![None];
        test.store
            .start_at_once(std::slice::from_ref(&request), ms(now), &mut decided)
            .await;
        let outcome = decided[0].take().expect("decided on the fast path");
        assert!(outcome.reply.accepted, "{outcome:?}");
    }

    #[tokio::test]
    async fn postgres_decides_a_plain_start_on_the_fast_path() {
        a_plain_start_is_decided_on_the_fast_path(TestStore::postgres().await).await;
    }

    #[tokio::test]
    async fn sqlite_decides_a_plain_start_on_the_fast_path() {
        a_plain_start_is_decided_on_the_fast_path(TestStore::sqlite().await).await;
    }
}
