//! `chime-bench`: Chime's benchmark program (docs/PERFORMANCE.md).
//!
//! Starts a real nats-server (JetStream, file storage), a fresh PostgreSQL
//! database (or SQLite file, `--backend sqlite`) and the built
//! `chime-scheduler` binary as child processes, runs
//! in-process `chime_worker` workers with a `noop` handler that records start
//! lateness (handler start − scheduled instant) in an HDR histogram, drives
//! an open-loop load and prints one result table per scenario.
//!
//! ```text
//! cargo build --release --bins -p chime-scheduler -p chime-worker -p chimectl -p chime-tests
//! target/release/chime-bench steady            # or saturation, burst, scale, failover, immediate, all
//! target/release/chime-bench soak --seconds 3600   # not part of `all`
//! target/release/chime-bench floor --rates 1000,4000   # not part of `all`
//! target/release/chime-bench transport-floor --rates 1000,4000   # not part of `all`
//! target/release/chime-bench limit   # each operation flat out; not part of `all`
//! target/release/chime-bench against-floor --rates 1000,4000 --runs 3   # Chime ÷ both floors
//! target/release/chime-bench all --json out.json
//! target/release/chime-bench saturation --rates 4000 --runs 3   # median (min–max) of 3
//! ```
//!
//! Set `CHIME_BIN_DIR=target/release` to skip the harness's own
//! `cargo build` of the workspace binaries.

/// The same allocator as the `chime-scheduler` and `chime-worker` binaries,
/// for the in-process workers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod against_floor;
mod burst;
mod cost;
mod env;
mod failover;
mod floor;
mod flush;
mod history;
mod immediate;
mod limit;
mod load;
mod proc;
mod record;
mod report;
mod saturation;
mod scale;
#[cfg(test)]
mod smoke;
mod soak;
mod steady;
mod summary;
mod transport_floor;
mod yardstick;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::report::Row;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Steady,
    Saturation,
    Burst,
    Scale,
    Failover,
    /// Triggers measured from their commit to their start.
    Immediate,
    /// Long-running: not part of `all`.
    Soak,
    /// A firing's durable minimum (its row, publish, start update, finished
    /// event) at each of `--rates`, with no scheduler: a lower bound for the
    /// cost per firing. Not part of `all`.
    Floor,
    /// The least a firing costs when workers speak only NATS (publish with
    /// message id, pull and ack, a KV create as start token, a finished
    /// event, history appended once a second by one COPY) at each of
    /// `--rates`. Not part of `all`.
    TransportFloor,
    /// Each of a firing's operations (JetStream publish, consume, KV
    /// create, COPY row) flat out for `--step` seconds, and the firings a
    /// second the machine's cores could carry. Not part of `all`.
    Limit,
    /// Both floors, a saturation step at each of `--rates` and the limit,
    /// back to back, and Chime's machine CPU per firing as a multiple of
    /// each floor's. Not part of `all`.
    AgainstFloor,
    All,
}

/// The store the schedulers run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// A fresh database on the local PostgreSQL (autovacuum on).
    Postgres,
    /// The embedded default: a fresh SQLite file, one scheduler.
    Sqlite,
}

