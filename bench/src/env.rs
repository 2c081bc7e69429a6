//! The real parts a scenario runs on: nats-server, a fresh PostgreSQL or
//! SQLite database (`--backend`), scheduler child processes, in-process
//! workers, and /proc sampling of the schedulers.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use chime_common::job::JobSpec;
use chime_common::Limits;
use chime_scheduler::store::{Store, StoreOptions};
use chime_tests::{
    free_port, Binary, ChimeProcess, DatabaseKind, NatsOptions, NatsServer, TestDatabase,
};
use chime_worker::{FiringContext, HandlerError, Worker, WorkerHandle};
use chrono::{TimeZone, Utc};
use futures::StreamExt;
use serde_json::Value;
use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::flush::FlushProbe;
use crate::proc::{clock_ticks, proc_rss_kib, proc_ticks};
use crate::record::Recorder;
use crate::report::Row;
use crate::Args;

pub const GROUP: &str = "bench";
/// The workers' handler that fails a firing's first attempt and succeeds
/// the others (a retry is due the moment the first attempt ends).
pub const FAIL_FIRST: &str = "fail-first";
/// The workers' handler that runs for [`HOLD_FOR`] (so that a queued
/// firing of the same job waits behind it).
pub const HOLD: &str = "hold";
pub const HOLD_FOR: Duration = Duration::from_millis(100);

/// p50, p99, max of two phases (see [`Env::phase_split`]).
type PhaseRow = (
    Option<f64>,
    Option<f64>,
    Option<i64>,
    Option<f64>,
    Option<f64>,
    Option<i64>,
);

/// One scheduler child process.
pub struct Sched {
    pub replica_id: String,
    pub metrics_addr: String,
    pub process: ChimeProcess,
}

pub struct Env {
    pub nats: NatsServer,
    pub db: TestDatabase,
    pub nc: async_nats::Client,
    pub store: Store,
    /// The bench's own queries (counts by state, sizes), on either backend.
    pub sql: AnyPool,
    pub schedulers: Vec<Sched>,
    pub workers: Vec<WorkerHandle>,
    /// The workers' own metrics, read for the start decision time.
    worker_metrics: Vec<chime_worker::Metrics>,
    pub recorder: Recorder,
    pub sampler: Sampler,
    /// `None` if the temporary directory takes no file.
    flush: Option<FlushProbe>,
    scheduler_args: Vec<String>,
    /// Every scheduler's `RUST_LOG`.
    scheduler_log: String,
    keep_logs: Option<std::path::PathBuf>,
}

impl Env {
    /// NATS, a fresh database of `--backend`, `replicas` schedulers, workers.
    pub async fn start(args: &Args, replicas: usize) -> anyhow::Result<Env> {
        // Monitoring on: the cost report reads the server's message counts.
        let nats = NatsServer::start_with(NatsOptions {
            monitoring: true,
            ..NatsOptions::default()
        })
        .await;
        let db = TestDatabase::create(args.backend.kind()).await;
        let nc = async_nats::connect(nats.url()).await?;
        let store = Store::connect(
            &db.url(),
            StoreOptions {
                max_connections: args.seed_concurrency.max(1) as u32,
                partitions: args.partitions.max(1),
                ..StoreOptions::default()
            },
        )
        .await
        .context("connecting the store")?;
        sqlx::any::install_default_drivers();
        let sql = AnyPoolOptions::new()
            .max_connections(4)
            .connect(&db.url())
            .await?;
        if db.kind() == DatabaseKind::Postgres {
            require_autovacuum(&sql).await?;
        }
        let mut env = Env {
            nats,
            db,
            nc,
            store,
            sql,
            schedulers: Vec::new(),
            workers: Vec::new(),
            worker_metrics: Vec::new(),
            recorder: Recorder::new(),
            sampler: Sampler::start(),
            flush: FlushProbe::start()
                .inspect_err(|e| eprintln!("  no disk flush probe: {e}"))
                .ok(),
            scheduler_args: std::iter::once(format!("--partitions={}", args.partitions.max(1)))
                .chain(args.scheduler_args.split_whitespace().map(str::to_owned))
                .collect(),
            scheduler_log: args.scheduler_log.clone(),
            keep_logs: args.keep_logs.clone(),
        };
        for i in 0..replicas {
            env.spawn_scheduler(&format!("r{i}")).await;
        }
        for _ in 0..args.workers {
            env.start_worker(args.threads, Duration::from_millis(args.poll_ms))
                .await?;
        }
        Ok(env)
    }

