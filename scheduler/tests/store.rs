//! The store's conformance suite: every test is written once and runs on
//! both backends twice, with the one-round-trip fast paths of start and
//! finish (`<test>::postgres`, `<test>::sqlite`) and without them
//! (`<test>::postgres_transaction_path`, `<test>::sqlite_transaction_path`,
//! every item through the transaction path). Whatever a test checks, both
//! backends and both paths must do the same.
//!
//! PostgreSQL: a fresh database `chime_store_<uuid>` per test on the server at
//! `$CHIME_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`),
//! dropped afterwards. SQLite: a file in a temporary directory.

use chime_common::protocol::{
    AlertKind, Finished, Interruption, Outcome, StartRefusal, StartRequest,
};
use chime_common::{FiringId, FiringState, JobSpec, JobState, Limits, RetryPolicy};
use chime_scheduler::store::{
    AckedFiring, Backend, ExecutingRow, FiringFilter, JobFilter, Pause, StageOutcome, StagePace,
    StageRequest, StagedFiring, StartOutcome, Store, StoreError, StoreOptions,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

mod fixture {
    use chime_scheduler::store::{Backend, Store, StoreOptions};
    use sqlx::{Connection, PgConnection};

    const PG_URL_ENV: &str = "CHIME_TEST_PG_URL";
    const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

    /// A fresh, empty database, removed when dropped.
    pub struct TestDb {
        pub backend: Backend,
        pub url: String,
        /// Whether its stores take the fast paths (`StoreOptions::fast_paths`).
        fast_paths: bool,
        pg: Option<(String, String)>,
        _dir: Option<tempfile::TempDir>,
    }

    /// The URL of database `name` on the server of `admin`.
    fn with_database(admin: &str, name: &str) -> String {
        let (base, query) = match admin.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (admin, None),
        };
        let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
        let root = match base[scheme_end..].find('/') {
            Some(slash) => &base[..scheme_end + slash],
            None => base,
        };
        match query {
            Some(q) => format!("{root}/{name}?{q}"),
            None => format!("{root}/{name}"),
        }
    }

    impl TestDb {
        /// A database whose stores take the transaction path for every item.
        pub async fn without_fast_paths(backend: Backend) -> TestDb {
            let mut db = TestDb::create(backend).await;
            db.fast_paths = false;
            db
        }

        pub async fn create(backend: Backend) -> TestDb {
            match backend {
                Backend::Postgres => {
                    let admin =
                        std::env::var(PG_URL_ENV).unwrap_or_else(|_| DEFAULT_PG_URL.to_string());
                    let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                        panic!("cannot reach PostgreSQL at {admin} (set {PG_URL_ENV}): {e}")
                    });
                    let name = format!("chime_store_{}", uuid::Uuid::new_v4().simple());
                    sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
                        .execute(&mut conn)
                        .await
                        .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
                    let _ = conn.close().await;
                    TestDb {
                        backend,
                        url: with_database(&admin, &name),
                        fast_paths: true,
                        pg: Some((admin, name)),
                        _dir: None,
                    }
                }
                Backend::Sqlite => {
                    let dir = tempfile::Builder::new()
                        .prefix("chime-store-")
                        .tempdir()
                        .expect("a temporary directory");
                    let url = format!("sqlite://{}", dir.path().join("chime.db").display());
                    TestDb {
                        backend,
                        url,
                        fast_paths: true,
                        pg: None,
                        _dir: Some(dir),
                    }
                }
            }
        }

        pub async fn store(&self) -> Store {
            self.store_with(StoreOptions::default()).await
        }

        pub async fn store_with(&self, options: StoreOptions) -> Store {
            let options = StoreOptions {
                fast_paths: options.fast_paths && self.fast_paths,
                ..options
            };
            Store::connect(&self.url, options)
                .await
                .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url))
        }

        /// A connection that bypasses the store; `sqlite_mode` is `rw`, or
        /// `rwc` where the database file may not exist yet.
        async fn raw_connection(&self, sqlite_mode: &str) -> sqlx::AnyConnection {
            sqlx::any::install_default_drivers();
            let url = if self.backend == Backend::Sqlite {
                format!("{}?mode={sqlite_mode}", self.url)
            } else {
                self.url.clone()
            };
            sqlx::AnyConnection::connect(&url)
                .await
                .expect("raw connection")
        }

        /// Applies the store's migrations older than `version`: the schema
        /// a store of an earlier release left behind.
        pub async fn migrate_before(&self, version: i64) {
            let mut migrator = match self.backend {
                Backend::Postgres => sqlx::migrate!("./migrations/postgres"),
                Backend::Sqlite => sqlx::migrate!("./migrations/sqlite"),
            };
            let older: Vec<_> = migrator
                .migrations
                .iter()
                .filter(|m| m.version < version)
                .cloned()
                .collect();
            migrator.migrations = older.into();
            let mut conn = self.raw_connection("rwc").await;
            migrator.run(&mut conn).await.expect("older migrations");
            let _ = conn.close().await;
        }

        /// Runs SQL directly, bypassing the store (to plant bad rows).
        pub async fn exec(&self, sql: &str) {
            let mut conn = self.raw_connection("rw").await;
            sqlx::query(sql)
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let _ = conn.close().await;
        }

        /// Runs a query returning one integer.
        pub async fn scalar(&self, sql: &str) -> i64 {
            let mut conn = self.raw_connection("rw").await;
            let n: i64 = sqlx::query_scalar(sql)
                .fetch_one(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let _ = conn.close().await;
            n
        }
    }

    impl Drop for TestDb {
        fn drop(&mut self) {
            let Some((admin, name)) = self.pg.take() else {
                return;
            };
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async {
                    let mut conn = PgConnection::connect(&admin)
                        .await
                        .map_err(|e| e.to_string())?;
                    sqlx::query(&format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))
                        .execute(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                    let _ = conn.close().await;
                    Ok::<(), String>(())
                })
            })
            .join();
            if let Ok(Err(e)) = dropped {
                eprintln!("warning: test database not dropped: {e}");
            }
        }
    }

    #[test]
    fn database_urls_keep_server_and_options() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/postgres?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}

use fixture::TestDb;

#[path = "store/schema.rs"]
mod schema;

#[path = "store/console.rs"]
mod console;
use console::{audit_pages_newest_first, sessions_expire_and_end};
#[path = "store/lateness.rs"]
mod lateness;
use lateness::{
    a_retry_is_late_from_when_it_was_due, a_start_later_than_max_lateness_raises_one_late_alert,
    an_upgrade_keeps_every_max_lateness, calendar_skips_alert_only_when_the_job_asks,
    every_start_path_judges_lateness_and_backfills_count_from_their_backfill,
    max_lateness_added_by_a_replace_is_applied, misfire_skips_raise_one_missed_alert_each,
};
#[path = "store/time_rules.rs"]
mod time_rules;
use time_rules::{
    calendars_round_trip_and_guard_their_jobs,
    excluded_local_dates_are_skipped_naming_the_calendar,
    jittered_and_hashed_jobs_stage_the_instants_computed_anywhere,
};

/// Runs each named test body (`async fn name(db: TestDb)`) on both backends,
/// each with and without its fast paths, then checks the `waiting`
/// table against the firings it indexes.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let db = super::TestDb::create(super::Backend::Postgres).await;
                    super::$name(&db).await;
                    super::assert_waiting_in_step(&db).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres_transaction_path() {
                    let db = super::TestDb::without_fast_paths(super::Backend::Postgres).await;
                    super::$name(&db).await;
                    super::assert_waiting_in_step(&db).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let db = super::TestDb::create(super::Backend::Sqlite).await;
                    super::$name(&db).await;
                    super::assert_waiting_in_step(&db).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite_transaction_path() {
                    let db = super::TestDb::without_fast_paths(super::Backend::Sqlite).await;
                    super::$name(&db).await;
                    super::assert_waiting_in_step(&db).await;
                }
            }
        )*
    };
}

#[path = "store/operations.rs"]
mod operations;

#[path = "store/backfill.rs"]
mod backfill;

#[path = "store/maintenance.rs"]
mod maintenance;

#[path = "store/limits.rs"]
mod limits;

#[path = "store/fan_in.rs"]
mod fan_in;

#[path = "store/shards.rs"]
mod shards;

#[path = "store/immediate.rs"]
mod immediate;

#[path = "store/retention.rs"]
mod retention;

#[path = "store/traces.rs"]
mod traces;

both_backends!(
    a_start_must_ask_for_what_was_staged,
    a_firing_is_published_with_its_payload_as_stored,
    a_start_later_than_max_lateness_raises_one_late_alert,
    an_upgrade_keeps_every_max_lateness,
    max_lateness_added_by_a_replace_is_applied,
    a_retry_is_late_from_when_it_was_due,
    every_start_path_judges_lateness_and_backfills_count_from_their_backfill,
    misfire_skips_raise_one_missed_alert_each,
    calendar_skips_alert_only_when_the_job_asks,
    migrations_are_idempotent,
    a_checkpoint_copies_the_write_ahead_log,
    an_upgrade_keeps_every_job_where_it_was,
    an_upgrade_keeps_every_on_success,
    an_upgrade_keeps_every_waiting_firing_findable,
    an_upgrade_keeps_every_waiting_and_running_firing,
    concurrent_connects_all_succeed,
    put_and_get_round_trip,
    job_groups_name_each_group_once,
    the_database_clock_is_this_machines,
    replace_bumps_version_and_keeps_created_at,
    put_sets_paused_and_completed_states,
    invalid_schedules_are_invalid_arguments,
    list_jobs_pages_newest_first,
    delete_cancels_staged_firings_and_returns_running,
    pause_and_resume_keep_next_fire_at,
    corrupt_rows_are_reported_with_their_id,
    stage_slice_stages_each_due_instant_once,
    each_staging_reads_the_definition_as_stored_then,
    stage_slice_each_hands_over_each_transaction,
    a_paced_staging_spreads_its_transactions,
    a_paced_staging_shares_the_due_jobs_among_its_pauses,
    an_early_claim_stages_only_its_own_slice,
    misfire_skip_records_skipped_instants,
    misfire_fire_once_stages_only_the_last,
    misfire_fire_all_stages_a_bounded_catch_up,
    stage_slice_adopts_retries_and_triggers,
    adoption_is_per_partition,
    at_job_completes_after_its_instant,
    a_job_with_many_instants_is_staged_whole,
    concurrent_slicers_stage_every_instant_exactly_once,
    repartitions_when_the_partition_count_changes,
    trigger_takes_a_free_millisecond,
    concurrent_starts_accept_exactly_one,
    same_worker_start_is_idempotent,
    start_refuses_unknown_finished_cancelled_and_skipped,
    forbid_skips_firing_while_previous_runs,
    queue_holds_one_and_releases_it_on_finish,
    replace_returns_running_firings_to_cancel,
    finish_is_idempotent,
    mixed_batches_decide_each_request_as_if_alone,
    failed_firing_is_retried_after_the_delay,
    exhausted_retries_fail_and_alert,
    timed_out_firings_say_so,
    on_success_triggers_named_jobs,
    on_success_added_by_a_replace_triggers,
    on_success_cycles_are_refused_at_put,
    a_stored_timeout_out_of_range_fails_its_firing_at_start,
    any_output_a_worker_reports_is_stored_clean_and_capped,
    requeue_happens_once_under_concurrency,
    requeue_runs_again_on_the_infrastructure_budget_then_fails,
    an_interrupted_run_runs_again_without_spending_attempts,
    record_published_moves_only_staged_firings,
    unstarted_lists_published_firings_not_started,
    slice_firings_and_overdue_staged,
    counts_by_state_reports_live_firings,
    list_firings_pages_newest_first,
    sessions_expire_and_end,
    audit_pages_newest_first,
    calendars_round_trip_and_guard_their_jobs,
    excluded_local_dates_are_skipped_naming_the_calendar,
    jittered_and_hashed_jobs_stage_the_instants_computed_anywhere,
);

// ---------------------------------------------------------------------------
// Helpers

/// Every firing that waits to start (`staged`, `published`) has exactly one
/// `waiting` row, published exactly when it is, and no other row is there:
/// the searches for staged and published firings read only that table.
async fn assert_waiting_in_step(db: &TestDb) {
    let out_of_step = db
        .scalar(
            "SELECT COUNT(*) FROM firings f FULL JOIN waiting w ON w.firing_id = f.id \
             WHERE CASE WHEN f.state IN ('staged', 'published') THEN 1 ELSE 0 END \
                     <> CASE WHEN w.firing_id IS NULL THEN 0 ELSE 1 END \
                 OR (w.firing_id IS NOT NULL AND (f.id IS NULL \
                     OR CASE WHEN f.state = 'published' THEN 1 ELSE 0 END \
                         <> CASE WHEN w.published_at IS NULL THEN 0 ELSE 1 END \
                     OR f.due_at <> w.due_at OR f.group_name <> w.group_name))",
        )
        .await;
    assert_eq!(out_of_step, 0, "firings and waiting rows out of step");
}

/// 2030-01-01T00:00:00Z plus `seconds`.
fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_893_456_000 + seconds, 0).expect("a valid instant")
}

fn spec(value: Value) -> JobSpec {
    JobSpec::from_json(&value, &Limits::default()).expect("a valid spec")
}