impl Backend {
    fn kind(self) -> chime_tests::DatabaseKind {
        match self {
            Backend::Postgres => chime_tests::DatabaseKind::Postgres,
            Backend::Sqlite => chime_tests::DatabaseKind::Sqlite,
        }
    }
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "chime-bench",
    about = "Chime's benchmark scenarios: throughput, start lateness and cost per firing (docs/PERFORMANCE.md)"
)]
pub struct Args {
    /// Which scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Also write every result row as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The store: SQLite runs the one-scheduler scenarios (steady,
    /// saturation, burst, immediate).
    #[arg(long, value_enum, default_value_t = Backend::Postgres)]
    backend: Backend,
    /// Firings per second for steady, scale and failover.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Measured seconds for steady, failover and immediate.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Seconds of load before each measurement window starts.
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// In-process workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Workers' idle poll interval in ms (the fallback when no doorbell rings; the worker's default is 1000).
    #[arg(long, default_value_t = 1000)]
    poll_ms: u64,
    /// Threads (concurrent firings) per worker.
    #[arg(long, default_value_t = 512)]
    threads: usize,
    /// Each job's payload: a JSON object of string fields about this many
    /// bytes long once encoded (0: no payload). Steady, saturation, burst,
    /// scale, failover and soak.
    #[arg(long, default_value_t = 0)]
    payload_bytes: usize,
    /// Saturation, the floors and against-floor: the rates (firings/s) to step
    /// through, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,2000,4000,6000,8000,10000,12000,14000,16000"
    )]
    rates: Vec<u32>,
    /// Saturation, the floors and against-floor: measured seconds per step
    /// (after `--warmup`); the limit: seconds per operation.
    #[arg(long, default_value_t = 20)]
    step: u64,
    /// Saturation and against-floor: no step runs after one whose lateness
    /// p99 exceeded this many ms (a row's `sustained` is judged by the
    /// 100 ms bound either way).
    #[arg(long, default_value_t = 100)]
    p99_limit_ms: u64,
    /// Burst: jobs due at the same second.
    #[arg(long, default_value_t = 100_000)]
    burst_jobs: u32,
    /// Scale: active job counts to measure at (including the `--rate` firing jobs).
    #[arg(long, value_delimiter = ',', default_value = "1000,100000,1000000")]
    sizes: Vec<u64>,
    /// Scale: measured seconds at each size.
    #[arg(long, default_value_t = 30)]
    scale_window: u64,
    /// Failover and soak: scheduler replicas (soak: at least 2).
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Soak: seconds of load after the warm-up (3600 for the hour).
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Soak: seconds per reported window (default: 600 for an hour or
    /// more, else a quarter of --seconds).
    #[arg(long)]
    soak_window: Option<u64>,
    /// Soak: seconds between restarts of a replica and a worker (default:
    /// 300 for an hour or more, else a third of --seconds).
    #[arg(long)]
    restart_every: Option<u64>,
    /// Immediate: `jobs.trigger` requests per second.
    #[arg(long, default_value_t = 20)]
    trigger_rate: u32,
    /// Failover: seconds between kills.
    #[arg(long, default_value_t = 10)]
    kill_every: u64,
    /// Concurrent `Store::put_job` tasks when seeding jobs.
    #[arg(long, default_value_t = 32)]
    seed_concurrency: usize,
    /// Store partitions (passed to every scheduler as `--partitions` and used when seeding).
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Floor and against-floor's floor: also write Chime's `waiting` and
    /// `executing` rows (PostgreSQL).
    #[arg(long)]
    floor_bookkeeping: bool,
    /// Limit: JetStream publishes and KV creates in flight at once.
    #[arg(long, default_value_t = 256)]
    limit_in_flight: usize,
    /// Limit: rows written by each `COPY`.
    #[arg(long, default_value_t = 1000)]
    limit_copy_rows: u64,
    /// Copy every scheduler's log into this directory before it is removed.
    #[arg(long)]
    keep_logs: Option<PathBuf>,
    /// Every scheduler's log filter (`RUST_LOG`), e.g.
    /// `info,sqlx::query=debug` with `--keep-logs` to see each statement's time.
    #[arg(long, default_value = "info")]
    scheduler_log: String,
    /// Run each scenario this many times back to back, each on fresh
    /// services after its own idle-CPU reading, then print every figure's
    /// median, min and max over the runs (docs/PERFORMANCE.md quotes figures
    /// that way).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=25))]
    runs: u32,
    /// Extra arguments for every chime-scheduler (e.g. `--partitions=4`), space separated.
    #[arg(long, default_value = "")]
    scheduler_args: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let scenarios: Vec<Scenario> = match (args.scenario, args.backend) {
        (Scenario::All, Backend::Sqlite) => vec![
            Scenario::Steady,
            Scenario::Burst,
            Scenario::Saturation,
            Scenario::Immediate,
        ],
        (Scenario::All, Backend::Postgres) => vec![
            Scenario::Steady,
            Scenario::Failover,
            Scenario::Burst,
            Scenario::Saturation,
            Scenario::Scale,
            Scenario::Immediate,
        ],
        (one, _) => vec![one],
    };
    if args.backend == Backend::Sqlite {
        if let Some(many) = scenarios
            .iter()
            .find(|s| matches!(s, Scenario::Scale | Scenario::Failover | Scenario::Soak))
        {
            anyhow::bail!("{many:?} runs several schedulers or PostgreSQL's own statistics: use --backend postgres");
        }
    }
    let mut all: Vec<Row> = Vec::new();
    for scenario in scenarios {
        let name = scenario
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        let mut ended: Vec<Vec<Row>> = Vec::new();
        for run in 1..=args.runs {
            let idle_pct = report::print_machine();
            eprintln!("== {name}, run {run} of {} ==", args.runs);
            let result = match scenario {
                Scenario::Steady => steady::run(&args).await,
                Scenario::Saturation => saturation::run(&args).await,
                Scenario::Burst => burst::run(&args).await,
                Scenario::Scale => scale::run(&args).await,
                Scenario::Failover => failover::run(&args).await,
                Scenario::Immediate => immediate::run(&args).await,
                Scenario::Soak => soak::run(&args).await,
                Scenario::Floor => floor::run(&args).await,
                Scenario::TransportFloor => transport_floor::run(&args).await,
                Scenario::Limit => limit::run(&args).await,
                Scenario::AgainstFloor => against_floor::run(&args, run).await,
                Scenario::All => unreachable!("expanded above"),
            };
            match result {
                Ok(mut rows) => {
                    for row in &mut rows {
                        row.note("run", run);
                        row.note("cpu_idle_before_pct", format!("{idle_pct:.0}"));
                    }
                    report::print_table(&name, &rows);
                    all.extend(rows.iter().cloned());
                    ended.push(rows);
                }
                Err(e) => eprintln!("{name} run {run} failed: {e:#}"),
            }
            if let Some(path) = &args.json {
                std::fs::write(path, serde_json::to_string_pretty(&all)?)?;
            }
        }
        if args.runs > 1 {
            let labels = summary::summarize(&ended);
            print!(
                "{}",
                summary::render(&name, args.runs as usize, ended.len(), &labels)
            );
        }
    }
    Ok(())
}
