//! Soak: `--rate` firings/s for `--seconds` on `--replicas` schedulers,
//! with one scheduler replica (SIGTERM, then a new replica id) and one
//! worker (drained, then a new one) restarted every `--restart-every` s.
//! Per window (`--soak-window`; ten minutes for an hour) it reports the
//! start lateness, what succeeded of what was due, and what could grow
//! without bound: the schedulers' and nats-server's RSS and open files,
//! the database's size and JetStream's stored bytes, sampled at the
//! window's end.
//!
//! Each window's firings are counted [`SETTLE`] after it ends, not after
//! the run: a run longer than the schedulers' `--history-retention` (the
//! hour in docs/PERFORMANCE.md prunes after ten minutes) would otherwise
//! count pruned firings as lost.
//!
//! ```text
//! chime-bench soak                                 # 2 minutes, windows of 30 s
//! chime-bench soak --seconds 3600 --rate 1000 \
//!   "--scheduler-args=--history-retention=10m --history-keep=10"   # the hour
//! ```

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;

use crate::env::{now_ms, second_after, sleep_until_ms, Env};
use crate::proc::proc_rss_kib;
use crate::report::Row;
use crate::steady::{every_second, payload};
use crate::Args;

/// How long after a window ends its firings are counted: they have all
/// ended by then (a firing's lateness is well under a second, its handler
/// a no-op), and none is old enough to be pruned.
const SETTLE: Duration = Duration::from_secs(20);

/// A window's firings by state and its succeeded instants.
type Counts = anyhow::Result<(HashMap<String, i64>, i64)>;

/// What could grow without bound, sampled once.
#[derive(Debug, Clone, Default)]
struct Resources {
    /// Largest RSS of one scheduler, MiB.
    scheduler_rss_mib: f64,
    /// Most open files of one scheduler.
    scheduler_fds: usize,
    nats_rss_mib: f64,
    nats_fds: usize,
    database_mib: f64,
    jetstream_mib: f64,
}

impl std::fmt::Display for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "scheduler_rss_mib={:.1} scheduler_fds={} nats_rss_mib={:.1} nats_fds={} db_mib={:.1} jetstream_mib={:.2}",
            self.scheduler_rss_mib,
            self.scheduler_fds,
            self.nats_rss_mib,
            self.nats_fds,
            self.database_mib,
            self.jetstream_mib
        )
    }
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The firings of `[w0, w1)` by state, and its succeeded instants.
async fn count(env: &Env, prefix: &str, w0: i64, w1: i64) -> Counts {
    let states = env.firing_states(prefix, w0, w1).await?;
    let succeeded = env.succeeded_instants(prefix, w0, w1).await?;
    Ok((states, succeeded))
}

async fn resources(env: &Env) -> anyhow::Result<Resources> {
    let mut r = Resources::default();
    for pid in env.schedulers.iter().filter_map(|s| s.process.id()) {
        r.scheduler_rss_mib = r.scheduler_rss_mib.max(mib(proc_rss_kib(pid).unwrap_or(0)));
        r.scheduler_fds = r.scheduler_fds.max(open_files(pid));
    }
    if let Some(pid) = env.nats.pid() {
        r.nats_rss_mib = mib(proc_rss_kib(pid).unwrap_or(0));
        r.nats_fds = open_files(pid);
    }
    let (bytes,): (i64,) = sqlx::query_as("SELECT pg_database_size(current_database())")
        .fetch_one(&env.sql)
        .await
        .context("reading the database size")?;
    r.database_mib = bytes as f64 / (1024.0 * 1024.0);
    let account = async_nats::jetstream::new(env.nc.clone())
        .query_account()
        .await
        .context("reading JetStream's account usage")?;
    r.jetstream_mib = (account.storage + account.memory) as f64 / (1024.0 * 1024.0);
    Ok(r)
}

/// The window length: ten minutes for runs of an hour or more, else a
/// quarter of the run (at least 10 s).
fn window_secs(args: &Args) -> u64 {
    args.soak_window.unwrap_or(if args.seconds >= 3600 {
        600
    } else {
        (args.seconds / 4).max(10)
    })
}