/// A job firing every `every`, with extra spec fields merged in.
fn every(id: &str, every: &str, extra: Value) -> JobSpec {
    let mut v = json!({
        "id": id,
        "schedule": {"every": every},
        "handler": "test",
        "payload": {"job": id},
    });
    if let (Value::Object(base), Value::Object(more)) = (&mut v, extra) {
        base.extend(more);
    }
    spec(v)
}

fn stage(slice: &str, slice_end: DateTime<Utc>, now: DateTime<Utc>) -> StageRequest {
    StageRequest::new(slice, 0, slice_end, now)
}

fn delay(_: &RetryPolicy, attempt: u32) -> Duration {
    Duration::from_secs(10 * u64::from(attempt))
}

fn start_req(id: &FiringId, worker: &str) -> StartRequest {
    StartRequest {
        firing_id: id.clone(),
        worker_id: worker.to_string(),
        group: "default".to_string(),
        handler: None,
        payload_sha256: None,
    }
}

/// Starts `id` as the scheduler does, one request.
async fn start(store: &Store, id: &FiringId, worker: &str, now: DateTime<Utc>) -> StartOutcome {
    let mut decisions = store
        .start(&[start_req(id, worker)], now)
        .await
        .expect("start");
    decisions.pop().expect("one decision")
}

/// A report of a run that lasted until it was reported: the recorded end
/// (the start plus the run time, at most when the report is applied) is
/// the time the test finishes it at.
fn finished(id: &FiringId, worker: &str, outcome: Outcome, error: Option<&str>) -> Finished {
    Finished {
        firing_id: id.clone(),
        worker_id: worker.to_string(),
        outcome,
        error: error.map(str::to_string),
        interrupted: None,
        output: Some("out".to_string()),
        started_at: t(0),
        finished_at: t(365 * 86_400),
    }
}

async fn finish(
    store: &Store,
    id: &FiringId,
    worker: &str,
    outcome: Outcome,
    now: DateTime<Utc>,
) -> chime_scheduler::store::FinishOutcome {
    let mut outcomes = store
        .finish(&[finished(id, worker, outcome, Some("boom"))], now, &delay)
        .await
        .expect("finish");
    outcomes.pop().expect("one outcome")
}

/// Every firing of a job, newest first.
async fn firings_of(store: &Store, job_id: &str) -> Vec<chime_common::Firing> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_firings(&FiringFilter {
                job_id: Some(job_id.to_string()),
                limit: 1000,
                after,
                ..FiringFilter::default()
            })
            .await
            .expect("list firings");
        all.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
}

async fn firing(store: &Store, id: &FiringId) -> chime_common::Firing {
    firings_of(store, &id.job_id)
        .await
        .into_iter()
        .find(|f| &f.id == id)
        .unwrap_or_else(|| panic!("no firing {id}"))
}

/// A staged firing's payload, parsed from its message body.
fn payload_of(firing: &StagedFiring) -> Value {
    serde_json::from_slice(&firing.payload).expect("a JSON payload")
}

async fn staged(store: &Store, id: &FiringId) -> StagedFiring {
    store
        .overdue_staged(t(1_000_000), 10_000)
        .await
        .expect("overdue staged")
        .into_iter()
        .find(|f| &f.id == id)
        .unwrap_or_else(|| panic!("firing {id} is not staged"))
}

/// Puts a job and triggers one firing of it.
async fn put_and_trigger(store: &Store, job: &JobSpec, now: DateTime<Utc>) -> FiringId {
    store.put_job(job, now).await.expect("put");
    store
        .trigger(&job.id, None, now)
        .await
        .expect("trigger")
        .expect("the job exists")
}

/// Triggers `job` at 1 s, starts it and reports its success at 2 s; the
/// jobs that success triggered.
async fn jobs_a_success_triggers(store: &Store, job: &str) -> Vec<String> {
    let id = store
        .trigger(job, None, t(1))
        .await
        .expect("trigger")
        .expect("a firing");
    assert!(start(store, &id, "w", t(1)).await.reply.accepted);
    let done = finish(store, &id, "w", Outcome::Succeeded, t(2)).await;
    done.triggered.into_iter().map(|f| f.job_id).collect()
}

fn count(outcome: &StageOutcome, job_id: &str) -> usize {
    outcome
        .firings
        .iter()
        .filter(|f| f.job_id == job_id)
        .count()
}

// ---------------------------------------------------------------------------
// Migrations and connections

async fn migrations_are_idempotent(db: &TestDb) {
    let store = db.store().await;
    store.ping().await.expect("ping");
    let job = every("a", "1s", json!({}));
    store.put_job(&job, t(0)).await.expect("put");
    store.close().await;
    let again = db.store().await;
    assert_eq!(again.backend(), db.backend);
    assert!(again.get_job("a").await.expect("get").is_some());
}

/// The checkpointer's checkpoint copies SQLite's write-ahead log into the
/// database file from a reader connection (the writer only checkpoints as a
/// backstop); on PostgreSQL, which checkpoints by itself, it does nothing.
async fn a_checkpoint_copies_the_write_ahead_log(db: &TestDb) {
    let store = db.store().await;
    for i in 0..50 {
        let job = every(&format!("j{i}"), "1s", json!({}));
        store.put_job(&job, t(0)).await.expect("put");
    }
    let copied = store.checkpoint().await.expect("checkpoint");
    match db.backend {
        Backend::Postgres => assert_eq!(copied, 0),
        Backend::Sqlite => assert!(copied > 0, "the log's pages are in the file"),
    }
    // The store reads what it wrote, whichever file holds it.
    assert!(store.get_job("j49").await.expect("get").is_some());
}

/// Jobs written before a job's schedule position had a table of its own
/// (`20261123000000_job_schedule`) keep their state and next instant, and
/// the active one is staged.
async fn an_upgrade_keeps_every_job_where_it_was(db: &TestDb) {
    db.migrate_before(20261123000000).await;
    for (id, state, next) in [
        ("due", "active", "1893456001000"),
        ("held", "paused", "1893456001000"),
        ("done", "completed", "NULL"),
    ] {
        let spec_text = serde_json::to_string(&every(id, "1s", json!({})).to_json()).expect("json");
        db.exec(&format!(
            "INSERT INTO jobs (id, group_name, spec, state, next_fire_at, anchor_ms, part, \
                 version, consecutive_failures, created_at, updated_at, overlap) \
             VALUES ('{id}', 'default', '{spec_text}', '{state}', {next}, 1893456000000, 0, 4, 0, \
                 1893456000000, 1893456000000, 'allow')"
        ))
        .await;
    }

    let store = db.store().await;
    let read = |id: &'static str| {
        let store = &store;
        async move { store.get_job(id).await.expect("get").expect("kept") }
    };
    let due = read("due").await;
    assert_eq!(
        (due.state, due.next_fire_at, due.version),
        (JobState::Active, Some(t(1)), 4)
    );
    let held = read("held").await;
    assert_eq!(
        (held.state, held.next_fire_at),
        (JobState::Paused, Some(t(1)))
    );
    let done = read("done").await;
    assert_eq!((done.state, done.next_fire_at), (JobState::Completed, None));

    let outcome = store
        .stage_slice(&stage("s1", t(2), t(0)))
        .await
        .expect("stage");
    let staged: Vec<&str> = outcome.firings.iter().map(|f| f.job_id.as_str()).collect();
    assert_eq!(
        staged,
        ["due"],
        "only the active job fires, once in [1 s, 2 s)"
    );
    assert_eq!(read("due").await.next_fire_at, Some(t(2)));
}

/// Writes `jobs` (anchored at `t(0)`, next due at `next_fire_at`) as a
/// release before the migration under test did: straight to the tables,
/// without the columns that migration adds.
async fn plant_previous_release_jobs(db: &TestDb, jobs: &[JobSpec], next_fire_at: DateTime<Utc>) {
    let anchor = t(0).timestamp_millis();
    let next = next_fire_at.timestamp_millis();
    for job in jobs {
        let id = job.id.as_str();
        let spec_text = serde_json::to_string(&job.to_json()).expect("json");
        db.exec(&format!(
            "INSERT INTO jobs (id, group_name, spec, anchor_ms, version, consecutive_failures, \
                 created_at, updated_at, overlap) \
             VALUES ('{id}', 'default', '{spec_text}', {anchor}, 1, 0, {anchor}, {anchor}, \
                 'allow')"
        ))
        .await;
        db.exec(&format!(
            "INSERT INTO job_schedule (job_id, part, state, next_fire_at) \
             VALUES ('{id}', 0, 'active', {next})"
        ))
        .await;
    }
}

/// A replace by a replica of the previous release, during a rolling
/// upgrade: it writes the spec and bumps the version, and knows nothing of
/// the newer columns.
async fn rewrite_as_previous_release(db: &TestDb, job: &JobSpec) {
    let spec_text = serde_json::to_string(&job.to_json()).expect("json");
    db.exec(&format!(
        "UPDATE jobs SET spec = '{spec_text}', version = version + 1 WHERE id = '{}'",
        job.id
    ))
    .await;
}

/// Jobs written before `jobs.no_on_success_version` (`20261128000000`),
/// and jobs a replica of that release rewrites after it (a rolling
/// upgrade), keep their `on_success`: the one-statement finish, which reads
/// that column instead of the spec, must not take such a job's success for
/// one that triggers nothing.
async fn an_upgrade_keeps_every_on_success(db: &TestDb) {
    db.migrate_before(20261128000000).await;
    let jobs = [
        every("first", "1h", json!({"on_success": ["next"]})),
        every("next", "1h", json!({})),
        every("third", "1h", json!({})),
    ];
    plant_previous_release_jobs(db, &jobs, t(3600)).await;
    let store = db.store().await;
    rewrite_as_previous_release(db, &every("third", "1h", json!({"on_success": ["next"]}))).await;
    for job in ["first", "next", "third"] {
        let triggered = jobs_a_success_triggers(&store, job).await;
        let expected: &[&str] = if job == "next" { &[] } else { &["next"] };
        assert_eq!(triggered, expected, "{job}");
    }
}

/// Firings staged or published before they waited in a table of their own
/// (`20261123120000_waiting`) are still found by the takeover, the safety
/// net, the not-started alert and adoption.
async fn an_upgrade_keeps_every_waiting_firing_findable(db: &TestDb) {
    db.migrate_before(20261123120000).await;
    for (id, at, state, slice, published_at) in [
        ("a@1893456001000#1", 1, "staged", "'s-old'", "NULL"),
        ("a@1893456002000#2", 2, "staged", "NULL", "NULL"),
        (
            "a@1893456003000#1",
            3,
            "published",
            "'s-old'",
            "1893456003000",
        ),
        (
            "a@1893456004000#1",
            4,
            "succeeded",
            "'s-old'",
            "1893456004000",
        ),
    ] {
        let ms = 1893456000000_i64 + at * 1000;
        db.exec(&format!(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, \
                 handler, payload, timeout_ms, due_at, state, slice, part, published_at, \
                 created_at) \
             VALUES ('{id}', 'a', {ms}, 1, 'default', 5, 'h', 'null', 1000, {ms}, '{state}', \
                 {slice}, 0, {published_at}, {ms})"
        ))
        .await;
    }

    let store = db.store().await;
    let ids = |firings: &[StagedFiring]| -> Vec<String> {
        firings.iter().map(|f| f.id.to_string()).collect()
    };
    let owned = store.slice_firings("s-old").await.expect("slice");
    assert_eq!(ids(&owned), ["a@1893456001000#1"]);
    let overdue = store.overdue_staged(t(10), 10).await.expect("overdue");
    assert_eq!(ids(&overdue), ["a@1893456001000#1", "a@1893456002000#2"]);
    let not_started = store
        .published_unstarted(t(10), 10)
        .await
        .expect("unstarted");
    let not_started: Vec<String> = not_started
        .iter()
        .map(|p| p.firing.id.to_string())
        .collect();
    assert_eq!(not_started, ["a@1893456003000#1"]);
    let adopted = store
        .stage_slice(&stage("s-new", t(5), t(0)))
        .await
        .expect("stage");
    assert_eq!(ids(&adopted.firings), ["a@1893456002000#2"]);
}

/// Firings waiting and running when `executing` and `waiting` were rebuilt
/// clustered on their firing id (`20261206000000_clustered_waiting`, a
/// copy on SQLite) are all there after the upgrade: found by the takeover,
/// the not-started alert and the expiry monitor's scan.
async fn an_upgrade_keeps_every_waiting_and_running_firing(db: &TestDb) {
    db.migrate_before(20261206000000).await;
    for (at, state) in [(1, "staged"), (2, "published"), (3, "executing")] {
        let ms = 1893456000000_i64 + at * 1000;
        db.exec(&format!(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, \
                 handler, payload, timeout_ms, due_at, state, published_at, started_at, \
                 created_at) \
             VALUES ('a@{ms}#1', 'a', {ms}, 1, 'default', 5, 'h', 'null', 1000, {ms}, \
                 '{state}', NULL, NULL, {ms})"
        ))
        .await;
    }
    db.exec(
        "INSERT INTO waiting (firing_id, group_name, part, due_at, slice, published_at) VALUES \
             ('a@1893456001000#1', 'default', 0, 1893456001000, 's-old', NULL), \
             ('a@1893456002000#1', 'default', 0, 1893456002000, 's-old', 1893456002000)",
    )
    .await;
    db.exec(
        "INSERT INTO executing (firing_id, job_id, group_name, worker_id, attempt, started_at, \
             deadline_at) \
         VALUES ('a@1893456003000#1', 'a', 'default', 'w-1', 1, 1893456003000, 1893456004000)",
    )
    .await;

    let store = db.store().await;
    let owned = store.slice_firings("s-old").await.expect("slice");
    let owned: Vec<String> = owned.iter().map(|f| f.id.to_string()).collect();
    assert_eq!(owned, ["a@1893456001000#1"]);
    let not_started = store
        .published_unstarted(t(10), 10)
        .await
        .expect("unstarted");
    let not_started: Vec<String> = not_started
        .iter()
        .map(|p| p.firing.id.to_string())
        .collect();
    assert_eq!(not_started, ["a@1893456002000#1"]);
    let running = store.executing(10).await.expect("executing");
    let running: Vec<(String, String, DateTime<Utc>)> = running
        .iter()
        .map(|r| (r.firing_id.to_string(), r.worker_id.clone(), r.deadline_at))
        .collect();
    assert_eq!(
        running,
        [("a@1893456003000#1".to_string(), "w-1".to_string(), t(4))]
    );
}

