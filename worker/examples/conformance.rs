//! The conformance worker: the Rust worker library with the handlers the
//! protocol conformance suite (`tests/tests/worker_conformance.rs`) drives.
//! The Python and TypeScript SDKs ship the same program
//! (`python3 -m chime_worker.conformance`,
//! `node sdk/typescript/dist/conformance.js`) with the same arguments and
//! handlers, so one suite judges all three.
//!
//! ```text
//! cargo run -p chime-worker --example conformance -- --nats-url nats://127.0.0.1:4222 --group g
//! ```
//!
//! Handlers: `echo` (the payload's `text`, else the payload as JSON),
//! `sleep` (`payload.seconds`; fails `cancelled` when cancelled), `fail`
//! (`payload.message`), `shard` (`<shard>/<shards>`), `env` (the firing's
//! id, job, attempt and instant as JSON). Prints
//! `conformance worker ready <worker id>` once it pulls; on SIGTERM it
//! drains for `--drain-grace` seconds and exits 0.

use chime_common::Subjects;
use chime_runtime::connection::NatsConnection;
use chime_worker::{FiringContext, HandlerError, HandlerResult, Worker, WorkerConfig};
use clap::Parser;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

#[derive(Debug, Parser)]
#[command(name = "conformance", about = "Chime's protocol conformance worker")]
struct Args {
    #[command(flatten)]
    nats: NatsConnection,
    /// The group it serves.
    #[arg(long, env = "CHIME_GROUP", default_value = "default")]
    group: String,
    /// Its id (default: generated from the host and process).
    #[arg(long, env = "CHIME_WORKER_ID")]
    worker_id: Option<String>,
    /// Subject prefix of the installation.
    #[arg(long, env = "CHIME_SUBJECT_PREFIX", default_value = "chime")]
    subject_prefix: String,
    /// Firings it runs at once.
    #[arg(long, env = "CHIME_THREADS", default_value_t = 2)]
    threads: usize,
    /// On SIGTERM, seconds running firings may finish before they are cancelled.
    #[arg(long, default_value_t = 30.0)]
    drain_grace: f64,
    /// Seconds between fetches while idle and no doorbell rings (the
    /// fallback wake-up).
    #[arg(long, default_value_t = 1.0)]
    poll_interval: f64,
    /// Exit after this many firings ran (0: run until signalled).
    #[arg(long, default_value_t = 0)]
    count: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    chime_runtime::logging::init(false);
    if !(args.drain_grace.is_finite() && (0.0..=3600.0).contains(&args.drain_grace)) {
        eprintln!("conformance: --drain-grace must be 0–3600 seconds");
        return ExitCode::from(2);
    }
    if !(args.poll_interval.is_finite() && (0.001..=3600.0).contains(&args.poll_interval)) {
        eprintln!("conformance: --poll-interval must be 0.001–3600 seconds");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("conformance: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mut config = WorkerConfig {
        group: args.group.clone(),
        threads: args.threads,
        drain_grace: Duration::from_secs_f64(args.drain_grace),
        poll_interval: Duration::from_secs_f64(args.poll_interval),
        ..WorkerConfig::default()
    };
    if let Some(id) = &args.worker_id {
        config.worker_id = id.clone();
    }
    let client = args
        .nats
        .connect("chime conformance worker", Duration::ZERO)
        .await?;
    let ran = Arc::new(AtomicU64::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let counted = |ran: &Arc<AtomicU64>, done: &Arc<tokio::sync::Notify>, count: u64| {
        if ran.fetch_add(1, Ordering::SeqCst) + 1 == count {
            done.notify_one();
        }
    };
    let mut builder = Worker::builder()
        .nats(client.clone())
        .config(config)
        .subjects(Subjects::new(args.subject_prefix.clone()));
    for (name, handler) in HANDLERS {
        let (ran, done, count) = (ran.clone(), done.clone(), args.count);
        builder = builder.handler_fn(*name, move |ctx| {
            let (ran, done) = (ran.clone(), done.clone());
            async move {
                let result = handler(ctx).await;
                counted(&ran, &done, count);
                result
            }
        });
    }
    let handle = builder.build()?.start().await?;
    println!("conformance worker ready {}", handle.id());
    std::io::stdout().flush()?;

    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
        _ = done.notified(), if args.count > 0 => {}
    }
    let report = handle.shutdown().await;
    client.drain().await.ok();
    anyhow::ensure!(
        report.unsent_events == 0,
        "{} finished event(s) could not be published before exit",
        report.unsent_events
    );
    Ok(())
}

type Run = fn(FiringContext) -> futures::future::BoxFuture<'static, HandlerResult>;

/// The handlers every conformance worker offers, by name.
const HANDLERS: &[(&str, Run)] = &[
    ("echo", |ctx| Box::pin(echo(ctx))),
    ("sleep", |ctx| Box::pin(sleep(ctx))),
    ("fail", |ctx| Box::pin(fail(ctx))),
    ("shard", |ctx| Box::pin(shard(ctx))),
    ("env", |ctx| Box::pin(env(ctx))),
];

async fn echo(ctx: FiringContext) -> HandlerResult {
    let payload = &ctx.firing.payload;
    Ok(Some(match payload.get("text").and_then(|t| t.as_str()) {
        Some(text) => text.to_owned(),
        None => payload.to_string(),
    }))
}

async fn sleep(ctx: FiringContext) -> HandlerResult {
    let seconds = ctx.firing.payload["seconds"].as_f64().unwrap_or(0.0);
    if !(seconds.is_finite() && (0.0..=86_400.0).contains(&seconds)) {
        return Err(HandlerError::new("payload.seconds must be 0–86400"));
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => Ok(Some(format!("slept {seconds}"))),
        _ = ctx.cancel.cancelled() => Err(HandlerError::new("cancelled")),
    }
}

async fn fail(ctx: FiringContext) -> HandlerResult {
    let message = ctx.firing.payload["message"]
        .as_str()
        .unwrap_or("failed on purpose");
    Err(HandlerError::new(message))
}

async fn shard(ctx: FiringContext) -> HandlerResult {
    let (index, count) = ctx.firing.shard.map_or((0, 1), |s| (s.index, s.count));
    Ok(Some(format!("{index}/{count}")))
}

async fn env(ctx: FiringContext) -> HandlerResult {
    let firing = &ctx.firing;
    Ok(Some(
        serde_json::json!({
            "firing_id": firing.firing_id.to_string(),
            "job_id": firing.job_id,
            "attempt": firing.attempt,
            "scheduled_at": firing.scheduled_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        })
        .to_string(),
    ))
}