/// Restarts every five minutes on long runs, three times on short ones.
fn restart_secs(args: &Args) -> u64 {
    args.restart_every.unwrap_or(if args.seconds >= 3600 {
        300
    } else {
        (args.seconds / 3).max(10)
    })
}

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let window = window_secs(args);
    let restart_every = restart_secs(args);
    let env = Env::start(args, args.replicas.max(2)).await?;
    let t0 = second_after(Duration::from_secs(5));
    let w_start = t0 + args.warmup as i64 * 1000;
    let end = w_start + args.seconds as i64 * 1000;
    let prefix = "soak-";
    env.seed(
        args.seed_concurrency,
        u64::from(args.rate),
        every_second(
            prefix,
            args.rate,
            t0,
            Some(end),
            payload(args.payload_bytes),
        ),
    )
    .await?;
    anyhow::ensure!(now_ms() < t0, "seeding took past the first instant");
    let mut windows = Vec::new();
    let mut w0 = w_start;
    while w0 < end {
        let w1 = (w0 + window as i64 * 1000).min(end);
        windows.push((env.recorder.add_window(w0, w1), w0, w1));
        w0 = w1;
    }
    let start_resources = resources(&env).await?;
    eprintln!("  at start: {start_resources}");
    let env = tokio::sync::Mutex::new(env);

    // Restarts half a period into each period, so each window sees them.
    let restarter = async {
        let mut restarts: Vec<(i64, String)> = Vec::new();
        let mut generation = 0;
        let mut at = w_start + restart_every as i64 * 500;
        while at < end - 2_000 {
            sleep_until_ms(at).await;
            let mut env = env.lock().await;
            let mut old = env.schedulers.remove(0);
            old.process.terminate(Duration::from_secs(30)).await;
            env.keep_log(&old);
            generation += 1;
            let id = format!("soak-{generation}");
            env.spawn_scheduler(&id).await;
            restarts.push((now_ms(), format!("{}->{id}", old.replica_id)));
            if let Err(e) = env
                .restart_worker(args.threads, Duration::from_millis(args.poll_ms))
                .await
            {
                eprintln!("  worker restart failed: {e:#}");
            }
            restarts.push((now_ms(), "worker".to_owned()));
            eprintln!("  restarted {} and a worker", old.replica_id);
            drop(env);
            at += restart_every as i64 * 1000;
        }
        restarts
    };
    // Resources at each window's end, RSS peaks within it.
    let sampler = async {
        let mut samples = Vec::new();
        for (_, w0, w1) in &windows {
            sleep_until_ms(*w0).await;
            env.lock().await.sampler.reset_rss();
            sleep_until_ms(*w1).await;
            let env = env.lock().await;
            let peak = env.sampler.max_rss_mib();
            let sample = resources(&env).await;
            if let Ok(s) = &sample {
                eprintln!("  window to {} s: {s}", (w1 - w_start) / 1000);
            }
            samples.push((peak, sample));
        }
        samples
    };
    let counter = async {
        let mut counts: Vec<Counts> = Vec::new();
        for (_, w0, w1) in &windows {
            sleep_until_ms(*w1 + SETTLE.as_millis() as i64).await;
            counts.push(count(&*env.lock().await, prefix, *w0, *w1).await);
        }
        counts
    };
    let (restarts, samples, counts) = tokio::join!(restarter, sampler, counter);
    let env = env.into_inner();
    let mut rows = Vec::new();
    for (((index, w0, w1), (peak, sample)), counted) in windows.iter().zip(samples).zip(counts) {
        let (states, succeeded) = counted?;
        let label = format!("{}-{}s", (w0 - w_start) / 1000, (w1 - w_start) / 1000);
        let mut row = env.recorder.with(*index, |w| {
            let mut row = Row::from_window("soak", &label, w);
            row.note("longest_silence_ms", w.longest_silence_ms());
            row
        });
        row.offered_per_s = f64::from(args.rate);
        let expected = u64::from(args.rate) * ((w1 - w0) as u64 / 1000);
        row.set_counts(expected, succeeded, states);
        row.rss_max_mib = Some(peak);
        match sample {
            Ok(r) => row.note("at_end", r),
            Err(e) => row.note("at_end", format!("unavailable ({e:#})")),
        }
        let in_window: Vec<&str> = restarts
            .iter()
            .filter(|(at, _)| at >= w0 && at < w1)
            .map(|(_, what)| what.as_str())
            .collect();
        row.note("restarts", in_window.join(","));
        rows.push(row);
    }
    if let Some(first) = rows.first_mut() {
        first.note("at_start", start_resources);
    }
    env.stop().await;
    Ok(rows)
}
