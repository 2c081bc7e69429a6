//! Store throughput on PostgreSQL: staging a slice of 10,000 firings (10,000
//! jobs due in one slice, one `stage_slice` call) and marking 10,000 firings
//! published (one `record_published` call); the latency of the fast paths a
//! firing takes: starting one firing (one `start` call for one request, what
//! a worker waits for on an idle machine), a start batch of 5 (about what a
//! busy scheduler sends) and a finish batch of 40 successes; and staging the
//! same slice with 1,000,000 jobs held (990,000 of them idle).
//!
//! Needs a PostgreSQL server where the user may create databases:
//! `$CHIME_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`.
//! A database `chime_bench_<uuid>` is created and dropped.
//!
//! ```text
//! cargo bench -p chime-scheduler --bench stage -- --sample-size 10
//! ```

use chime_common::protocol::{Finished, Outcome, StartRequest};
use chime_common::{FiringId, JobSpec, Limits, RetryPolicy};
use chime_scheduler::store::{StageRequest, StagedFiring, Store, StoreOptions};
use chrono::{DateTime, Utc};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use sqlx::{Connection, PgConnection, PgPool};
use std::time::{Duration, Instant};

const JOBS: usize = 10_000;

/// 2030-01-01T00:00:00Z plus `seconds`.
fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_893_456_000 + seconds, 0).expect("a valid instant")
}

/// The URL of database `name` on the server of `admin`.
fn with_database(admin: &str, name: &str) -> String {
    let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let root = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    if query.is_empty() {
        format!("{root}/{name}")
    } else {
        format!("{root}/{name}?{query}")
    }
}

/// Which call of a latency sample is timed: a batch is always started, and
/// a finish sample reports it succeeded afterwards.
#[derive(Clone, Copy)]
enum Timed {
    Start,
    Finish,
}

struct Bench {
    admin: String,
    name: String,
    store: Store,
    raw: PgPool,
}

impl Bench {
    async fn create() -> Bench {
        let admin = std::env::var("CHIME_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
        let name = format!("chime_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin}: {e}"));
        sqlx::query(&format!(r#"CREATE DATABASE "{name}""#))
            .execute(&mut conn)
            .await
            .expect("create the bench database");
        let url = with_database(&admin, &name);
        let store = Store::connect(&url, StoreOptions::default())
            .await
            .expect("connect");
        let raw = PgPool::connect(&url).await.expect("raw pool");
        // Every job fires hourly from its put, so all are due at t(3600).
        for i in 0..JOBS {
            let spec = JobSpec::from_json(
                &serde_json::json!({
                    "id": format!("job-{i:05}"),
                    "group": format!("g{}", i % 4),
                    "schedule": {"every": "1h"},
                    "handler": "bench",
                    "payload": {"n": i, "argv": ["/bin/true", "--flag"]},
                }),
                &Limits::default(),
            )
            .expect("a valid spec");
            store.put_job(&spec, t(0)).await.expect("put");
        }
        Bench {
            admin,
            name,
            store,
            raw,
        }
    }

    /// Puts every job back before its instant and removes the firings and
    /// their executing and waiting rows.
    async fn reset(&self) {
        for table in ["executing", "waiting", "firings"] {
            sqlx::query(&format!("DELETE FROM {table}"))
                .execute(&self.raw)
                .await
                .unwrap_or_else(|e| panic!("reset {table}: {e}"));
        }
        sqlx::query(
            "UPDATE job_schedule SET next_fire_at = $1, state = 'active' WHERE job_id LIKE 'job-%'",
        )
        .bind(t(3600).timestamp_millis())
        .execute(&self.raw)
        .await
        .expect("reset jobs");
        // Autovacuum's job in production; here every iteration rewrites
        // every row, so clean up to measure the same table each time.
        sqlx::query("VACUUM ANALYZE job_schedule, firings, waiting")
            .execute(&self.raw)
            .await
            .expect("vacuum");
    }

    /// Adds `count` idle jobs (due in a year) beside the benchmark's jobs,
    /// copies of the first one's rows: what a scheduler holding a large job
    /// set has to keep indexed while it stages the few due ones.
    async fn hold_idle_jobs(&self, count: usize) {
        sqlx::query(
            "INSERT INTO jobs (id, group_name, spec, anchor_ms, version, consecutive_failures, \
                 created_at, updated_at, overlap) \
             SELECT 'idle-' || lpad(g::text, 7, '0'), j.group_name, \
                 replace(j.spec, j.id, 'idle-' || lpad(g::text, 7, '0')), j.anchor_ms, 1, 0, \
                 j.created_at + g, j.updated_at, j.overlap \
             FROM jobs j, generate_series(1, $1) g WHERE j.id = 'job-00000'",
        )
        .bind(count as i64)
        .execute(&self.raw)
        .await
        .expect("idle jobs");
        sqlx::query(
            "INSERT INTO job_schedule (job_id, part, state, next_fire_at) \
             SELECT id, 0, 'active', $1 FROM jobs WHERE id LIKE 'idle-%'",
        )
        .bind(t(365 * 86_400).timestamp_millis())
        .execute(&self.raw)
        .await
        .expect("idle schedules");
        sqlx::query("VACUUM ANALYZE jobs")
            .execute(&self.raw)
            .await
            .expect("vacuum");
    }

    fn request(&self) -> StageRequest {
        let mut req = StageRequest::new("bench", 0, t(3601), t(3598));
        req.max_jobs = JOBS as u32;
        req
    }

    async fn stage(&self) -> Vec<StagedFiring> {
        let outcome = self
            .store
            .stage_slice(&self.request())
            .await
            .expect("stage");
        assert_eq!(outcome.firings.len(), JOBS);
        outcome.firings
    }

    /// `iters` stagings of the slice from reset tables; only the
    /// `stage_slice` calls are timed.
    async fn timed_stagings(&self, iters: u64) -> Duration {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            self.reset().await;
            let started = Instant::now();
            self.stage().await;
            total += started.elapsed();
        }
        total
    }

    /// `n` staged firings not started yet, taken from `unstarted`. When it
    /// runs out the slice is staged again (with its reset and `VACUUM`), so
    /// the timed calls run on warm tables, as in a running scheduler.
    async fn staged(&self, unstarted: &mut Vec<StagedFiring>, n: usize) -> Vec<StagedFiring> {
        if unstarted.len() < n {
            self.reset().await;
            *unstarted = self.stage().await;
        }
        unstarted.split_off(unstarted.len() - n)
    }

    /// Starts `firings` in one `start` call, all accepted; returns its time.
    async fn timed_start(&self, firings: &[StagedFiring]) -> Duration {
        let requests: Vec<StartRequest> = firings
            .iter()
            .map(|firing| StartRequest {
                firing_id: firing.id.clone(),
                worker_id: "bench-worker".into(),
                group: firing.group.clone(),
                handler: None,
                payload_sha256: None,
            })
            .collect();
        let started = Instant::now();
        let decisions = self.store.start(&requests, t(3600)).await.expect("start");
        let took = started.elapsed();
        assert!(decisions.iter().all(|d| d.reply.accepted), "{decisions:?}");
        took
    }

    /// Reports the started `firings` succeeded in one `finish` call, all
    /// applied; returns its time.
    async fn timed_finish(&self, firings: &[StagedFiring]) -> Duration {
        let events: Vec<Finished> = firings
            .iter()
            .map(|firing| Finished {
                firing_id: firing.id.clone(),
                worker_id: "bench-worker".into(),
                outcome: Outcome::Succeeded,
                error: None,
                interrupted: None,
                output: None,
                started_at: t(3600),
                finished_at: t(3601),
            })
            .collect();
        let no_delay = |_: &RetryPolicy, _: u32| Duration::ZERO;
        let started = Instant::now();
        let outcomes = self
            .store
            .finish(&events, t(3601), &no_delay)
            .await
            .expect("finish");
        let took = started.elapsed();
        assert!(outcomes.iter().all(|o| o.applied), "{outcomes:?}");
        took
    }

    async fn drop_database(&self) {
        self.store.close().await;
        self.raw.close().await;
        if let Ok(mut conn) = PgConnection::connect(&self.admin).await {
            let _ = sqlx::query(&format!(
                r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#,
                self.name
            ))
            .execute(&mut conn)
            .await;
        }
    }
}

fn store_benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let bench = runtime.block_on(Bench::create());

