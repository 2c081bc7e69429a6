//! Property: any spec that validation accepts lives through the real store,
//! on PostgreSQL and SQLite, without an error or a panic: put, staged (on
//! time and misfired), published, started, finished failed and succeeded,
//! retried, expired (re-queued as lost), deleted. The first instant of the
//! schedule and triggered firings each go through a chain of attempts that
//! fail, expire and succeed in turn.
//!
//! Specs cover the documented ranges (docs/API.md) up to their ends: every
//! DURATION from its least to its greatest value, TIMEs from 1970 to the end
//! of 2099, counts up to 10^12, every policy; the store runs at instants from
//! 1970 to the end of 2099 too. Each case gets a fresh database, so a
//! failure is the spec's alone and shrinks to it.

use chime_common::duration::{format_duration, format_time, from_millis};
use chime_common::protocol::{Finished, Outcome, StartRequest};
use chime_common::schedule::ScheduleSpec;
use chime_common::{FiringId, FiringState, JobSpec, Limits};
use chime_scheduler::store::{StageRequest, StagedFiring, Store, StoreError, StoreOptions};
use chime_scheduler::workers::retry::retry_delay;
use chime_tests::{DatabaseKind, TestDatabase};
use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;
use serde_json::{json, Value};

const DAY_MS: u64 = 86_400_000;
/// The longest timeout, retry delay and misfire threshold.
const MAX_SPAN_MS: u64 = 30 * DAY_MS;
/// The longest `every`.
const MAX_EVERY_MS: u64 = 3650 * DAY_MS;
/// 2099-12-31T23:59:59.999Z, the last TIME accepted.
const LAST_TIME_MS: i64 = 4_102_444_799_999;
/// The largest `count`.
const MAX_COUNT: u64 = 1_000_000_000_000;
/// How late the misfired case stages the first instant, at most.
const MAX_LATENESS_MS: u64 = 2 * MAX_SPAN_MS;
const JOB: &str = "prop-job";
const TIME_ZONES: [&str; 6] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Apia",
];

/// A value of `min..=max`, its ends often.
fn edgy(min: u64, max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(min), 1 => Just(max), 3 => min..=max]
}

/// A DURATION of `min..=max` ms, written as an integer or as text.
fn duration(min: u64, max: u64) -> impl Strategy<Value = Value> {
    (edgy(min, max), prop::bool::ANY).prop_map(|(ms, text)| {
        if text {
            json!(format_duration(std::time::Duration::from_millis(ms)))
        } else {
            json!(ms)
        }
    })
}

fn instant_ms() -> impl Strategy<Value = i64> {
    edgy(0, LAST_TIME_MS as u64).prop_map(|ms| ms as i64)
}

fn time() -> impl Strategy<Value = Value> {
    instant_ms().prop_map(|ms| json!(format_time(from_millis(ms))))
}

/// One cron field: `*`, a value, a range or a step of `lo..=hi`.
fn cron_field(lo: u32, hi: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        (lo..=hi).prop_map(|n| n.to_string()),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=hi - lo + 1).prop_map(|step| format!("*/{step}")),
    ]
}

fn cron() -> impl Strategy<Value = Value> {
    let expression = prop_oneof![
        (
            cron_field(0, 59),
            cron_field(0, 23),
            cron_field(1, 31),
            cron_field(1, 12),
            cron_field(0, 7)
        )
            .prop_map(|(m, h, dom, mon, dow)| format!("{m} {h} {dom} {mon} {dow}")),
        (cron_field(0, 59), cron_field(0, 59), cron_field(0, 23))
            .prop_map(|(s, m, h)| format!("{s} {m} {h} ? * *")),
        prop::sample::select(vec![
            "@yearly",
            "@hourly",
            "0 0 12 L * ?",
            "0 0 12 15W * ?",
            "0 0 12 ? * 6#3",
            "0 30 2 29 2 ? 2096",
            "59 59 23 31 12 ? 2099",
        ])
        .prop_map(String::from),
    ];
    (expression, prop::sample::select(TIME_ZONES.to_vec()))
        .prop_map(|(cron, tz)| json!({"cron": cron, "tz": tz}))
}