async fn concurrent_connects_all_succeed(db: &TestDb) {
    let connects = (0..4).map(|_| Store::connect(&db.url, StoreOptions::default()));
    let stores = futures::future::join_all(connects).await;
    for store in &stores {
        let store = store.as_ref().expect("every concurrent connect succeeds");
        store.ping().await.expect("ping");
    }
    // Each migration applied once.
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
    let files = std::fs::read_dir(folder).expect("migrations").count();
    let migrations = db.scalar("SELECT COUNT(*) FROM _sqlx_migrations").await;
    assert_eq!(migrations, i64::try_from(files).expect("a few files"));
}

/// The tables rewritten once per firing are vacuumed by how much they
/// churn: a fixed threshold instead of a fraction of the table (a million
/// idle jobs would put it at 200,000 updates), and `job_schedule` always
/// cleans its indexes (the slicer's due scan walks the dead entries).
#[tokio::test]
async fn busy_tables_are_vacuumed_by_churn_not_size() {
    let db = TestDb::create(Backend::Postgres).await;
    db.store().await;
    let tuned = |table: &str, options: &[&str]| {
        format!(
            "SELECT COUNT(*) FROM pg_class WHERE relname = '{table}' AND reloptions @> ARRAY[{}]",
            options
                .iter()
                .map(|o| format!("'{o}'"))
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    let churn = [
        "autovacuum_vacuum_scale_factor=0",
        "autovacuum_vacuum_threshold=10000",
    ];
    let schedule = [&churn[..], &["vacuum_index_cleanup=on"]].concat();
    assert_eq!(db.scalar(&tuned("job_schedule", &schedule)).await, 1);
    assert_eq!(db.scalar(&tuned("waiting", &churn)).await, 1);
}

#[tokio::test]
async fn in_memory_sqlite_works() {
    let store = Store::connect("sqlite::memory:", StoreOptions::default())
        .await
        .expect("connect");
    assert_eq!(store.backend(), Backend::Sqlite);
    store
        .put_job(&every("a", "1s", json!({})), t(0))
        .await
        .expect("put");
    let outcome = store
        .stage_slice(&stage("s", t(3), t(0)))
        .await
        .expect("stage");
    assert_eq!(outcome.firings.len(), 2);
    assert!(store.get_job("a").await.expect("get").is_some());
}

/// A start's plan is cached per connection on PostgreSQL (`PLANNED_ONCE` in
/// store/mod.rs). A plan made while `firings` was nearly empty must still
/// probe it by key once it holds thousands of rows and has not been analyzed
/// since: a sequential scan there cost 7–10 ms per start batch at scale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_plan_made_on_an_empty_database_probes_by_key() {
    const ROWS: i64 = 20_000;
    let db = TestDb::create(Backend::Postgres).await;
    let store = db.store().await;
    // Nothing may refresh the statistics (which would re-plan) in between.
    db.exec("ALTER TABLE firings SET (autovacuum_enabled = false)")
        .await;
    let job = every("a", "1h", json!({}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let second = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("the job exists");
    assert!(start(&store, &first, "w1", t(1)).await.reply.accepted);
    let updates = "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'firings'";
    wait_for_stat(&db, updates, 1).await;

    db.exec(&format!(
        "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, handler, \
             payload, timeout_ms, due_at, state, created_at) \
         SELECT 'bulk@' || g || '#1', 'bulk', g, 1, 'default', 5, 'noop', 'null', 1000, g, \
             'succeeded', g \
         FROM generate_series(1, {ROWS}) g"
    ))
    .await;
    let read_by_scans = "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'firings'";
    let before = db.scalar(read_by_scans).await;
    assert!(start(&store, &second, "w1", t(2)).await.reply.accepted);
    wait_for_stat(&db, updates, 2).await;
    let scanned = db.scalar(read_by_scans).await - before;
    assert!(
        scanned < ROWS,
        "the second start read {scanned} rows by sequential scan"
    );
}

/// Waits (at most 30 s) until `sql`'s statistic reaches `value`: a backend
/// reports its table statistics when idle, within about 10 s.
async fn wait_for_stat(db: &TestDb, sql: &str, value: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while db.scalar(sql).await < value {
        assert!(
            std::time::Instant::now() < deadline,
            "{sql} did not reach {value}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn unsupported_urls_are_invalid() {
    let err = Store::connect("mysql://localhost/chime", StoreOptions::default())
        .await
        .expect_err("not supported");
    assert!(
        matches!(err, StoreError::Invalid(ref f) if f.field == "database_url"),
        "{err:?}"
    );
}

#[tokio::test]
async fn unreachable_postgres_is_unavailable() {
    // Port 1 on loopback: nothing listens there.
    let err = Store::connect(
        "postgres://postgres@127.0.0.1:1/chime",
        StoreOptions::default(),
    )
    .await
    .expect_err("nothing listens");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let api = chime_common::ApiError::from(err);
    assert_eq!(api.code, chime_common::ErrorCode::Unavailable);
}

// ---------------------------------------------------------------------------
// Jobs

async fn job_groups_name_each_group_once(db: &TestDb) {
    let store = db.store().await;
    assert!(store.job_groups().await.expect("groups").is_empty());
    for (id, group) in [("a", "reports"), ("b", "billing"), ("c", "reports")] {
        store
            .put_job(&every(id, "1m", json!({"group": group})), t(0))
            .await
            .expect("put");
    }
    let groups: Vec<String> = store
        .job_groups()
        .await
        .expect("groups")
        .into_iter()
        .collect();
    assert_eq!(groups, ["billing", "reports"]);
    store.delete_job("b", t(1)).await.expect("delete");
    let groups: Vec<String> = store
        .job_groups()
        .await
        .expect("groups")
        .into_iter()
        .collect();
    assert_eq!(groups, ["reports"]);
}

async fn the_database_clock_is_this_machines(db: &TestDb) {
    let store = db.store().await;
    let offset = store.clock_offset().await.expect("clock offset");
    assert!(
        offset.num_milliseconds().abs() < 1000,
        "the test database runs on this machine: {offset}"
    );
    if db.backend == Backend::Sqlite {
        assert!(offset.is_zero());
    }
}

async fn put_and_get_round_trip(db: &TestDb) {
    let store = db.store().await;
    let job = every("report", "1m", json!({"group": "reports", "priority": 7}));
    let put = store.put_job(&job, t(0)).await.expect("put");
    assert_eq!(put.spec, job);
    assert_eq!(put.state, JobState::Active);
    assert_eq!(put.version, 1);
    assert_eq!(put.next_fire_at, Some(t(60)));
    assert_eq!(put.created_at, t(0));
    assert_eq!(store.get_job("report").await.expect("get"), Some(put));
    assert_eq!(store.get_job("missing").await.expect("get"), None);
}

async fn replace_bumps_version_and_keeps_created_at(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1m", json!({})), t(0))
        .await
        .expect("put");
    let replaced = store
        .put_job(&every("a", "30s", json!({"group": "other"})), t(100))
        .await
        .expect("replace");
    assert_eq!(replaced.version, 2);
    assert_eq!(replaced.created_at, t(0));
    assert_eq!(replaced.updated_at, t(100));
    // Re-anchored at the put.
    assert_eq!(replaced.next_fire_at, Some(t(130)));
    let got = store.get_job("a").await.expect("get").expect("exists");
    assert_eq!(got, replaced);
    assert_eq!(got.spec.group, "other");
}

async fn put_sets_paused_and_completed_states(db: &TestDb) {
    let store = db.store().await;
    let paused = store
        .put_job(&every("p", "1s", json!({"paused": true})), t(0))
        .await
        .expect("put");
    assert_eq!(paused.state, JobState::Paused);
    let past =
        spec(json!({"id": "past", "schedule": {"at": "2029-01-01T00:00:00Z"}, "handler": "h"}));
    let done = store.put_job(&past, t(0)).await.expect("put");
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.next_fire_at, None);
}

async fn invalid_schedules_are_invalid_arguments(db: &TestDb) {
    let store = db.store().await;
    let mut job = every("a", "1s", json!({}));
    // Validation normally refuses this before the store sees it.
    job.schedule = chime_common::schedule::ScheduleSpec::Cron {
        cron: "not a cron".into(),
        tz: "UTC".into(),
    };
    match store.put_job(&job, t(0)).await {
        Err(StoreError::Invalid(field)) => assert_eq!(field.field, "schedule.cron"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    let api = chime_common::ApiError::from(store.put_job(&job, t(0)).await.unwrap_err());
    assert_eq!(api.code, chime_common::ErrorCode::InvalidArgument);
    assert_eq!(store.get_job("a").await.expect("get"), None);
}

async fn list_jobs_pages_newest_first(db: &TestDb) {
    let store = db.store().await;
    for i in 0..5 {
        let group = if i % 2 == 0 { "even" } else { "odd" };
        let job = every(
            &format!("job-{i}"),
            "1m",
            json!({"group": group, "paused": i == 4}),
        );
        store.put_job(&job, t(i)).await.expect("put");
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_jobs(&JobFilter {
                limit: 2,
                after,
                ..JobFilter::default()
            })
            .await
            .expect("list");
        assert!(page.items.len() <= 2);
        seen.extend(page.items.into_iter().map(|j| j.spec.id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ["job-4", "job-3", "job-2", "job-1", "job-0"]);

    let even = store
        .list_jobs(&JobFilter {
            group: Some("even".into()),
            ..JobFilter::default()
        })
        .await
        .expect("list");
    let ids: Vec<_> = even.items.iter().map(|j| j.spec.id.as_str()).collect();
    assert_eq!(ids, ["job-4", "job-2", "job-0"]);
    assert_eq!(even.next, None);

    let paused = store
        .list_jobs(&JobFilter {
            state: Some(JobState::Paused),
            ..JobFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(paused.items.len(), 1);
    assert_eq!(paused.items[0].spec.id, "job-4");

    let bad = store
        .list_jobs(&JobFilter {
            after: Some("garbage".into()),
            ..JobFilter::default()
        })
        .await;
    assert!(
        matches!(bad, Err(StoreError::Invalid(ref f)) if f.field == "after"),
        "{bad:?}"
    );
}

async fn delete_cancels_staged_firings_and_returns_running(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({}));
    let running = put_and_trigger(&store, &job, t(0)).await;
    let waiting = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &running, "w1", t(1)).await.reply.accepted);

    let deleted = store
        .delete_job("a", t(2))
        .await
        .expect("delete")
        .expect("existed");
    assert_eq!(deleted.job.spec.id, "a");
    assert_eq!(deleted.cancel.len(), 1);
    assert_eq!(deleted.cancel[0].firing_id, running);
    assert_eq!(deleted.cancel[0].worker_id, "w1");

    assert_eq!(store.get_job("a").await.expect("get"), None);
    let cancelled = firing(&store, &waiting).await;
    assert_eq!(cancelled.state, FiringState::Cancelled);
    assert_eq!(cancelled.error.as_deref(), Some("job deleted"));
    // The running one stays executing until its worker reports.
    assert_eq!(firing(&store, &running).await.state, FiringState::Executing);
    assert_eq!(store.delete_job("a", t(3)).await.expect("delete"), None);
    let reported = finish(&store, &running, "w1", Outcome::Cancelled, t(4)).await;
    assert!(reported.applied);
    assert_eq!(firing(&store, &running).await.state, FiringState::Cancelled);
}

async fn pause_and_resume_keep_next_fire_at(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({"misfire": "skip"})), t(0))
        .await
        .expect("put");
    let paused = store
        .set_paused("a", Pause::Until(None), t(1))
        .await
        .expect("pause")
        .expect("exists");
    assert_eq!(paused.state, JobState::Paused);
    assert!(paused.spec.paused);
    assert_eq!(paused.version, 2);
    assert_eq!(paused.next_fire_at, Some(t(1)));

    let outcome = store
        .stage_slice(&stage("s1", t(600), t(599)))
        .await
        .expect("stage");
    assert!(outcome.firings.is_empty(), "a paused job is not staged");

    let resumed = store
        .set_paused("a", Pause::Resume, t(600))
        .await
        .expect("resume")
        .expect("exists");
    assert_eq!(resumed.state, JobState::Active);
    assert!(!resumed.spec.paused);
    assert_eq!(resumed.version, 3);
    assert_eq!(resumed.next_fire_at, Some(t(1)));
    assert_eq!(store.get_job("a").await.expect("get"), Some(resumed));

    // What was missed goes through the misfire policy.
    let outcome = store
        .stage_slice(&stage("s2", t(602), t(600)))
        .await
        .expect("stage");
    assert!(outcome.misfired > 0);
    assert_eq!(outcome.skipped, outcome.misfired);
    assert_eq!(
        store
            .set_paused("missing", Pause::Until(None), t(0))
            .await
            .expect("pause"),
        None
    );
}

async fn corrupt_rows_are_reported_with_their_id(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("good", "1s", json!({})), t(0))
        .await
        .expect("put");
    db.exec(
        "INSERT INTO jobs (id, group_name, spec, anchor_ms, version, consecutive_failures, \
             created_at, updated_at) \
         VALUES ('garbage', 'default', '{not json', 1893456000000, 1, 0, 1893456000000, 1893456000000)",
    )
    .await;
    db.exec(
        "INSERT INTO job_schedule (job_id, part, state, next_fire_at) \
         VALUES ('garbage', 0, 'active', 1893456001000)",
    )
    .await;
    let spec_text =
        serde_json::to_string(&every("odd-state", "1s", json!({})).to_json()).expect("json");
    db.exec(&format!(
        "INSERT INTO jobs (id, group_name, spec, anchor_ms, version, consecutive_failures, \
             created_at, updated_at) \
         VALUES ('odd-state', 'default', '{spec_text}', 1893456000000, 1, 0, 1893456000000, 1893456000000)"
    ))
    .await;
    db.exec(
        "INSERT INTO job_schedule (job_id, part, state, next_fire_at) \
         VALUES ('odd-state', 0, 'sleeping', NULL)",
    )
    .await;

    match store.get_job("garbage").await {
        Err(StoreError::Corrupt { id, message }) => {
            assert_eq!(id, "garbage");
            assert!(message.contains("spec"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    match store.get_job("odd-state").await {
        Err(StoreError::Corrupt { id, message }) => {
            assert_eq!(id, "odd-state");
            assert!(message.contains("sleeping"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(
        store.list_jobs(&JobFilter::default()).await,
        Err(StoreError::Corrupt { .. })
    ));
    // A corrupt job does not stop the others from being staged.
    let outcome = store
        .stage_slice(&stage("s", t(3), t(0)))
        .await
        .expect("stage");
    assert_eq!(count(&outcome, "good"), 2);
    assert_eq!(outcome.corrupt.len(), 1);
    assert_eq!(outcome.corrupt[0].0, "garbage");

    // A firing with an unknown state.
    db.exec(
        "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, handler, \
             payload, timeout_ms, due_at, state, created_at) \
         VALUES ('good@1#1', 'good', 1, 1, 'default', 5, 'h', 'null', 1000, 1, 'exploded', 1)",
    )
    .await;
    match store.list_firings(&FiringFilter::default()).await {
        Err(StoreError::Corrupt { id, .. }) => assert_eq!(id, "good@1#1"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Slices

async fn stage_slice_each_hands_over_each_transaction(db: &TestDb) {
    let store = db.store().await;
    for id in ["a", "b", "c"] {
        store
            .put_job(&every(id, "1s", json!({})), t(0))
            .await
            .expect("put");
    }
    let request = StageRequest {
        max_jobs: 2,
        ..stage("s1", t(2), t(0))
    };
    let mut handed: Vec<Vec<FiringId>> = Vec::new();
    let outcome = store
        .stage_slice_each(&request, |firings| {
            handed.push(firings.into_iter().map(|f| f.id).collect())
        })
        .await
        .expect("stage");
    assert!(outcome.firings.is_empty(), "handed over, not returned");
    assert_eq!(outcome.jobs, 3);
    let sizes: Vec<usize> = handed.iter().map(Vec::len).collect();
    assert_eq!(
        sizes,
        [2, 1],
        "one hand-over per transaction of at most 2 jobs"
    );
    let mut ids: Vec<String> = handed.concat().iter().map(|id| id.job_id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
}

/// A paced staging writes `jobs` jobs per transaction and pauses after
/// each while the pause ends before `until`; past it, the rest goes at
/// `max_jobs` at once.
async fn a_paced_staging_spreads_its_transactions(db: &TestDb) {
    let store = db.store().await;
    for i in 0..25 {
        store
            .put_job(&every(&format!("j{i:02}"), "1s", json!({})), t(0))
            .await
            .expect("put");
    }
    let pause = Duration::from_millis(40);
    let paced = StageRequest {
        pace: Some(StagePace {
            jobs: 10,
            pause,
            until: std::time::Instant::now() + Duration::from_secs(60),
        }),
        ..stage("s1", t(2), t(0))
    };
    let began = std::time::Instant::now();
    let sizes = transaction_sizes(&store, &paced).await;
    assert_eq!(sizes, [10, 10, 5], "transactions of 10 jobs");
    assert!(
        began.elapsed() >= 2 * pause,
        "a pause after each of the first two"
    );

    // The same staging whose spread has ended: one transaction.
    let late = StageRequest {
        pace: Some(StagePace {
            jobs: 10,
            pause,
            until: std::time::Instant::now(),
        }),
        ..stage("s2", t(3), t(2))
    };
    let sizes = transaction_sizes(&store, &late).await;
    assert_eq!(sizes, [25], "past the spread, all at once");
}

/// A paced staging of more than twice the jobs that fit its pauses shares
/// them among the pauses, so the whole slice is spread over the time given
/// rather than its first `jobs` jobs per pause and the rest at once; a
/// smaller one keeps `jobs` a transaction.
async fn a_paced_staging_shares_the_due_jobs_among_its_pauses(db: &TestDb) {
    let store = db.store().await;
    for i in 0..60 {
        store
            .put_job(&every(&format!("j{i:02}"), "1s", json!({})), t(0))
            .await
            .expect("put");
    }
    let paced = |jobs, slice, end, now| StageRequest {
        pace: Some(StagePace {
            jobs,
            pause: Duration::from_millis(20),
            until: std::time::Instant::now() + Duration::from_millis(200),
        }),
        ..stage(slice, end, now)
    };
    let sizes = transaction_sizes(&store, &paced(1, "s1", t(2), t(0))).await;
    assert_eq!(sizes.iter().sum::<usize>(), 60, "every job staged once");
    assert!(
        sizes[0] >= 6,
        "60 jobs over at most ten pauses of 1: at least 6 in the first transaction ({sizes:?})"
    );

    let sizes = transaction_sizes(&store, &paced(5, "s2", t(3), t(2))).await;
    assert_eq!(sizes.iter().sum::<usize>(), 60, "every job staged once");
    assert_eq!(
        sizes[0], 5,
        "60 jobs within twice the 45 to 50 that fit nine or ten pauses of 5: the fixed pace ({sizes:?})"
    );
}

/// How many firings each transaction of `req`'s staging handed over.
async fn transaction_sizes(store: &Store, req: &StageRequest) -> Vec<usize> {
    let mut sizes = Vec::new();
    store
        .stage_slice_each(req, |firings| sizes.push(firings.len()))
        .await
        .expect("stage");
    sizes
}

async fn stage_slice_stages_each_due_instant_once(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({"priority": 8})), t(0))
        .await
        .expect("put");

    let first = store
        .stage_slice(&stage("s1", t(5), t(0)))
        .await
        .expect("stage");
    let instants: Vec<_> = first.firings.iter().map(|f| f.scheduled_at).collect();
    assert_eq!(instants, [t(1), t(2), t(3), t(4)]);
    assert_eq!(first.jobs, 1);
    let f = &first.firings[0];
    assert_eq!(f.id, FiringId::new("a", t(1).timestamp_millis(), 1));
    assert_eq!(f.due_at, t(1));
    assert_eq!(f.priority, 8);
    assert_eq!(payload_of(f), json!({"job": "a"}));
    assert_eq!(f.handler, "test");
    assert_eq!(f.timeout, Duration::from_secs(3600));
    assert_eq!(f.publish_seq, 0);
    assert_eq!(
        store
            .get_job("a")
            .await
            .expect("get")
            .expect("job")
            .next_fire_at,
        Some(t(5))
    );

    // The same window again, under another key: nothing new.
    let again = store
        .stage_slice(&stage("s1-other", t(5), t(0)))
        .await
        .expect("stage");
    assert!(again.firings.is_empty());

    let next = store
        .stage_slice(&stage("s2", t(10), t(5)))
        .await
        .expect("stage");
    assert_eq!(next.firings.len(), 5);
    assert_eq!(firings_of(&store, "a").await.len(), 9);
    assert_eq!(store.slice_firings("s1").await.expect("slice").len(), 4);
}

/// Staging keeps each job's parsed definition between slices
/// (`store/spec_cache.rs`); whatever changes the stored definition, each
/// slice still stages what is stored when it runs: a replace, and a write
/// that changes the text alone (neither version nor anchor), as a job
/// deleted and created again under its id can.
async fn each_staging_reads_the_definition_as_stored_then(db: &TestDb) {
    let store = db.store().await;
    let a = |v: i64, priority: u8| {
        every(
            "a",
            "1s",
            json!({"payload": {"v": v}, "priority": priority}),
        )
    };
    // The payload and priority of each firing a slice ending at `end` stages at `now`.
    let staged = |slice: &'static str, end: i64, now: i64| {
        let store = store.clone();
        async move {
            let outcome = store
                .stage_slice(&stage(slice, t(end), t(now)))
                .await
                .expect("stage");
            outcome
                .firings
                .iter()
                .map(|f| (payload_of(f), f.priority))
                .collect::<Vec<(Value, u8)>>()
        }
    };
    store.put_job(&a(1, 3), t(0)).await.expect("put");
    assert_eq!(staged("s1", 3, 0).await, vec![(json!({"v": 1}), 3); 2]);

    store.put_job(&a(2, 7), t(3)).await.expect("replace");
    assert_eq!(staged("s2", 6, 3).await, vec![(json!({"v": 2}), 7); 2]);

    let spec_text = serde_json::to_string(&a(3, 7).to_json()).expect("json");
    db.exec(&format!(
        "UPDATE jobs SET spec = '{spec_text}' WHERE id = 'a'"
    ))
    .await;
    assert_eq!(staged("s3", 9, 6).await, vec![(json!({"v": 3}), 7); 3]);
}

/// A dense slice claimed ahead of the lookahead (`slice_start` set) takes
/// its own instants only: the jobs due in the slices before it stay due.
async fn an_early_claim_stages_only_its_own_slice(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("steady", "1s", json!({})), t(0))
        .await
        .expect("put");
    for i in 0..3 {
        let job = spec(json!({
            "id": format!("burst-{i}"),
            "schedule": {"at": "2030-01-01T00:00:10.500Z"},
            "handler": "test",
        }));
        store.put_job(&job, t(0)).await.expect("put");
    }
    assert!(store
        .due_jobs_reach(0, t(10), t(11), 3)
        .await
        .expect("count"));
    assert!(!store
        .due_jobs_reach(0, t(10), t(11), 4)
        .await
        .expect("count"));
    assert!(!store
        .due_jobs_reach(0, t(11), t(12), 1)
        .await
        .expect("count"));
    assert!(!store
        .due_jobs_reach(1, t(10), t(11), 1)
        .await
        .expect("count"));

    let early = StageRequest {
        slice_start: Some(t(10)),
        ..stage("dense", t(11), t(0))
    };
    let staged = store.stage_slice(&early).await.expect("stage");
    let mut jobs: Vec<_> = staged.firings.iter().map(|f| f.job_id.as_str()).collect();
    jobs.sort_unstable();
    assert_eq!(jobs, ["burst-0", "burst-1", "burst-2"]);
    let steady = store.get_job("steady").await.expect("get").expect("job");
    assert_eq!(steady.next_fire_at, Some(t(1)), "the steady job stays due");

    // The slices in between still stage the steady job, and not the burst again.
    let between = store
        .stage_slice(&stage("s1", t(11), t(0)))
        .await
        .expect("stage");
    assert_eq!(between.firings.len(), 10);
    assert!(between.firings.iter().all(|f| f.job_id == "steady"));
}

/// A 1 s job, put at 0, found 10 minutes later: instants 1..=539 are
/// misfired (threshold 60 s), 540..=600 are on time.
async fn gap(store: &Store, misfire: &str) -> StageOutcome {
    store
        .put_job(&every("a", "1s", json!({"misfire": misfire})), t(0))
        .await
        .expect("put");
    store
        .stage_slice(&stage("s", t(601), t(600)))
        .await
        .expect("stage")
}

async fn states(store: &Store) -> HashMap<FiringState, usize> {
    let mut by_state = HashMap::new();
    for f in firings_of(store, "a").await {
        *by_state.entry(f.state).or_default() += 1;
    }
    by_state
}

async fn misfire_skip_records_skipped_instants(db: &TestDb) {
    let store = db.store().await;
    let outcome = gap(&store, "skip").await;
    assert_eq!(outcome.misfired, 539);
    assert_eq!(outcome.skipped, 539);
    assert_eq!(outcome.firings.len(), 61);
    assert!(outcome.firings.iter().all(|f| f.due_at == f.scheduled_at));
    let by_state = states(&store).await;
    assert_eq!(
        by_state.get(&FiringState::Skipped),
        Some(&100),
        "recording is bounded"
    );
    assert_eq!(by_state.get(&FiringState::Staged), Some(&61));
    let skipped = firing(&store, &FiringId::new("a", t(1).timestamp_millis(), 1)).await;
    assert_eq!(skipped.state, FiringState::Skipped);
    assert!(
        skipped
            .error
            .as_deref()
            .unwrap_or("")
            .starts_with("misfired"),
        "{skipped:?}"
    );
    assert_eq!(
        store
            .get_job("a")
            .await
            .expect("get")
            .expect("job")
            .next_fire_at,
        Some(t(601))
    );
}

async fn misfire_fire_once_stages_only_the_last(db: &TestDb) {
    let store = db.store().await;
    let outcome = gap(&store, "fire_once").await;
    assert_eq!(outcome.misfired, 539);
    assert_eq!(outcome.skipped, 538);
    let catch_up: Vec<_> = outcome
        .firings
        .iter()
        .filter(|f| f.due_at == t(600))
        .collect();
    // The catch-up for 539, and the on-time instant 600 itself.
    assert_eq!(catch_up.len(), 2);
    assert!(catch_up.iter().any(|f| f.scheduled_at == t(539)));
    assert_eq!(outcome.firings.len(), 62);
    assert_eq!(states(&store).await.get(&FiringState::Skipped), Some(&100));
}

async fn misfire_fire_all_stages_a_bounded_catch_up(db: &TestDb) {
    let store = db.store().await;
    let outcome = gap(&store, "fire_all").await;
    let catch_up: Vec<_> = outcome
        .firings
        .iter()
        .filter(|f| f.due_at == t(600) && f.scheduled_at < t(540))
        .map(|f| f.scheduled_at)
        .collect();
    let expected: Vec<_> = (1..=100).map(t).collect();
    assert_eq!(catch_up, expected, "the first max_catch_up, in order");
    assert_eq!(outcome.skipped, 439);
    assert_eq!(outcome.firings.len(), 161);
    assert_eq!(states(&store).await.get(&FiringState::Skipped), Some(&100));
}

async fn stage_slice_adopts_retries_and_triggers(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"retry": {"max_attempts": 2}}));
    let triggered = put_and_trigger(&store, &job, t(0)).await;

    let outcome = store
        .stage_slice(&stage("s1", t(2), t(0)))
        .await
        .expect("stage");
    let ids: Vec<_> = outcome.firings.iter().map(|f| f.id.clone()).collect();
    assert_eq!(ids, std::slice::from_ref(&triggered));
    // Adopted once only.
    let again = store
        .stage_slice(&stage("s2", t(3), t(1)))
        .await
        .expect("stage");
    assert!(again.firings.is_empty());
    assert_eq!(store.slice_firings("s1").await.expect("slice").len(), 1);

    // A failed attempt is retried 10 s later, adopted by the slice covering it.
    assert!(start(&store, &triggered, "w", t(1)).await.reply.accepted);
    let done = finish(&store, &triggered, "w", Outcome::Failed, t(2)).await;
    let (retry, due) = done.retry.expect("a retry");
    assert_eq!(due, t(12));
    let early = store
        .stage_slice(&stage("s3", t(10), t(2)))
        .await
        .expect("stage");
    assert!(early.firings.is_empty());
    let covering = store
        .stage_slice(&stage("s4", t(13), t(11)))
        .await
        .expect("stage");
    assert_eq!(covering.firings.len(), 1);
    assert_eq!(covering.firings[0].id, retry);
    assert_eq!(covering.firings[0].attempt, 2);
}

async fn adoption_is_per_partition(db: &TestDb) {
    let store = db
        .store_with(StoreOptions {
            partitions: 4,
            ..StoreOptions::default()
        })
        .await;
    let mut triggered = Vec::new();
    for i in 0..8 {
        let id = put_and_trigger(&store, &every(&format!("j{i}"), "1h", json!({})), t(0)).await;
        triggered.push(id);
    }
    let mut adopted = HashSet::new();
    for partition in 0..4 {
        let mut req = stage(&format!("s.{partition}"), t(1), t(0));
        req.partition = partition;
        let outcome = store.stage_slice(&req).await.expect("stage");
        for f in outcome.firings {
            assert_eq!(store.partition_of(&f.job_id), partition);
            assert!(adopted.insert(f.id));
        }
    }
    assert_eq!(adopted.len(), 8);
}

async fn at_job_completes_after_its_instant(db: &TestDb) {
    let store = db.store().await;
    let job =
        spec(json!({"id": "once", "schedule": {"at": "2030-01-01T00:00:02Z"}, "handler": "h"}));
    let put = store.put_job(&job, t(0)).await.expect("put");
    assert_eq!(put.next_fire_at, Some(t(2)));
    let outcome = store
        .stage_slice(&stage("s", t(5), t(0)))
        .await
        .expect("stage");
    assert_eq!(outcome.firings.len(), 1);
    assert_eq!(outcome.firings[0].scheduled_at, t(2));
    let job = store.get_job("once").await.expect("get").expect("job");
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(job.next_fire_at, None);
    let later = store
        .stage_slice(&stage("s2", t(100), t(50)))
        .await
        .expect("stage");
    assert!(later.firings.is_empty());
}

async fn a_job_with_many_instants_is_staged_whole(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("fast", "1ms", json!({})), t(0))
        .await
        .expect("put");
    // 14,999 instants: more than one transaction stages per job.
    let outcome = store
        .stage_slice(&stage("s", t(15), t(0)))
        .await
        .expect("stage");
    assert_eq!(outcome.firings.len(), 14_999);
    let job = store.get_job("fast").await.expect("get").expect("job");
    assert_eq!(job.next_fire_at, Some(t(15)));
}

async fn concurrent_slicers_stage_every_instant_exactly_once(db: &TestDb) {
    const JOBS: usize = 200;
    const SLICES: i64 = 20;
    let store = db
        .store_with(StoreOptions {
            max_connections: 8,
            ..StoreOptions::default()
        })
        .await;
    for i in 0..JOBS {
        store
            .put_job(&every(&format!("job-{i:03}"), "1s", json!({})), t(0))
            .await
            .expect("put");
    }
    let mut tasks = Vec::new();
    for task in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut staged = Vec::new();
            for k in 0..SLICES {
                // Tasks 0 and 1 race for the same keys, 2 and 3 use their own.
                let key = if task < 2 {
                    format!("slice.{k}")
                } else {
                    format!("slice.{k}.{task}")
                };
                let mut req = stage(&key, t(k + 1), t(k - 2));
                req.max_jobs = 50;
                let outcome = store.stage_slice(&req).await.expect("stage");
                assert_eq!(outcome.misfired, 0);
                staged.extend(outcome.firings.into_iter().map(|f| f.id));
            }
            staged
        }));
    }
    let mut seen = HashSet::new();
    for task in tasks {
        for id in task.await.expect("task") {
            assert!(seen.insert(id.clone()), "{id} staged twice");
        }
    }
    let mut expected = HashSet::new();
    // Slice k covers [k, k + 1) s; the first instant is at 1 s.
    for i in 0..JOBS {
        for s in 1..SLICES {
            expected.insert(FiringId::new(
                format!("job-{i:03}"),
                t(s).timestamp_millis(),
                1,
            ));
        }
    }
    assert_eq!(seen.len(), expected.len());
    assert!(
        seen == expected,
        "every instant of the window staged exactly once"
    );
    let rows = db.scalar("SELECT COUNT(*) FROM firings").await;
    assert_eq!(rows, (JOBS as i64) * (SLICES - 1));
}

async fn repartitions_when_the_partition_count_changes(db: &TestDb) {
    let store = db.store().await;
    for i in 0..10 {
        store
            .put_job(&every(&format!("j{i}"), "1s", json!({})), t(0))
            .await
            .expect("put");
    }
    store.close().await;
    let store = db
        .store_with(StoreOptions {
            partitions: 3,
            ..StoreOptions::default()
        })
        .await;
    let mut jobs = HashSet::new();
    for partition in 0..3 {
        let mut req = stage(&format!("s.{partition}"), t(2), t(0));
        req.partition = partition;
        for f in store.stage_slice(&req).await.expect("stage").firings {
            assert_eq!(store.partition_of(&f.job_id), partition);
            jobs.insert(f.job_id);
        }
    }
    assert_eq!(jobs.len(), 10, "every job is in one of the new partitions");
}

async fn trigger_takes_a_free_millisecond(db: &TestDb) {
    let store = db
        .store_with(StoreOptions {
            limits: Limits {
                max_payload_bytes: 100,
                ..Limits::default()
            },
            ..StoreOptions::default()
        })
        .await;
    // An `every 1s` job: t(1) is a schedule instant, so a trigger there moves on.
    store
        .put_job(&every("a", "1s", json!({})), t(0))
        .await
        .expect("put");
    let first = store
        .trigger("a", None, t(1))
        .await
        .expect("trigger")
        .expect("job");
    assert_eq!(first.scheduled_ms, t(1).timestamp_millis() + 1);
    let second = store
        .trigger("a", Some(json!({"custom": true})), t(1))
        .await
        .expect("trigger")
        .expect("job");
    assert_eq!(second.scheduled_ms, t(1).timestamp_millis() + 2);
    assert_eq!(
        &staged(&store, &second).await.payload[..],
        br#"{"custom":true}"#
    );
    assert_eq!(&staged(&store, &first).await.payload[..], br#"{"job":"a"}"#);
    assert_eq!(staged(&store, &first).await.due_at, t(1));
    assert_eq!(
        store.trigger("missing", None, t(1)).await.expect("trigger"),
        None
    );
    let big = json!("x".repeat(200));
    assert!(matches!(
        store.trigger("a", Some(big), t(1)).await,
        Err(StoreError::Invalid(ref f)) if f.field == "payload"
    ));
}

// ---------------------------------------------------------------------------
// Lifecycle

async fn concurrent_starts_accept_exactly_one(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1h", json!({})), t(0))
        .await
        .expect("put");
    for round in 0..10 {
        let id = store
            .trigger("a", None, t(round))
            .await
            .expect("trigger")
            .expect("job");
        let (one, two) = tokio::join!(
            {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move { start(&store, &id, "w1", t(100)).await })
            },
            {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move { start(&store, &id, "w2", t(100)).await })
            }
        );
        let replies = [one.expect("task").reply, two.expect("task").reply];
        let accepted = replies.iter().filter(|r| r.accepted).count();
        assert_eq!(accepted, 1, "round {round}: {replies:?}");
        let refused = replies.iter().find(|r| !r.accepted).expect("one refused");
        assert_eq!(refused.refusal, Some(StartRefusal::AlreadyStarted));
    }
}

/// A request as the worker that received the firing's own message (what
/// the publisher sends for it) sends it.
fn as_received(firing: &StagedFiring, worker: &str) -> StartRequest {
    StartRequest {
        handler: Some(firing.handler.clone()),
        payload_sha256: Some(chime_common::protocol::payload_sha256(&firing.payload)),
        group: firing.group.clone(),
        ..start_req(&firing.id, worker)
    }
}

/// A message nobody but the scheduler published (another group, handler or
/// payload) starts nothing, on every path; the real one still starts.
async fn a_start_must_ask_for_what_was_staged(db: &TestDb) {
    let store = db.store().await;
    let a = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    let b = put_and_trigger(&store, &every("b", "1h", json!({})), t(0)).await;
    let (fa, fb) = (staged(&store, &a).await, staged(&store, &b).await);
    let real_a = as_received(&fa, "w1");
    let forged = [
        (
            StartRequest {
                group: "other".into(),
                ..real_a.clone()
            },
            StartRefusal::WrongGroup,
        ),
        (
            StartRequest {
                handler: Some("shell".into()),
                ..real_a.clone()
            },
            StartRefusal::NotAsStaged,
        ),
        (
            StartRequest {
                payload_sha256: Some(chime_common::protocol::payload_sha256(
                    br#"{"argv":["touch","/tmp/pwned"]}"#,
                )),
                ..real_a.clone()
            },
            StartRefusal::NotAsStaged,
        ),
    ];
    for (request, refusal) in &forged {
        // Alone, and in a batch with a real start (the set-based path).
        let alone = store
            .start(std::slice::from_ref(request), t(5))
            .await
            .expect("start");
        assert_eq!(alone[0].reply.refusal, Some(*refusal), "{request:?}");
        let batch = store
            .start(&[request.clone(), as_received(&fb, "w2")], t(6))
            .await
            .expect("start");
        assert_eq!(batch[0].reply.refusal, Some(*refusal), "{request:?}");
        assert!(batch[1].reply.accepted, "the real start in the batch");
        assert_eq!(
            firing(&store, &a).await.state,
            FiringState::Staged,
            "a forged start changes nothing"
        );
    }
    let accepted = store.start(&[real_a], t(7)).await.expect("start");
    assert!(accepted[0].reply.accepted, "the real message still starts");
    // A worker written before digests (no handler, no digest) is not compared on them.
    let c = put_and_trigger(&store, &every("c", "1h", json!({})), t(0)).await;
    assert!(start(&store, &c, "w1", t(8)).await.reply.accepted);
}

/// A staged firing goes out with its stored payload text byte for byte, the
/// text its digest was taken of, even where this release would encode the
/// payload otherwise (a row another release wrote), so its start is
/// accepted. A stored payload that is not JSON is left out, never sent.
async fn a_firing_is_published_with_its_payload_as_stored(db: &TestDb) {
    let store = db.store().await;
    let payload = json!({"payload": {"x": 1}});
    let a = put_and_trigger(&store, &every("a", "1h", payload.clone()), t(0)).await;
    let b = put_and_trigger(&store, &every("b", "1h", payload), t(0)).await;
    let stored = r#"{ "b": 1, "a": [1, 2] }"#;
    db.exec(&format!(
        "UPDATE firings SET payload = '{stored}', payload_sha256 = '{}' WHERE id = '{a}'",
        chime_common::protocol::payload_sha256(stored.as_bytes())
    ))
    .await;
    db.exec(&format!(
        "UPDATE firings SET payload = '{{not json', payload_sha256 = NULL WHERE id = '{b}'"
    ))
    .await;
    let firing = staged(&store, &a).await;
    assert_eq!(&firing.payload[..], stored.as_bytes());
    let started = store
        .start(&[as_received(&firing, "w1")], t(1))
        .await
        .expect("start");
    assert!(started[0].reply.accepted, "{:?}", started[0].reply);
    let overdue = store
        .overdue_staged(t(1_000_000), 10_000)
        .await
        .expect("overdue staged");
    assert!(overdue.iter().all(|f| f.id != b), "{overdue:?}");
}

async fn same_worker_start_is_idempotent(db: &TestDb) {
    let store = db.store().await;
    let id = put_and_trigger(&store, &every("a", "1h", json!({"timeout": "5m"})), t(0)).await;
    let first = start(&store, &id, "w1", t(10)).await;
    assert!(first.reply.accepted);
    assert_eq!(first.reply.deadline, Some(t(310)));
    assert!(first.lateness.is_some(), "a start is measured once");
    let again = start(&store, &id, "w1", t(12)).await;
    assert_eq!(
        again.reply, first.reply,
        "a lost reply is answered the same"
    );
    // Also within the same millisecond, and not measured as a second start.
    let same_instant = start(&store, &id, "w1", t(10)).await;
    assert_eq!(same_instant.reply, first.reply);
    assert!(
        again.lateness.is_none() && same_instant.lateness.is_none(),
        "a repeated start was measured again: {again:?} {same_instant:?}"
    );
    let started = firing(&store, &id).await;
    assert_eq!(started.state, FiringState::Executing);
    assert_eq!(started.worker.as_deref(), Some("w1"));
    assert_eq!(started.started_at, Some(t(10)));
    let rows = store.executing(10).await.expect("executing");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].deadline_at, t(310));
    // A batch answers in order.
    let decisions = store
        .start(&[start_req(&id, "w1"), start_req(&id, "w2")], t(13))
        .await
        .expect("start");
    assert!(decisions[0].reply.accepted);
    assert_eq!(
        decisions[1].reply.refusal,
        Some(StartRefusal::AlreadyStarted)
    );
    // Long after: a delivery of the message again, of an attempt the worker
    // may have run and forgotten. Refused, so it cannot run twice.
    let redelivered = start(&store, &id, "w1", t(40)).await;
    assert_eq!(
        redelivered.reply.refusal,
        Some(StartRefusal::AlreadyStarted),
        "{redelivered:?}"
    );
}