    let mut group = c.benchmark_group("store");
    group.sampling_mode(SamplingMode::Flat);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(JOBS as u64));

    group.bench_function("stage_slice_10000_firings", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| bench.timed_stagings(iters))
    });

    group.bench_function("record_published_10000_firings", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let bench = &bench;
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    bench.reset().await;
                    let ids: Vec<FiringId> =
                        bench.stage().await.into_iter().map(|f| f.id).collect();
                    let started = Instant::now();
                    let changed = bench
                        .store
                        .record_published(&ids, t(3600))
                        .await
                        .expect("publish");
                    total += started.elapsed();
                    assert_eq!(changed, JOBS as u64);
                }
                total
            }
        })
    });
    group.finish();

    let mut latency = c.benchmark_group("store_latency");
    latency.measurement_time(Duration::from_secs(20));
    // Staged firings not started yet, shared by all samples.
    let unstarted = std::sync::Mutex::new(Vec::<StagedFiring>::new());
    let mut batch = |name: &str, n: usize, timed: Timed| {
        latency.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let (bench, unstarted) = (&bench, &unstarted);
                async move {
                    let mut total = Duration::ZERO;
                    let mut firings = std::mem::take(&mut *unstarted.lock().expect("not poisoned"));
                    for _ in 0..iters {
                        let batch = bench.staged(&mut firings, n).await;
                        let start = bench.timed_start(&batch).await;
                        total += match timed {
                            Timed::Start => start,
                            Timed::Finish => bench.timed_finish(&batch).await,
                        };
                    }
                    *unstarted.lock().expect("not poisoned") = firings;
                    total
                }
            })
        });
    };
    batch("start_1_firing", 1, Timed::Start);
    batch("start_5_firings", 5, Timed::Start);
    batch("finish_40_firings", 40, Timed::Finish);
    latency.finish();

    // The same staging with a million jobs held: the 10,000 due ones and
    // 990,000 idle ones (the scale scenario's shape, one slice's worth).
    runtime.block_on(bench.hold_idle_jobs(1_000_000 - JOBS));
    let mut held = c.benchmark_group("store_held");
    held.sampling_mode(SamplingMode::Flat);
    held.measurement_time(Duration::from_secs(20));
    held.throughput(Throughput::Elements(JOBS as u64));
    held.bench_function("stage_slice_10000_of_1000000_jobs", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| bench.timed_stagings(iters))
    });
    held.finish();

    runtime.block_on(bench.drop_database());
}

criterion_group!(benches, store_benches);
criterion_main!(benches);
