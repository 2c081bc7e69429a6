//! What the two yardsticks (`floor.rs`, `transport_floor.rs`) share, so
//! that they differ only in what a firing does: the rate stepping, the
//! windows and their lateness and CPU accounting (the same as Chime's
//! saturation steps), the work-queue streams, and the worker's loop that
//! takes delivered firings in batches with the same number in flight as
//! the other scenarios' workers.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{self, consumer, stream, Message};
use futures::{FutureExt, StreamExt};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::env::{second_after, Env};
use crate::load::Load;
use crate::report::Row;
use crate::steady::{observe_with_metrics, Span};
use crate::Args;

/// Most firings a worker takes in one batch (the scheduler's start batch).
pub const START_BATCH: usize = 500;

/// A yardstick: a firing's least work under one set of assumptions.
pub trait Yardstick {
    /// Its rows' scenario name.
    const SCENARIO: &'static str;
    /// The start of its firing ids (a step's number follows).
    const PREFIX: &'static str;

    /// Starts one step's load; each task ends once its part of the load
    /// is done (the last firing published).
    fn drive(&self, load: Load) -> Vec<JoinHandle<anyhow::Result<()>>>;

    /// Waits until the step's firings have run and gives the window's row.
    fn finish(
        &self,
        env: &Env,
        span: Span,
        load: &Load,
    ) -> impl Future<Output = anyhow::Result<Row>>;
}

/// Runs `yardstick` at each of `--rates` for `--warmup` + `--step` seconds,
/// one row per rate.
pub async fn step_through<Y: Yardstick>(
    env: &Env,
    args: &Args,
    yardstick: &Y,
) -> anyhow::Result<Vec<Row>> {
    let step_ms = ((args.warmup + args.step) * 1000) as i64;
    let mut rows = Vec::new();
    for (k, &rate) in args.rates.iter().enumerate() {
        anyhow::ensure!(rate > 0, "--rates: a rate must be at least 1");
        let start = second_after(Duration::from_secs(3));
        let (w0, w1) = (start + args.warmup as i64 * 1000, start + step_ms);
        let load = Load {
            prefix: format!("{}{k:02}-", Y::PREFIX),
            rate,
            start_ms: start,
            end_ms: w1,
        };
        let window = env.recorder.add_window(w0, w1);
        let tasks = yardstick.drive(load.clone());
        let span = observe_with_metrics(env, window, w0, w1).await;
        for task in tasks {
            task.await.context("a load task")??;
        }
        let row = yardstick.finish(env, span, &load).await?;
        eprintln!(
            "  {rate}/s: {:.0} fired/s, p99 {:.1} ms, lost {}",
            row.firings_per_s, row.p99_ms, row.lost
        );
        rows.push(row);
    }
    Ok(rows)
}

/// A file-storage work-queue stream on `subject` and its one pull consumer
/// with explicit acks.
pub async fn work_queue(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
) -> anyhow::Result<consumer::PullConsumer> {
    work_queue_with(
        js,
        name,
        subject,
        consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        },
    )
    .await
}

/// A file-storage work-queue stream on `subject` and a pull consumer of `config`.
pub async fn work_queue_with(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
    config: consumer::pull::Config,
) -> anyhow::Result<consumer::PullConsumer> {
    let stream = js
        .create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec![subject.to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    Ok(stream.create_consumer(config).await?)
}

/// The last sequence number `stream` gave a message: how many it stored.
pub async fn stored(js: &jetstream::Context, stream: &str) -> anyhow::Result<u64> {
    let mut stream = js.get_stream(stream).await?;
    Ok(stream.info().await?.state.last_sequence)
}

/// The worker's loop: takes delivered messages as they come; those already
/// delivered together (up to [`START_BATCH`]) go to `handle` as one batch,
/// with at most `threads` messages in flight, until `stop`.
pub async fn take_batches<F, Fut>(
    consumer: consumer::PullConsumer,
    stop: CancellationToken,
    threads: Arc<Semaphore>,
    handle: F,
) where
    F: Fn(Vec<Message>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut messages = match consumer.messages().await {
        Ok(messages) => messages,
        Err(e) => return eprintln!("  cannot pull firings: {e}"),
    };
    while let Some(first) = next_message(&mut messages, &stop, "firings").await {
        let mut batch = vec![first];
        while batch.len() < START_BATCH {
            match messages.next().now_or_never() {
                Some(Some(Ok(message))) => batch.push(message),
                _ => break,
            }
        }
        let Ok(permits) = threads.clone().acquire_many_owned(batch.len() as u32).await else {
            return;
        };
        let handling = handle(batch);
        tokio::spawn(async move {
            if let Err(e) = handling.await {
                eprintln!("  starting firings: {e:#}");
            }
            drop(permits);
        });
    }
}

/// The next message of `messages`, or `None` once `stop` is cancelled or
/// the stream ended; a failed pull is reported and skipped (the client
/// pulls again).
pub async fn next_message(
    messages: &mut consumer::pull::Stream,
    stop: &CancellationToken,
    what: &str,
) -> Option<Message> {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            next = messages.next() => match next? {
                Ok(message) => return Some(message),
                Err(e) => eprintln!("  pulling {what}: {e}"),
            },
        }
    }
}

/// As many firings in flight as the other scenarios' workers run together.
pub fn threads(args: &Args) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(
        args.threads.saturating_mul(args.workers.max(1)),
    ))
}