async fn start_refuses_unknown_finished_cancelled_and_skipped(db: &TestDb) {
    let store = db.store().await;
    let unknown = FiringId::new("nope", 1, 1);
    assert_eq!(
        start(&store, &unknown, "w", t(0)).await.reply.refusal,
        Some(StartRefusal::UnknownFiring)
    );

    let done = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    assert!(start(&store, &done, "w", t(1)).await.reply.accepted);
    assert!(
        finish(&store, &done, "w", Outcome::Succeeded, t(2))
            .await
            .applied
    );
    assert_eq!(
        start(&store, &done, "w", t(3)).await.reply.refusal,
        Some(StartRefusal::AlreadyFinished)
    );

    let skipped = put_and_trigger(
        &store,
        &every("f", "1h", json!({"overlap": "forbid"})),
        t(0),
    )
    .await;
    let blocked = store
        .trigger("f", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &skipped, "w", t(1)).await.reply.accepted);
    assert_eq!(
        start(&store, &blocked, "w", t(1)).await.reply.refusal,
        Some(StartRefusal::Skipped)
    );
    assert_eq!(
        start(&store, &blocked, "w2", t(2)).await.reply.refusal,
        Some(StartRefusal::Skipped)
    );

    let cancelled = put_and_trigger(&store, &every("c", "1h", json!({})), t(0)).await;
    store.delete_job("c", t(1)).await.expect("delete");
    assert_eq!(
        start(&store, &cancelled, "w", t(2)).await.reply.refusal,
        Some(StartRefusal::Cancelled)
    );
}