    /// Starts a scheduler with this replica id and waits until it is ready.
    pub async fn spawn_scheduler(&mut self, replica_id: &str) -> usize {
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = Binary::Scheduler.command();
        cmd.arg("--nats-url")
            .arg(self.nats.url())
            .arg("--database-url")
            .arg(self.db.url())
            .arg("--metrics-addr")
            .arg(&metrics_addr)
            .arg("--replica-id")
            .arg(replica_id)
            .args(&self.scheduler_args)
            .env("RUST_LOG", &self.scheduler_log);
        let mut process = ChimeProcess::spawn(cmd);
        process
            .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
            .await;
        if let Some(pid) = process.id() {
            self.sampler.watch(pid);
        }
        self.schedulers.push(Sched {
            replica_id: replica_id.to_owned(),
            metrics_addr,
            process,
        });
        self.schedulers.len() - 1
    }

    /// Shuts the oldest worker down (it drains its running firings) and
    /// starts a new one in its place, as a rolling restart does.
    pub async fn restart_worker(&mut self, threads: usize, poll: Duration) -> anyhow::Result<()> {
        if !self.workers.is_empty() {
            let old = self.workers.remove(0);
            self.worker_metrics.remove(0);
            tokio::time::timeout(Duration::from_secs(30), old.shutdown())
                .await
                .context("a worker did not drain within 30 s")?;
        }
        self.start_worker(threads, poll).await
    }

    async fn start_worker(&mut self, threads: usize, poll: Duration) -> anyhow::Result<()> {
        let client = async_nats::connect(self.nats.url()).await?;
        let recorder = self.recorder.clone();
        let metrics = chime_worker::Metrics::new(GROUP);
        self.worker_metrics.push(metrics.clone());
        let worker = Worker::builder()
            .nats(client)
            .metrics(metrics)
            .group(GROUP)
            .threads(threads)
            .poll_interval(poll)
            .handler_fn("noop", {
                let recorder = recorder.clone();
                move |ctx: FiringContext| {
                    recorder.record(&ctx, Utc::now());
                    async move { Ok(None) }
                }
            })
            .handler_fn(FAIL_FIRST, {
                let recorder = recorder.clone();
                move |ctx: FiringContext| {
                    recorder.record(&ctx, Utc::now());
                    let first = ctx.firing.attempt == 1;
                    async move {
                        if first {
                            Err(HandlerError::new("the first attempt fails"))
                        } else {
                            Ok(None)
                        }
                    }
                }
            })
            .handler_fn(HOLD, move |ctx: FiringContext| {
                recorder.record(&ctx, Utc::now());
                async move {
                    tokio::time::sleep(HOLD_FOR).await;
                    Ok(None)
                }
            })
            .build()?;
        self.workers.push(worker.start().await?);
        Ok(())
    }

