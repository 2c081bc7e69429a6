//! `chime-worker`: a generic Chime worker with the built-in `http` and (opt-in) `shell` handlers.

use anyhow::{Context, Result};
use chime_common::Subjects;
use chime_worker::cli::{Args, LogFormat};
use chime_worker::handlers::{HttpHandler, NotAllowed, ShellHandler};
use chime_worker::{admin, Worker};
use clap::Parser;
use std::process::ExitCode;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// As in `chime-scheduler`: glibc's allocator cost the scheduler about a third
/// of its CPU in a burst, and a worker allocates per firing the same way.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    chime_runtime::logging::init(args.log_format == LogFormat::Json);
    if let Err(message) = args.validate() {
        eprintln!("chime-worker: {message}");
        return ExitCode::from(2);
    }
    // Before the runtime starts its threads: see hardening.rs.
    if let Err(error) = chime_worker::hardening::protect_secrets() {
        eprintln!("chime-worker: cannot protect its credentials from jobs: {error}");
        return ExitCode::FAILURE;
    }
    let export = match chime_runtime::traces::init("chime-worker") {
        Ok(export) => export,
        Err(message) => {
            eprintln!("chime-worker: {message}");
            return ExitCode::from(2);
        }
    };
    if export.is_some() {
        tracing::info!("exporting spans over OTLP");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("chime-worker: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("chime-worker failed: {error:#}");
            ExitCode::FAILURE
        }
    };
    // The last spans, sent before exit.
    if let Some(export) = export {
        export.shutdown();
    }
    code
}

async fn run(args: Args) -> Result<()> {
    let config = args.worker_config();
    let threads = config.threads;
    let client = args
        .nats
        .connect(
            &format!("chime-worker {}", config.worker_id),
            args.nats_connect_wait,
        )
        .await?;
    let mut builder = Worker::builder()
        .nats(client.clone())
        .config(config)
        .subjects(Subjects::new(args.subject_prefix.clone()));
    builder = if args.allows("shell") {
        builder.handler(
            "shell",
            ShellHandler::new(args.allow_shell).inheriting(args.shell_env.iter().map(|n| n.trim())),
        )
    } else {
        builder.handler("shell", NotAllowed::new("shell"))
    };
    builder = if args.allows("http") {
        let http = if args.http_allow_private {
            HttpHandler::allowing_private()
        } else {
            HttpHandler::new()
        };
        builder.handler("http", http.context("cannot set up the http handler")?)
    } else {
        builder.handler("http", NotAllowed::new("http"))
    };
    let worker = builder.build().context("invalid worker settings")?;

    let stop_admin = CancellationToken::new();
    // What the ready line shows: the port bound (`:0` picks one), or `off`.
    let mut metrics_shown = "off".to_string();
    let admin_task = match args.metrics_addr().map_err(anyhow::Error::msg)? {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on --metrics-addr {addr}"))?;
            metrics_shown = listener.local_addr().unwrap_or(addr).to_string();
            let serve = admin::serve(
                listener,
                worker.metrics().clone(),
                client.clone(),
                worker.status(),
                stop_admin.clone(),
            );
            Some(tokio::spawn(async move {
                if let Err(error) = serve.await {
                    tracing::error!(%error, "the metrics endpoint stopped");
                }
            }))
        }
        None => None,
    };

    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    // Start-up waits for a scheduler to create the NATS objects; a signal meanwhile ends it.
    let handle = tokio::select! {
        started = worker.start() => started.context("cannot start the worker")?,
        _ = terminate.recv() => return stop_before_start(stop_admin, admin_task, "SIGTERM").await,
        _ = interrupt.recv() => return stop_before_start(stop_admin, admin_task, "SIGINT").await,
    };
    tracing::info!(
        worker_id = %handle.id(),
        group = %handle.group(),
        threads,
        shell = args.allow_shell,
        metrics = %metrics_shown,
        "chime-worker ready"
    );

    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received"),
        _ = interrupt.recv() => tracing::info!("SIGINT received"),
    }
    let report = handle.shutdown().await;
    stop_admin.cancel();
    if let Some(task) = admin_task {
        let _ = task.await;
    }
    if let Err(error) = client.drain().await {
        tracing::debug!(%error, "draining the NATS connection failed");
    }
    if report.unsent_events > 0 {
        anyhow::bail!(
            "{} finished event(s) could not be published before exit",
            report.unsent_events
        );
    }
    Ok(())
}

/// Exits cleanly on a signal that came while start-up was still waiting.
async fn stop_before_start(
    stop_admin: CancellationToken,
    admin_task: Option<tokio::task::JoinHandle<()>>,
    signal: &str,
) -> Result<()> {
    tracing::info!("{signal} received while starting; exiting");
    stop_admin.cancel();
    if let Some(task) = admin_task {
        let _ = task.await;
    }
    Ok(())
}