async fn forbid_skips_firing_while_previous_runs(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"overlap": "forbid"}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let second = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &first, "w1", t(1)).await.reply.accepted);
    let refused = start(&store, &second, "w2", t(2)).await;
    assert_eq!(refused.reply.refusal, Some(StartRefusal::Skipped));
    let skipped = firing(&store, &second).await;
    assert_eq!(skipped.state, FiringState::Skipped);
    assert_eq!(
        skipped.error.as_deref(),
        Some("overlap: previous firing still running")
    );
    // Once the first is done, the next one runs.
    finish(&store, &first, "w1", Outcome::Succeeded, t(3)).await;
    let third = store
        .trigger("a", None, t(4))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &third, "w2", t(5)).await.reply.accepted);
}

async fn queue_holds_one_and_releases_it_on_finish(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"overlap": "queue"}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let second = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    let third = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    store
        .record_published(&[first.clone(), second.clone(), third.clone()], t(0))
        .await
        .expect("publish");

    assert!(start(&store, &first, "w1", t(1)).await.reply.accepted);
    assert_eq!(
        start(&store, &second, "w2", t(2)).await.reply.refusal,
        Some(StartRefusal::Queued)
    );
    assert_eq!(
        start(&store, &second, "w2", t(2)).await.reply.refusal,
        Some(StartRefusal::Queued)
    );
    assert_eq!(
        start(&store, &third, "w3", t(2)).await.reply.refusal,
        Some(StartRefusal::Skipped)
    );
    assert_eq!(firing(&store, &second).await.state, FiringState::Published);
    // Waiting on purpose is not "not started".
    assert!(store
        .published_unstarted(t(100), 10)
        .await
        .expect("unstarted")
        .is_empty());

    let done = finish(&store, &first, "w1", Outcome::Succeeded, t(5)).await;
    assert_eq!(done.released, vec![second.clone()]);
    let released = staged(&store, &second).await;
    assert_eq!(released.publish_seq, 1);
    assert_eq!(released.due_at, t(5));
    let outcome = store
        .stage_slice(&stage("s", t(6), t(5)))
        .await
        .expect("stage");
    assert_eq!(outcome.firings.len(), 1);
    assert_eq!(outcome.firings[0].id, second);
    assert_eq!(outcome.firings[0].publish_seq, 1);
    assert!(start(&store, &second, "w2", t(6)).await.reply.accepted);
}