    /// Puts jobs through the store with `--seed-concurrency` tasks.
    /// Returns puts per second.
    pub async fn seed(
        &self,
        concurrency: usize,
        count: u64,
        spec: impl Fn(u64) -> Value,
    ) -> anyhow::Result<f64> {
        let started = Instant::now();
        let limits = Limits::default();
        let specs = (0..count).map(|i| {
            JobSpec::from_json(&spec(i), &limits)
                .map_err(|e| anyhow!("invalid bench job spec: {e:?}"))
        });
        let mut puts = futures::stream::iter(specs)
            .map(|spec| {
                let store = self.store.clone();
                async move {
                    let spec = spec?;
                    store.put_job(&spec, Utc::now()).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(concurrency.max(1));
        let mut done = 0u64;
        while let Some(result) = puts.next().await {
            result?;
            done += 1;
            if done.is_multiple_of(100_000) {
                eprintln!(
                    "  seeded {done}/{count} ({:.0}/s)",
                    done as f64 / started.elapsed().as_secs_f64()
                );
            }
        }
        Ok(count as f64 / started.elapsed().as_secs_f64().max(1e-9))
    }

    /// Firings by state with `scheduled_at` in `[start_ms, end_ms)` and
    /// job id starting with `prefix`.
    pub async fn firing_states(
        &self,
        prefix: &str,
        start_ms: i64,
        end_ms: i64,
    ) -> anyhow::Result<HashMap<String, i64>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, count(*) FROM firings \
             WHERE scheduled_at >= $1 AND scheduled_at < $2 AND job_id LIKE $3 GROUP BY state",
        )
        .bind(start_ms)
        .bind(end_ms)
        .bind(format!("{prefix}%"))
        .fetch_all(&self.sql)
        .await?;
        Ok(rows.into_iter().collect())
    }

    /// Distinct (job, instant) pairs with a succeeded firing in the window.
    pub async fn succeeded_instants(
        &self,
        prefix: &str,
        start_ms: i64,
        end_ms: i64,
    ) -> anyhow::Result<i64> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM (SELECT DISTINCT job_id, scheduled_at FROM firings \
             WHERE state = 'succeeded' AND scheduled_at >= $1 AND scheduled_at < $2 AND job_id LIKE $3) i",
        )
        .bind(start_ms)
        .bind(end_ms)
        .bind(format!("{prefix}%"))
        .fetch_one(&self.sql)
        .await?;
        Ok(n)
    }

    /// Where the lateness comes from, from the store's own timestamps:
    /// p50 / p99 / max of `published_at − due_at` and of
    /// `started_at − published_at` (ms), for first attempts in the window
    /// (PostgreSQL only: SQLite has no `percentile_cont`).
    pub async fn phase_split(
        &self,
        prefix: &str,
        start_ms: i64,
        end_ms: i64,
    ) -> anyhow::Result<String> {
        anyhow::ensure!(
            self.db.kind() == DatabaseKind::Postgres,
            "the phase split needs PostgreSQL"
        );
        let row: PhaseRow = sqlx::query_as(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY published_at - due_at), \
                    percentile_cont(0.99) WITHIN GROUP (ORDER BY published_at - due_at), \
                    max(published_at - due_at), \
                    percentile_cont(0.5) WITHIN GROUP (ORDER BY started_at - published_at), \
                    percentile_cont(0.99) WITHIN GROUP (ORDER BY started_at - published_at), \
                    max(started_at - published_at) \
             FROM firings WHERE attempt = 1 AND scheduled_at >= $1 AND scheduled_at < $2 AND job_id LIKE $3",
        )
        .bind(start_ms)
        .bind(end_ms)
        .bind(format!("{prefix}%"))
        .fetch_one(&self.sql)
        .await?;
        let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        let i = |v: Option<i64>| v.map_or("-".into(), |v| v.to_string());
        Ok(format!(
            "publish-due[{}/{}/{}]_start-publish[{}/{}/{}]",
            f(row.0),
            f(row.1),
            i(row.2),
            f(row.3),
            f(row.4),
            i(row.5)
        ))
    }

    /// Waits (at most `timeout`) until no firing of the window is still
    /// staged, published or executing; returns the final counts by state.
    pub async fn drain(
        &self,
        prefix: &str,
        start_ms: i64,
        end_ms: i64,
        timeout: Duration,
    ) -> anyhow::Result<HashMap<String, i64>> {
        let deadline = Instant::now() + timeout;
        loop {
            let states = self.firing_states(prefix, start_ms, end_ms).await?;
            let open: i64 = ["staged", "published", "executing"]
                .iter()
                .filter_map(|s| states.get(*s))
                .sum();
            if open == 0 || Instant::now() >= deadline {
                return Ok(states);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Sum of `chime_firings_published_total` over the running schedulers.
    pub async fn published_total(&self) -> f64 {
        let mut total = 0.0;
        for s in &self.schedulers {
            if let Ok(text) = http_get(&s.metrics_addr, "/metrics").await {
                total += metric_sum(&text, "chime_firings_published_total");
            }
        }
        total
    }

    /// Copies a scheduler's log to `--keep-logs`, if given.
    pub fn keep_log(&self, sched: &Sched) {
        if let Some(dir) = &self.keep_logs {
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::copy(
                sched.process.log_path(),
                dir.join(format!("{}.log", sched.replica_id)),
            );
        }
    }

    /// A few of the first scheduler's own counters, for [`SchedulerMetrics::since`].
    pub async fn scheduler_metrics(&self) -> SchedulerMetrics {
        let text = match self.schedulers.first() {
            Some(s) => http_get(&s.metrics_addr, "/metrics")
                .await
                .unwrap_or_default(),
            None => String::new(),
        };
        SchedulerMetrics(
            SchedulerMetrics::NAMES
                .iter()
                .map(|&m| (m, metric_sum(&text, m)))
                .collect(),
        )
    }

    /// Notes the disk's flush latency over `[w0, w1)` (`flush.rs`).
    pub fn note_disk(&self, w0: i64, w1: i64, row: &mut Row) {
        if let Some(flush) = &self.flush {
            flush.note(w0, w1, row);
        }
    }

    /// The workers' mean start decision time (start request to the
    /// scheduler's answer) over the whole run, as a note.
    pub fn worker_start_decisions(&self) -> String {
        let (sum, count) = self.worker_metrics.iter().fold((0.0, 0), |(s, c), m| {
            (
                s + m.start_decision.get_sample_sum(),
                c + m.start_decision.get_sample_count(),
            )
        });
        let mean_ms = if count == 0 {
            0.0
        } else {
            sum * 1000.0 / count as f64
        };
        format!("mean_ms={mean_ms:.2},count={count}")
    }

    /// Stops the workers and schedulers; the database and NATS go with `self`.
    pub async fn stop(mut self) {
        for w in self.workers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(15), w.shutdown()).await;
        }
        for s in &self.schedulers {
            self.keep_log(s);
        }
        for s in self.schedulers.iter_mut() {
            s.process.kill9();
        }
        self.sampler.stop();
        self.store.close().await;
        self.sql.close().await;
    }
}