fn every() -> impl Strategy<Value = Value> {
    (
        duration(1, MAX_EVERY_MS),
        proptest::option::of(instant_ms()),
        proptest::option::of(instant_ms()),
        proptest::option::of(edgy(1, MAX_COUNT)),
    )
        .prop_map(|(every, start, end, count)| {
            let mut schedule = json!({ "every": every });
            // end_at must come after start_at: the later one ends the window.
            let (start, end) = match (start, end) {
                (Some(s), Some(e)) if e < s => (Some(e), Some(s)),
                (Some(s), Some(e)) if e == s => (Some(s), None),
                other => other,
            };
            if let Some(s) = start {
                schedule["start_at"] = json!(format_time(from_millis(s)));
            }
            if let Some(e) = end {
                schedule["end_at"] = json!(format_time(from_millis(e)));
            }
            if let Some(n) = count {
                schedule["count"] = json!(n);
            }
            schedule
        })
}

fn schedule() -> impl Strategy<Value = Value> {
    prop_oneof![cron(), every(), time().prop_map(|at| json!({ "at": at }))]
}

fn retry() -> impl Strategy<Value = Value> {
    (
        edgy(1, 100),
        edgy(0, MAX_SPAN_MS),
        edgy(0, MAX_SPAN_MS),
        prop_oneof![Just(1.0), Just(100.0), 1.0f64..=100.0],
    )
        .prop_map(|(attempts, a, b, multiplier)| {
            json!({
                "max_attempts": attempts,
                "initial": a.min(b),
                "max": a.max(b),
                "multiplier": multiplier,
            })
        })
}

prop_compose! {
    fn spec()(
        schedule in schedule(),
        priority in 0..=9u8,
        timeout in duration(1, MAX_SPAN_MS),
        retry in retry(),
        overlap in prop::sample::select(vec!["allow", "forbid", "queue", "replace"]),
        misfire in prop::sample::select(vec!["fire_once", "fire_all", "skip"]),
        misfire_threshold in duration(0, MAX_SPAN_MS),
        paused in prop::bool::weighted(0.2),
        on_success in prop::bool::ANY,
        alert_after_failures in proptest::option::of(1..=3u32),
        pause_after_alert in prop::bool::ANY,
    ) -> Value {
        let mut spec = json!({
            "id": JOB,
            "schedule": schedule,
            "handler": "echo",
            "payload": {"from": "store_properties"},
            "priority": priority,
            "timeout": timeout,
            "retry": retry,
            "overlap": overlap,
            "misfire": misfire,
            "misfire_threshold": misfire_threshold,
            "paused": paused,
            "pause_after_alert": pause_after_alert,
        });
        if on_success {
            spec["on_success"] = json!(["another-job"]);
        }
        if let Some(n) = alert_after_failures {
            spec["alert_after_failures"] = json!(n);
        }
        spec
    }
}

/// One case: a spec, when it is put, and how late its first instant is staged.
#[derive(Debug, Clone)]
struct Case {
    spec: Value,
    put_at_ms: i64,
    lateness_ms: u64,
}

prop_compose! {
    fn case()(spec in spec(), put_at_ms in instant_ms(), lateness_ms in edgy(0, MAX_LATENESS_MS)) -> Case {
        Case { spec, put_at_ms, lateness_ms }
    }
}

/// What the chain of attempts of one firing does with each attempt, in turn.
#[derive(Debug, Clone, Copy)]
enum Step {
    Fail,
    Expire,
    Succeed,
}

/// The store as the scheduler's services drive it, on a clock that only
/// moves forward.
struct Drive {
    store: Store,
    partition: u32,
    clock: DateTime<Utc>,
    slices: u32,
}

const MS: TimeDelta = TimeDelta::milliseconds(1);

impl Drive {
    fn advance_to(&mut self, t: DateTime<Utc>) {
        self.clock = self.clock.max(t);
    }

    /// Claims the one-millisecond slice at `at` (as an early claim, so only
    /// that slice is staged) with the present at `now`.
    async fn stage(&mut self, at: DateTime<Utc>, now: DateTime<Utc>) -> Vec<StagedFiring> {
        self.slices += 1;
        let mut request = StageRequest::new(
            format!("slice-{}", self.slices),
            self.partition,
            at + MS,
            now,
        );
        request.slice_start = Some(at);
        self.advance_to(now);
        let outcome = self
            .store
            .stage_slice(&request)
            .await
            .unwrap_or_else(|e| panic!("staging [{at}, {at} + 1 ms) at {now}: {e}"));
        assert!(
            outcome.corrupt.is_empty(),
            "corrupt rows: {:?}",
            outcome.corrupt
        );
        outcome
            .firings
            .into_iter()
            .filter(|f| f.job_id == JOB)
            .collect()
    }