async fn replace_returns_running_firings_to_cancel(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"overlap": "replace"}));
    let first = put_and_trigger(&store, &job, t(0)).await;
    let second = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &first, "w1", t(1)).await.cancel.is_empty());
    let decision = start(&store, &second, "w2", t(2)).await;
    assert!(decision.reply.accepted);
    assert_eq!(decision.cancel.len(), 1);
    assert_eq!(decision.cancel[0].firing_id, first);
    assert_eq!(decision.cancel[0].worker_id, "w1");
}

async fn finish_is_idempotent(db: &TestDb) {
    let store = db.store().await;
    let id = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    assert!(start(&store, &id, "w1", t(1)).await.reply.accepted);
    let stranger = finish(&store, &id, "w2", Outcome::Succeeded, t(2)).await;
    assert!(!stranger.applied, "another worker's report changes nothing");
    let first = finish(&store, &id, "w1", Outcome::Succeeded, t(2)).await;
    assert!(first.applied);
    assert_eq!(first.state, Some(FiringState::Succeeded));
    let again = finish(&store, &id, "w1", Outcome::Failed, t(3)).await;
    assert!(!again.applied);
    assert_eq!(again.state, Some(FiringState::Succeeded));
    assert!(again.retry.is_none() && again.alerts.is_empty());
    let done = firing(&store, &id).await;
    assert_eq!(done.state, FiringState::Succeeded);
    assert_eq!(done.finished_at, Some(t(2)));
    assert_eq!(done.output.as_deref(), Some("out"));
    assert!(store.executing(10).await.expect("executing").is_empty());
    let unknown = finish(
        &store,
        &FiringId::new("zz", 1, 1),
        "w1",
        Outcome::Succeeded,
        t(3),
    )
    .await;
    assert!(!unknown.applied);
    assert_eq!(unknown.state, None);
}

/// Batches mix plain requests (one statement per table for all of them)
/// with ones that need a policy decision or repeat a firing; each gets the
/// answer it would get alone.
async fn mixed_batches_decide_each_request_as_if_alone(db: &TestDb) {
    let store = db.store().await;
    let plain = put_and_trigger(&store, &every("p", "1h", json!({"timeout": "1m"})), t(0)).await;
    let other_plain = store
        .trigger("p", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    let twice = put_and_trigger(&store, &every("d", "1h", json!({})), t(0)).await;
    let forbid = every("f", "1h", json!({"overlap": "forbid"}));
    let running = put_and_trigger(&store, &forbid, t(0)).await;
    let blocked = store
        .trigger("f", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    let retried = put_and_trigger(
        &store,
        &every("r", "1h", json!({"retry": {"max_attempts": 2}})),
        t(0),
    )
    .await;
    assert!(start(&store, &running, "w0", t(1)).await.reply.accepted);

    let unknown = FiringId::new("nope", 1, 1);
    let decisions = store
        .start(
            &[
                start_req(&plain, "w1"),
                start_req(&twice, "w1"),
                start_req(&blocked, "w2"),
                start_req(&twice, "w2"),
                start_req(&unknown, "w1"),
                start_req(&other_plain, "w2"),
                start_req(&retried, "w3"),
            ],
            t(2),
        )
        .await
        .expect("start");
    let refusals: Vec<_> = decisions.iter().map(|d| d.reply.refusal).collect();
    assert_eq!(
        refusals,
        [
            None,
            None,
            Some(StartRefusal::Skipped),
            Some(StartRefusal::AlreadyStarted),
            Some(StartRefusal::UnknownFiring),
            None,
            None,
        ]
    );
    assert_eq!(decisions[0].reply.deadline, Some(t(62)));
    let started = firing(&store, &plain).await;
    assert_eq!(started.state, FiringState::Executing);
    assert_eq!(started.worker.as_deref(), Some("w1"));
    assert_eq!(started.started_at, Some(t(2)));
    assert_eq!(firing(&store, &twice).await.worker.as_deref(), Some("w1"));
    assert_eq!(firing(&store, &blocked).await.state, FiringState::Skipped);
    let executing = store.executing(100).await.expect("executing");
    let mut running_on: Vec<_> = executing
        .iter()
        .map(|e| (e.firing_id.job_id.clone(), e.worker_id.clone(), e.attempt))
        .collect();
    running_on.sort();
    assert_eq!(
        running_on,
        [
            ("d".to_string(), "w1".to_string(), 1),
            ("f".to_string(), "w0".to_string(), 1),
            ("p".to_string(), "w1".to_string(), 1),
            ("p".to_string(), "w2".to_string(), 1),
            ("r".to_string(), "w3".to_string(), 1),
        ]
    );

    let outcomes = store
        .finish(
            &[
                finished(&plain, "w1", Outcome::Succeeded, None),
                finished(&other_plain, "w1", Outcome::Succeeded, None),
                finished(&retried, "w3", Outcome::Failed, Some("boom")),
                finished(&twice, "w1", Outcome::Succeeded, None),
                finished(&twice, "w1", Outcome::Succeeded, None),
            ],
            t(3),
            &delay,
        )
        .await
        .expect("finish");
    let applied: Vec<_> = outcomes.iter().map(|o| (o.applied, o.state)).collect();
    assert_eq!(
        applied,
        [
            (true, Some(FiringState::Succeeded)),
            (false, Some(FiringState::Executing)),
            (true, Some(FiringState::Failed)),
            (true, Some(FiringState::Succeeded)),
            (false, Some(FiringState::Succeeded)),
        ]
    );
    assert_eq!(outcomes[2].retry, Some((retried.next_attempt(), t(13))));
    let done = firing(&store, &plain).await;
    assert_eq!(done.finished_at, Some(t(3)));
    assert_eq!(done.output.as_deref(), Some("out"));
    assert_eq!(done.error, None);
    assert_eq!(
        firing(&store, &other_plain).await.state,
        FiringState::Executing,
        "another worker's report changes nothing"
    );
    let mut left: Vec<_> = store
        .executing(100)
        .await
        .expect("executing")
        .into_iter()
        .map(|e| e.firing_id)
        .collect();
    left.sort();
    assert_eq!(left, [running.clone(), other_plain.clone()]);
}

async fn failed_firing_is_retried_after_the_delay(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "a",
        "1h",
        json!({"retry": {"max_attempts": 3}, "priority": 9}),
    );
    let id = store
        .trigger("a", Some(json!({"p": 1})), t(0))
        .await
        .expect("trigger");
    assert_eq!(id, None);
    store.put_job(&job, t(0)).await.expect("put");
    let id = store
        .trigger("a", Some(json!({"p": 1})), t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    let done = finish(&store, &id, "w", Outcome::Failed, t(2)).await;
    assert_eq!(done.state, Some(FiringState::Failed));
    assert!(done.alerts.is_empty(), "attempts remain");
    let (retry, due) = done.retry.expect("retry");
    assert_eq!(retry, id.next_attempt());
    assert_eq!(due, t(12));
    let failed = firing(&store, &id).await;
    assert_eq!(failed.error.as_deref(), Some("boom"));
    let next = staged(&store, &retry).await;
    assert_eq!(next.attempt, 2);
    assert_eq!(next.scheduled_at, failed.scheduled_at);
    assert_eq!(payload_of(&next), json!({"p": 1}));
    assert_eq!(next.priority, 9);
    assert_eq!(next.due_at, t(12));
    // The second failure waits longer (delay(policy, 2) = 20 s).
    assert!(start(&store, &retry, "w", t(13)).await.reply.accepted);
    let done = finish(&store, &retry, "w", Outcome::Failed, t(14)).await;
    assert_eq!(done.retry.expect("retry").1, t(34));
}

async fn exhausted_retries_fail_and_alert(db: &TestDb) {
    let store = db.store().await;
    let job = every(
        "a",
        "1h",
        json!({"alert_after_failures": 2, "pause_after_alert": true}),
    );
    store.put_job(&job, t(0)).await.expect("put");
    let mut alerts = Vec::new();
    for round in 0..2 {
        let id = store
            .trigger("a", None, t(round))
            .await
            .expect("trigger")
            .expect("job");
        assert!(start(&store, &id, "w", t(10)).await.reply.accepted);
        let done = finish(&store, &id, "w", Outcome::Failed, t(11)).await;
        assert_eq!(done.state, Some(FiringState::Failed));
        assert!(done.retry.is_none());
        alerts.push(done.alerts);
    }
    assert_eq!(alerts[0].len(), 1);
    assert_eq!(alerts[0][0].kind, AlertKind::FiringFailed);
    assert_eq!(alerts[1].len(), 2);
    let repeated = &alerts[1][1];
    assert_eq!(repeated.kind, AlertKind::RepeatedFailures);
    assert_eq!(repeated.consecutive_failures, Some(2));
    assert!(repeated.paused);
    let job = store.get_job("a").await.expect("get").expect("job");
    assert_eq!(job.state, JobState::Paused);
    assert!(job.spec.paused);

    // A success resets the count.
    store
        .set_paused("a", Pause::Resume, t(20))
        .await
        .expect("resume");
    let ok = store
        .trigger("a", None, t(21))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &ok, "w", t(21)).await.reply.accepted);
    finish(&store, &ok, "w", Outcome::Succeeded, t(22)).await;
    let failing = store
        .trigger("a", None, t(23))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &failing, "w", t(23)).await.reply.accepted);
    let done = finish(&store, &failing, "w", Outcome::Failed, t(24)).await;
    assert_eq!(
        done.alerts.len(),
        1,
        "one failure after a success is not repeated"
    );
}