/// The instant `ms` as RFC 3339 with milliseconds.
pub fn rfc3339(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .expect("valid instant")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// The next whole second at least `ahead` from now, in ms.
pub fn second_after(ahead: Duration) -> i64 {
    let t = now_ms() + ahead.as_millis() as i64;
    (t / 1000 + 1) * 1000
}

/// Sleeps until wall-clock `ms`.
pub async fn sleep_until_ms(ms: i64) {
    let wait = ms - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// A minimal HTTP/1.0 GET (the scheduler's /metrics).
pub async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut body)).await??;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Refuses a PostgreSQL server whose autovacuum is off (this machine's CI
/// configuration turns it off): every firing rewrites rows, and without
/// vacuum the dead versions pile up for the whole run, so the figures would
/// measure a bloat no production server has and drift with the run's length.
async fn require_autovacuum(sql: &AnyPool) -> anyhow::Result<()> {
    let (setting,): (String,) = sqlx::query_as("SELECT current_setting('autovacuum')")
        .fetch_one(sql)
        .await?;
    anyhow::ensure!(
        setting == "on",
        "PostgreSQL's autovacuum is {setting} on this server; benchmark against one that vacuums, \
         e.g. psql -c \"ALTER SYSTEM SET autovacuum = on\" -c \"SELECT pg_reload_conf()\""
    );
    Ok(())
}

/// A snapshot of the first scheduler's counters (all zero when its
/// /metrics did not answer).
pub struct SchedulerMetrics(BTreeMap<&'static str, f64>);

impl SchedulerMetrics {
    const NAMES: [&'static str; 9] = [
        "chime_stage_duration_seconds_sum",
        "chime_stage_duration_seconds_count",
        "chime_start_batch_duration_seconds_sum",
        "chime_start_batch_duration_seconds_count",
        "chime_publish_lateness_seconds_sum",
        "chime_publish_lateness_seconds_count",
        "chime_slices_claimed_total",
        "chime_misfires_total",
        "chime_starts_total",
    ];

    /// What happened between `earlier` (the start of the run when `None`)
    /// and this snapshot: counts and mean durations in ms, as a note.
    pub fn since(&self, earlier: Option<&SchedulerMetrics>) -> String {
        let delta = |name: &str| {
            self.0.get(name).copied().unwrap_or(0.0)
                - earlier.and_then(|e| e.0.get(name).copied()).unwrap_or(0.0)
        };
        let mean_ms = |family: &str| {
            let count = delta(&format!("{family}_count"));
            if count > 0.0 {
                format!("{:.2}", delta(&format!("{family}_sum")) * 1000.0 / count)
            } else {
                "-".into()
            }
        };
        format!(
            "{}stagings={},stage_ms_mean={},start_batches={},start_batch_ms_mean={},\
             publish_lateness_ms_mean={},slices_claimed={},misfires={},starts={}",
            if earlier.is_some() { "window:" } else { "run:" },
            delta("chime_stage_duration_seconds_count"),
            mean_ms("chime_stage_duration_seconds"),
            delta("chime_start_batch_duration_seconds_count"),
            mean_ms("chime_start_batch_duration_seconds"),
            mean_ms("chime_publish_lateness_seconds"),
            delta("chime_slices_claimed_total"),
            delta("chime_misfires_total"),
            delta("chime_starts_total"),
        )
    }
}

/// Sums every sample of a Prometheus metric family.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Samples RSS and CPU of the scheduler processes every 200 ms.
#[derive(Clone)]
pub struct Sampler {
    inner: Arc<Mutex<SamplerState>>,
    stop: Arc<AtomicBool>,
}

#[derive(Default)]
struct SamplerState {
    /// pid → last utime+stime ticks seen.
    pids: HashMap<u32, u64>,
    /// CPU ticks of every watched process so far.
    ticks: u64,
    /// Largest VmRSS of one process since the last `reset_rss`, KiB.
    max_rss_kib: u64,
}

impl Sampler {
    pub fn start() -> Sampler {
        let sampler = Sampler {
            inner: Arc::default(),
            stop: Arc::default(),
        };
        let s = sampler.clone();
        tokio::spawn(async move {
            while !s.stop.load(Ordering::Relaxed) {
                s.sample();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        sampler
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn watch(&self, pid: u32) {
        let ticks = proc_ticks(pid).unwrap_or(0);
        let mut st = self.inner.lock().unwrap();
        st.ticks += ticks;
        st.pids.insert(pid, ticks);
    }

    pub fn sample(&self) {
        let mut st = self.inner.lock().unwrap();
        let pids: Vec<u32> = st.pids.keys().copied().collect();
        for pid in pids {
            match (proc_ticks(pid), proc_rss_kib(pid)) {
                (Some(ticks), Some(rss)) => {
                    let last = st.pids.insert(pid, ticks).unwrap_or(ticks);
                    st.ticks += ticks.saturating_sub(last);
                    st.max_rss_kib = st.max_rss_kib.max(rss);
                }
                _ => {
                    st.pids.remove(&pid);
                }
            }
        }
    }

    /// CPU seconds of the schedulers so far.
    pub fn cpu_seconds(&self) -> f64 {
        self.sample();
        self.inner.lock().unwrap().ticks as f64 / clock_ticks()
    }

    /// Largest scheduler RSS (MiB) since the last reset.
    pub fn max_rss_mib(&self) -> f64 {
        self.sample();
        self.inner.lock().unwrap().max_rss_kib as f64 / 1024.0
    }

    pub fn reset_rss(&self) {
        self.inner.lock().unwrap().max_rss_kib = 0;
    }
}