    async fn publish(&mut self, ids: &[FiringId]) {
        self.store
            .record_published(ids, self.clock)
            .await
            .unwrap_or_else(|e| panic!("marking {ids:?} published at {}: {e}", self.clock));
    }

    /// Starts `id` on `worker`; the deadline when accepted.
    async fn start(&mut self, id: &FiringId, worker: &str) -> Option<DateTime<Utc>> {
        let request = StartRequest {
            firing_id: id.clone(),
            worker_id: worker.to_string(),
            group: "default".to_string(),
            handler: None,
            payload_sha256: None,
        };
        let mut decisions = self
            .store
            .start(&[request], self.clock)
            .await
            .unwrap_or_else(|e| panic!("starting {id} at {}: {e}", self.clock));
        let decision = decisions.pop().expect("one decision per request");
        decision.reply.accepted.then(|| {
            decision
                .reply
                .deadline
                .expect("an accepted start has a deadline")
        })
    }

    /// Reports `id`'s run on `worker` ended `outcome`; the next attempt, if any.
    async fn finish(
        &mut self,
        id: &FiringId,
        worker: &str,
        outcome: Outcome,
    ) -> Option<(FiringId, DateTime<Utc>)> {
        let started_at = self.clock;
        self.advance_to(self.clock + MS);
        let event = Finished {
            firing_id: id.clone(),
            worker_id: worker.to_string(),
            outcome,
            error: (outcome != Outcome::Succeeded).then(|| "it broke".to_string()),
            interrupted: None,
            output: Some("output".to_string()),
            started_at,
            finished_at: self.clock,
        };
        let mut outcomes = self
            .store
            .finish(&[event], self.clock, &retry_delay)
            .await
            .unwrap_or_else(|e| panic!("finishing {id} {outcome:?} at {}: {e}", self.clock));
        let done = outcomes.pop().expect("one outcome per event");
        assert!(
            done.applied,
            "finishing {id} {outcome:?} changed nothing: {done:?}"
        );
        let expected = match outcome {
            Outcome::Succeeded => FiringState::Succeeded,
            _ => FiringState::Failed,
        };
        assert_eq!(done.state, Some(expected), "{id} after {outcome:?}");
        done.retry
    }

    /// The expiry monitor's part: `id`'s deadline has passed.
    async fn expire(
        &mut self,
        id: &FiringId,
        deadline: DateTime<Utc>,
    ) -> Option<(FiringId, DateTime<Utc>)> {
        self.advance_to(deadline + MS);
        let rows = self
            .store
            .executing(1000)
            .await
            .unwrap_or_else(|e| panic!("listing executing firings: {e}"));
        let row = rows
            .iter()
            .find(|r| &r.firing_id == id)
            .unwrap_or_else(|| panic!("{id} is not executing: {rows:?}"));
        let requeued = self
            .store
            .requeue(row, "deadline passed", self.clock, &retry_delay)
            .await
            .unwrap_or_else(|e| panic!("re-queueing {id} at {}: {e}", self.clock))
            .unwrap_or_else(|| panic!("{id} was not re-queued"));
        assert_eq!(&requeued.lost, id);
        requeued.retry
    }

    /// Takes `first`, staged, through `steps`, one per attempt, until an
    /// attempt ends without a retry: each next attempt is adopted by the
    /// slice of its due instant, published and started.
    async fn chain(&mut self, first: FiringId, steps: &[Step]) {
        let mut id = first;
        for (n, step) in steps.iter().enumerate() {
            self.publish(std::slice::from_ref(&id)).await;
            let worker = format!("worker-{n}");
            let deadline = self
                .start(&id, &worker)
                .await
                .unwrap_or_else(|| panic!("{id} was refused a start"));
            let retry = match step {
                Step::Fail => self.finish(&id, &worker, Outcome::Failed).await,
                Step::Expire => self.expire(&id, deadline).await,
                Step::Succeed => {
                    assert_eq!(self.finish(&id, &worker, Outcome::Succeeded).await, None);
                    return;
                }
            };
            let Some((next, due)) = retry else {
                return;
            };
            assert_eq!(next, id.next_attempt());
            let staged = self.stage(due, due.max(self.clock)).await;
            assert!(
                staged.iter().any(|f| f.id == next),
                "{next} due at {due} was not adopted: {staged:?}"
            );
            id = next;
        }
    }