async fn timed_out_firings_say_so(db: &TestDb) {
    let store = db.store().await;
    // The errors the reference worker sends with `timed_out`, and none.
    let cases = [
        (None, "timed out"),
        (
            Some("timed out: the deadline 2030-01-01T00:00:02.000Z passed after 1.000s"),
            "timed out: the deadline 2030-01-01T00:00:02.000Z passed after 1.000s",
        ),
        (
            Some("the deadline 2030-01-01T00:00:02.000Z passed before the run started"),
            "timed out: the deadline 2030-01-01T00:00:02.000Z passed before the run started",
        ),
    ];
    for (i, (sent, recorded)) in cases.into_iter().enumerate() {
        let job = format!("a{i}");
        let id = put_and_trigger(&store, &every(&job, "1h", json!({})), t(0)).await;
        assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
        let done = store
            .finish(&[finished(&id, "w", Outcome::TimedOut, sent)], t(2), &delay)
            .await
            .expect("finish");
        assert_eq!(done[0].state, Some(FiringState::Failed));
        let row = firing(&store, &id).await;
        assert_eq!(row.error.as_deref(), Some(recorded), "{row:?}");
    }
}

async fn on_success_triggers_named_jobs(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("next", "1h", json!({})), t(0))
        .await
        .expect("put");
    let first = every("first", "1h", json!({"on_success": ["next", "absent"]}));
    let id = put_and_trigger(&store, &first, t(0)).await;
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    let done = finish(&store, &id, "w", Outcome::Succeeded, t(2)).await;
    assert_eq!(
        done.triggered,
        [FiringId::new("next", t(2).timestamp_millis(), 1)]
    );
    let next = staged(&store, &done.triggered[0]).await;
    assert_eq!(next.due_at, t(2));
    // Not on failure.
    let id = store
        .trigger("first", None, t(3))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &id, "w", t(3)).await.reply.accepted);
    assert!(finish(&store, &id, "w", Outcome::Failed, t(4))
        .await
        .triggered
        .is_empty());
}

/// A replace that adds `on_success` (unconditional, and on a version) is
/// what the next success follows, on the fast path as on the other.
async fn on_success_added_by_a_replace_triggers(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("next", "1h", json!({})), t(0))
        .await
        .expect("put");
    for (job, conditional) in [
        ("plain-then-unconditional", false),
        ("plain-then-versioned", true),
    ] {
        let written = store
            .put_job(&every(job, "1h", json!({})), t(0))
            .await
            .expect("put");
        let with_trigger = every(job, "1h", json!({"on_success": ["next"]}));
        if conditional {
            store
                .put_job_if(&with_trigger, Some(written.version), t(0))
                .await
                .expect("put on the version");
        } else {
            store.put_job(&with_trigger, t(0)).await.expect("replace");
        }
        let triggered = jobs_a_success_triggers(&store, job).await;
        assert_eq!(triggered, ["next"], "{job}");
    }
}

async fn on_success_cycles_are_refused_at_put(db: &TestDb) {
    let store = db.store().await;
    let put = |id: &str, on_success: Value| every(id, "1h", json!({ "on_success": on_success }));
    store
        .put_job(&put("a", json!(["b"])), t(0))
        .await
        .expect("a");
    store
        .put_job(&put("b", json!(["c"])), t(0))
        .await
        .expect("b");
    // c -> a closes a -> b -> c -> a.
    let refused = store.put_job(&put("c", json!(["x", "a"])), t(0)).await;
    match refused {
        Err(StoreError::Invalid(e)) => {
            assert_eq!(e.field, "on_success");
            assert!(e.message.contains("c → a → b → c"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        store.get_job("c").await.expect("get").is_none(),
        "nothing stored"
    );
    // A diamond is not a cycle; a job named by two others is fine.
    store
        .put_job(&put("c", json!(["d"])), t(0))
        .await
        .expect("c");
    store
        .put_job(&put("x", json!(["c", "b"])), t(0))
        .await
        .expect("x");
    // Replacing a job checks its new list, not its stored one.
    store
        .put_job(&put("b", json!([])), t(0))
        .await
        .expect("b again");
    store
        .put_job(&put("c", json!(["a"])), t(0))
        .await
        .expect("c -> a");
}

async fn a_stored_timeout_out_of_range_fails_its_firing_at_start(db: &TestDb) {
    let store = db.store().await;
    let ok = put_and_trigger(&store, &every("ok", "1h", json!({})), t(0)).await;
    let bad = put_and_trigger(&store, &every("bad", "1h", json!({})), t(0)).await;
    // A row written before validation bounded timeouts: 2^62 ms.
    db.exec(&format!(
        "UPDATE firings SET timeout_ms = 4611686018427387904 WHERE id = '{bad}'"
    ))
    .await;
    let decisions = store
        .start(&[start_req(&bad, "w"), start_req(&ok, "w")], t(1))
        .await
        .expect("one bad firing does not fail the batch");
    assert_eq!(
        decisions[0].reply.refusal,
        Some(StartRefusal::AlreadyFinished)
    );
    assert_eq!(decisions[0].alerts.len(), 1);
    assert_eq!(decisions[0].alerts[0].kind, AlertKind::FiringFailed);
    assert!(decisions[1].reply.accepted);
    assert!(decisions[1].alerts.is_empty());
    let row = firing(&store, &bad).await;
    assert_eq!(row.state, FiringState::Failed);
    assert!(
        row.error
            .as_deref()
            .unwrap_or("")
            .contains("outside the accepted range"),
        "{row:?}"
    );
}

async fn any_output_a_worker_reports_is_stored_clean_and_capped(db: &TestDb) {
    let store = db.store().await;
    let ok = put_and_trigger(&store, &every("ok", "1h", json!({})), t(0)).await;
    let failed = put_and_trigger(&store, &every("failed", "1h", json!({})), t(0)).await;
    assert!(start(&store, &ok, "w", t(1)).await.reply.accepted);
    assert!(start(&store, &failed, "w", t(1)).await.reply.accepted);
    let huge = format!("{}\0end", "x".repeat(100 * 1024));
    let mut success = finished(&ok, "w", Outcome::Succeeded, None);
    success.output = Some("a\0b".to_string());
    let mut failure = finished(&failed, "w", Outcome::Failed, Some(&huge));
    failure.output = Some(huge.clone());
    let done = store
        .finish(&[success, failure], t(2), &delay)
        .await
        .expect("finish");
    assert!(done.iter().all(|d| d.applied), "{done:?}");
    let row = firing(&store, &ok).await;
    assert_eq!(row.state, FiringState::Succeeded);
    assert_eq!(row.output.as_deref(), Some("a\u{fffd}b"));
    let row = firing(&store, &failed).await;
    assert_eq!(row.state, FiringState::Failed);
    let output = row.output.expect("output kept");
    assert!(
        output.len() <= 64 * 1024 && output.ends_with("x\u{fffd}end"),
        "{}",
        output.len()
    );
    let error = row.error.expect("error kept");
    assert!(
        error.len() <= 8 * 1024 && error.starts_with("xxx"),
        "{}",
        error.len()
    );
}

async fn requeue_happens_once_under_concurrency(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({"retry": {"max_attempts": 2}}));
    let id = put_and_trigger(&store, &job, t(0)).await;
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    let rows = store.executing(10).await.expect("executing");
    assert_eq!(rows.len(), 1);
    let row: ExecutingRow = rows[0].clone();
    assert_eq!(row.firing_id, id);
    assert_eq!(row.worker_id, "w");
    let (one, two) = tokio::join!(
        {
            let store = store.clone();
            let row = row.clone();
            tokio::spawn(async move { store.requeue(&row, "worker gone", t(50), &delay).await })
        },
        {
            let store = store.clone();
            let row = row.clone();
            tokio::spawn(async move { store.requeue(&row, "worker gone", t(50), &delay).await })
        }
    );
    let outcomes = [
        one.expect("task").expect("requeue"),
        two.expect("task").expect("requeue"),
    ];
    let done: Vec<_> = outcomes.iter().flatten().collect();
    assert_eq!(done.len(), 1, "requeued exactly once: {outcomes:?}");
    assert_eq!(done[0].lost, id);
    assert_eq!(done[0].retry, Some((id.next_attempt(), t(60))));
    assert!(done[0].alert.is_none());
    let lost = firing(&store, &id).await;
    assert_eq!(lost.state, FiringState::Lost);
    assert_eq!(lost.error.as_deref(), Some("worker gone"));
    // A late finish from the vanished worker changes nothing.
    assert!(
        !finish(&store, &id, "w", Outcome::Succeeded, t(51))
            .await
            .applied
    );
}

async fn requeue_runs_again_on_the_infrastructure_budget_then_fails(db: &TestDb) {
    let store = db
        .store_with(StoreOptions {
            infra_retries: 1,
            ..StoreOptions::default()
        })
        .await;
    // One attempt (the default): a lost worker must not spend it.
    let job = every("a", "1h", json!({"overlap": "queue"}));
    let id = put_and_trigger(&store, &job, t(0)).await;
    let queued = store
        .trigger("a", None, t(0))
        .await
        .expect("trigger")
        .expect("job");
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    assert_eq!(
        start(&store, &queued, "w2", t(1)).await.reply.refusal,
        Some(StartRefusal::Queued)
    );
    let row = store.executing(10).await.expect("executing").remove(0);
    let stale = ExecutingRow {
        worker_id: "other".into(),
        ..row.clone()
    };
    assert_eq!(
        store
            .requeue(&stale, "gone", t(5), &delay)
            .await
            .expect("requeue"),
        None
    );
    let outcome = store
        .requeue(&row, "worker w vanished", t(5), &delay)
        .await
        .expect("requeue")
        .expect("once");
    let next = id.next_attempt();
    assert_eq!(outcome.retry, Some((next.clone(), t(15))), "run again");
    assert_eq!((outcome.alert, outcome.exhausted), (None, false));
    assert_eq!(outcome.released, vec![queued.clone()]);
    assert_eq!(staged(&store, &queued).await.publish_seq, 1);
    assert_eq!(firing(&store, &id).await.state, FiringState::Lost);

    // The budget (one) is spent: the next loss ends the instant, failed.
    let id = put_and_trigger(&store, &every("b", "1h", json!({})), t(0)).await;
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    let row = store
        .executing(10)
        .await
        .expect("executing")
        .into_iter()
        .find(|row| row.firing_id == id)
        .expect("it runs");
    let next = id.next_attempt();
    let outcome = store
        .requeue(&row, "worker w vanished", t(5), &delay)
        .await
        .expect("requeue")
        .expect("once");
    assert_eq!(outcome.retry, Some((next.clone(), t(15))));
    assert!(start(&store, &next, "w", t(20)).await.reply.accepted);
    let row = store
        .executing(10)
        .await
        .expect("executing")
        .into_iter()
        .find(|row| row.firing_id == next)
        .expect("the retry runs");
    let outcome = store
        .requeue(&row, "worker w vanished", t(25), &delay)
        .await
        .expect("requeue")
        .expect("once");
    assert_eq!((outcome.retry, outcome.exhausted), (None, true));
    let alert = outcome.alert.expect("an alert when the budget is spent");
    assert_eq!(alert.kind, AlertKind::FiringFailed);
    assert_eq!(alert.firing_id, Some(next.clone()));
    let ended = firing(&store, &next).await;
    assert_eq!(ended.state, FiringState::Failed);
    assert!(
        ended
            .error
            .as_deref()
            .unwrap_or("")
            .contains("--infra-retries"),
        "{ended:?}"
    );
}

async fn an_interrupted_run_runs_again_without_spending_attempts(db: &TestDb) {
    let store = db.store().await;
    let job = every("a", "1h", json!({}));
    let mut id = put_and_trigger(&store, &job, t(0)).await;
    assert!(start(&store, &id, "w", t(1)).await.reply.accepted);
    for (interrupted, outcome) in [
        (Interruption::Fenced, Outcome::Failed),
        // A run cut by a shutdown's drain is never `cancelled`.
        (Interruption::Shutdown, Outcome::Cancelled),
    ] {
        let event = Finished {
            interrupted: Some(interrupted),
            ..finished(&id, "w", outcome, Some("stopped"))
        };
        let done = store
            .finish(&[event], t(2), &delay)
            .await
            .expect("finish")
            .pop()
            .expect("one outcome");
        assert!(done.applied);
        assert_eq!(done.state, Some(FiringState::Failed));
        assert_eq!(done.interrupted, Some(interrupted));
        let next = id.next_attempt();
        assert_eq!(done.retry.as_ref().map(|r| &r.0), Some(&next), "run again");
        assert!(done.alerts.is_empty(), "{:?}", done.alerts);
        assert!(start(&store, &next, "w", t(3)).await.reply.accepted);
        id = next;
    }
    // The job's own failure spends its one attempt.
    let done = finish(&store, &id, "w", Outcome::Failed, t(4)).await;
    assert_eq!(done.retry, None);
    assert_eq!(done.alerts[0].kind, AlertKind::FiringFailed);
}

async fn record_published_moves_only_staged_firings(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({})), t(0))
        .await
        .expect("put");
    let outcome = store
        .stage_slice(&stage("s", t(4), t(0)))
        .await
        .expect("stage");
    let ids: Vec<_> = outcome.firings.iter().map(|f| f.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    assert!(start(&store, &ids[0], "w", t(1)).await.reply.accepted);
    let changed = store.record_published(&ids, t(1)).await.expect("publish");
    assert_eq!(changed, 2, "the started one stays executing");
    assert_eq!(
        store.record_published(&ids, t(2)).await.expect("publish"),
        0
    );
    assert_eq!(firing(&store, &ids[1]).await.published_at, Some(t(1)));
    assert_eq!(firing(&store, &ids[0]).await.state, FiringState::Executing);
    assert!(store.slice_firings("s").await.expect("slice").is_empty());
    assert_eq!(store.record_published(&[], t(2)).await.expect("publish"), 0);
}

async fn unstarted_lists_published_firings_not_started(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({})), t(0))
        .await
        .expect("put");
    let outcome = store
        .stage_slice(&stage("s", t(4), t(0)))
        .await
        .expect("stage");
    let ids: Vec<_> = outcome.firings.iter().map(|f| f.id.clone()).collect();
    store
        .record_published(&ids[..1], t(1))
        .await
        .expect("publish");
    let acked: Vec<AckedFiring> = ids[1..]
        .iter()
        .zip(42..)
        .map(|(id, stream_seq)| AckedFiring {
            id: id.clone(),
            stream_seq,
        })
        .collect();
    store.record_acked(&acked, t(3)).await.expect("publish");
    let old = store
        .published_unstarted(t(2), 10)
        .await
        .expect("unstarted");
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].firing.id, ids[0]);
    assert_eq!(old[0].stream_seq, None, "no sequence was recorded");
    assert_eq!(old[0].republishes, 0);
    let all = store
        .published_unstarted(t(10), 2)
        .await
        .expect("unstarted");
    assert_eq!(all.len(), 2);
    // Each mark keeps the stream sequence its ack named.
    assert_eq!(all[1].firing.id, ids[1]);
    assert_eq!(all[1].stream_seq, Some(42));
    // A later read goes on after the last one judged.
    let cursor = (all[0].published_at, all[0].firing.id.clone());
    let rest = store
        .published_unstarted_after(t(10), Some(&cursor), 10)
        .await
        .expect("unstarted");
    let rest: Vec<FiringId> = rest.into_iter().map(|p| p.firing.id).collect();
    assert_eq!(rest, ids[1..].to_vec());
    // A copy published again: one more republish, its own sequence, and
    // the bound starts over from its publish.
    assert!(store
        .record_republished(&ids[1], 77, t(20))
        .await
        .expect("republished"));
    let again = store
        .published_unstarted(t(30), 10)
        .await
        .expect("unstarted");
    let copy = again
        .iter()
        .find(|p| p.firing.id == ids[1])
        .expect("still waiting");
    assert_eq!((copy.stream_seq, copy.republishes), (Some(77), 1));
    assert!(store
        .published_unstarted(t(10), 10)
        .await
        .expect("unstarted")
        .iter()
        .all(|p| p.firing.id != ids[1]));
    // Failing it ends it, once.
    let alert = store
        .fail_unstarted_published(&ids[1], "never started", t(31))
        .await
        .expect("failed")
        .expect("an alert");
    assert_eq!(alert.kind, chime_common::protocol::AlertKind::FiringFailed);
    assert_eq!(firing(&store, &ids[1]).await.state, FiringState::Failed);
    assert!(store
        .fail_unstarted_published(&ids[1], "never started", t(32))
        .await
        .expect("no longer waiting")
        .is_none());
}

async fn slice_firings_and_overdue_staged(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({})), t(0))
        .await
        .expect("put");
    let outcome = store
        .stage_slice(&stage("dead-replica", t(4), t(0)))
        .await
        .expect("stage");
    let takeover = store.slice_firings("dead-replica").await.expect("slice");
    assert_eq!(takeover, outcome.firings);
    assert!(store
        .slice_firings("nobody")
        .await
        .expect("slice")
        .is_empty());
    let overdue = store.overdue_staged(t(3), 10).await.expect("overdue");
    let instants: Vec<_> = overdue.iter().map(|f| f.scheduled_at).collect();
    assert_eq!(instants, [t(1), t(2)]);
    assert_eq!(
        store
            .overdue_staged(t(100), 1)
            .await
            .expect("overdue")
            .len(),
        1
    );
}

async fn counts_by_state_reports_live_firings(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({"group": "g1"})), t(0))
        .await
        .expect("put");
    store
        .put_job(&every("b", "1s", json!({"group": "g2"})), t(0))
        .await
        .expect("put");
    let outcome = store
        .stage_slice(&stage("s", t(4), t(0)))
        .await
        .expect("stage");
    let a: Vec<_> = outcome
        .firings
        .iter()
        .filter(|f| f.job_id == "a")
        .map(|f| f.id.clone())
        .collect();
    store.record_published(&a, t(1)).await.expect("publish");
    let request = StartRequest {
        group: "g1".into(),
        ..start_req(&a[0], "w")
    };
    let started = store.start(&[request], t(1)).await.expect("start");
    assert!(started[0].reply.accepted);
    let counts = store.counts_by_state().await.expect("counts");
    let expected = vec![
        ("g1".to_string(), FiringState::Executing, 1),
        ("g1".to_string(), FiringState::Published, 2),
        ("g2".to_string(), FiringState::Staged, 3),
    ];
    assert_eq!(counts, expected);
}

async fn list_firings_pages_newest_first(db: &TestDb) {
    let store = db.store().await;
    store
        .put_job(&every("a", "1s", json!({})), t(0))
        .await
        .expect("put");
    store
        .put_job(&every("b", "1s", json!({})), t(0))
        .await
        .expect("put");
    store
        .stage_slice(&stage("s", t(4), t(0)))
        .await
        .expect("stage");
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_firings(&FiringFilter {
                limit: 4,
                after,
                ..FiringFilter::default()
            })
            .await
            .expect("list");
        seen.extend(page.items.into_iter().map(|f| (f.scheduled_at, f.job_id)));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<_> = [3, 2, 1]
        .into_iter()
        .flat_map(|s| [(t(s), "b".to_string()), (t(s), "a".to_string())])
        .collect();
    assert_eq!(seen, expected);
    let staged_only = store
        .list_firings(&FiringFilter {
            state: Some(FiringState::Staged),
            job_id: Some("a".into()),
            ..FiringFilter::default()
        })
        .await
        .expect("list");
    assert_eq!(staged_only.items.len(), 3);
    assert!(matches!(
        store
            .list_firings(&FiringFilter {
                after: Some("bad".into()),
                ..FiringFilter::default()
            })
            .await,
        Err(StoreError::Invalid(_))
    ));
}

/// SQLite's fast paths send a whole transaction as one command: one that
/// fails part way, after its first writes, must leave nothing behind and
/// the one writer free for the next command (a command left open would hold
/// the write lock, and the writer would refuse every later `BEGIN`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_fast_path_that_fails_part_way_changes_nothing() {
    let db = TestDb::create(Backend::Sqlite).await;
    let store = db.store().await;
    let id = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    let request = as_received(&staged(&store, &id).await, "w1");

    // The start command fails at its delete from `waiting`, after it wrote
    // the executing row and the firing; the transaction path fails the same.
    db.exec(
        "CREATE TRIGGER keep_waiting BEFORE DELETE ON waiting \
         BEGIN SELECT RAISE(ABORT, 'waiting rows are kept'); END",
    )
    .await;
    let failed = store.start(std::slice::from_ref(&request), t(5)).await;
    assert!(failed.is_err(), "the trigger stops the start: {failed:?}");
    db.exec("DROP TRIGGER keep_waiting").await;
    assert_eq!(firing(&store, &id).await.state, FiringState::Staged);
    assert_eq!(db.scalar("SELECT count(*) FROM executing").await, 0);
    assert_eq!(db.scalar("SELECT count(*) FROM waiting").await, 1);
    let started = store.start(&[request], t(6)).await.expect("start");
    assert!(started[0].reply.accepted, "{started:?}");

    // The finish command fails at its delete from `executing`, after it
    // wrote the firing.
    db.exec(
        "CREATE TRIGGER keep_executing BEFORE DELETE ON executing \
         BEGIN SELECT RAISE(ABORT, 'executing rows are kept'); END",
    )
    .await;
    let event = finished(&id, "w1", Outcome::Succeeded, None);
    let failed = store
        .finish(std::slice::from_ref(&event), t(7), &delay)
        .await;
    assert!(failed.is_err(), "the trigger stops the finish: {failed:?}");
    db.exec("DROP TRIGGER keep_executing").await;
    assert_eq!(firing(&store, &id).await.state, FiringState::Executing);
    assert_eq!(db.scalar("SELECT count(*) FROM executing").await, 1);
    let applied = store.finish(&[event], t(8), &delay).await.expect("finish");
    assert!(applied[0].applied, "{applied:?}");
    assert_eq!(firing(&store, &id).await.state, FiringState::Succeeded);
    assert_waiting_in_step(&db).await;
}

/// The same for a command whose caller goes away while the writer's thread
/// runs it: the rest of the command is not run, and what it wrote is rolled
/// back before the writer serves anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_fast_path_cancelled_part_way_changes_nothing() {
    let db = TestDb::create(Backend::Sqlite).await;
    let store = db.store().await;
    let id = put_and_trigger(&store, &every("a", "1h", json!({})), t(0)).await;
    let request = as_received(&staged(&store, &id).await, "w1");

    // Deleting the waiting row takes a while (a count to a million),
    // after the command wrote the executing row and the firing; the caller
    // gives up meanwhile.
    db.exec(
        "CREATE TRIGGER slow_waiting BEFORE DELETE ON waiting BEGIN \
             SELECT count(*) FROM (WITH RECURSIVE n(i) AS \
                 (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) SELECT i FROM n); \
         END",
    )
    .await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(20),
        store.start(std::slice::from_ref(&request), t(5)),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "the start outlasts its caller: {gave_up:?}"
    );
    db.exec("DROP TRIGGER slow_waiting").await;
    assert_eq!(firing(&store, &id).await.state, FiringState::Staged);
    assert_eq!(db.scalar("SELECT count(*) FROM executing").await, 0);
    assert_eq!(db.scalar("SELECT count(*) FROM waiting").await, 1);
    let started = store.start(&[request], t(6)).await.expect("start");
    assert!(started[0].reply.accepted, "{started:?}");
    assert_waiting_in_step(&db).await;
}