    /// Triggers a firing and stages it; `None` when the schedule leaves no
    /// millisecond free to trigger at.
    async fn trigger(&mut self, every_millisecond: bool) -> Option<FiringId> {
        self.advance_to(self.clock + MS);
        let id = match self.store.trigger(JOB, None, self.clock).await {
            Ok(id) => id.expect("the job exists"),
            // Every millisecond is an instant of the job's own: a trigger
            // would collide with one (jobs.rs, `trigger_in`).
            Err(StoreError::Conflict(_)) if every_millisecond => return None,
            Err(e) => panic!("triggering at {}: {e}", self.clock),
        };
        let due = self.clock;
        let staged = self.stage(due, due).await;
        assert!(
            staged.iter().any(|f| f.id == id),
            "{id} triggered at {due} was not adopted: {staged:?}"
        );
        Some(id)
    }
}

async fn lives_through_the_store(kind: DatabaseKind, case: Case) {
    let spec = JobSpec::from_json(&case.spec, &Limits::default()).unwrap_or_else(|e| {
        panic!(
            "the documented ranges allow {}, validation refuses it: {e:?}",
            case.spec
        )
    });
    let db = TestDatabase::create(kind).await;
    let store = Store::connect(&db.url(), StoreOptions::default())
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", db.url()));
    let put_at = from_millis(case.put_at_ms);
    let mut drive = Drive {
        partition: store.partition_of(JOB),
        store,
        clock: put_at,
        slices: 0,
    };

    let job = drive
        .store
        .put_job(&spec, put_at)
        .await
        .unwrap_or_else(|e| panic!("putting at {put_at}: {e}"));
    assert_eq!(job.spec, spec);
    if spec.paused {
        drive.advance_to(put_at + MS);
        drive
            .store
            .set_paused(JOB, chime_scheduler::store::Pause::Resume, drive.clock)
            .await
            .unwrap_or_else(|e| panic!("resuming: {e}"))
            .expect("the job exists");
    }

    // The schedule's first instant, staged on time or misfired.
    let next = drive
        .store
        .get_job(JOB)
        .await
        .unwrap_or_else(|e| panic!("getting: {e}"))
        .expect("the job exists")
        .next_fire_at;
    if let Some(first) = next {
        let late = first + TimeDelta::milliseconds(case.lateness_ms as i64);
        let staged = drive.stage(first, late.max(drive.clock)).await;
        if let Some(firing) = staged.into_iter().next() {
            drive
                .chain(firing.id, &[Step::Fail, Step::Expire, Step::Succeed])
                .await;
        }
    }

    // Triggered firings through every way an attempt ends.
    let every_millisecond = matches!(
        spec.schedule,
        ScheduleSpec::Every { every, .. } if every == std::time::Duration::from_millis(1)
    );
    for steps in [
        &[Step::Fail, Step::Expire, Step::Succeed][..],
        &[Step::Expire, Step::Succeed],
        &[Step::Succeed],
    ] {
        if let Some(id) = drive.trigger(every_millisecond).await {
            drive.chain(id, steps).await;
        }
    }

    drive.advance_to(drive.clock + MS);
    drive
        .store
        .delete_job(JOB, drive.clock)
        .await
        .unwrap_or_else(|e| panic!("deleting at {}: {e}", drive.clock))
        .expect("the job exists");
    drive.store.close().await;
}

/// Runs the property on one backend; each case in a runtime of its own.
fn check(kind: DatabaseKind) {
    let config = ProptestConfig {
        cases: 32,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&case(), |case| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(lives_through_the_store(kind, case));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{kind}: {e}");
    }
}

#[test]
fn accepted_specs_live_through_the_store_on_postgres() {
    check(DatabaseKind::Postgres);
}

#[test]
fn accepted_specs_live_through_the_store_on_sqlite() {
    check(DatabaseKind::Sqlite);
}
