//! Finding Chime's NATS objects. Only schedulers create and update streams,
//! buckets and consumers (one owner, one set of settings, reconciled in one
//! place); a worker looks them up with get-only calls and, while one is
//! missing, waits for a scheduler to create it.
//!
//! A scheduler creates a group's three consumers when it has jobs of the
//! group or sees a heartbeat of a worker of the group in `chime-workers`, so
//! a worker writes its first heartbeat before it waits for its consumers.

use crate::status::WorkerStatus;
use async_nats::jetstream::{self, consumer, kv, stream};
use chime_common::{Band, Subjects};
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// First pause between two looks.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// Longest pause between two looks.
const MAX_RETRY: Duration = Duration::from_secs(5);
/// How often a wait that goes on is logged again.
const LOG_EVERY: Duration = Duration::from_secs(30);
/// A wait shorter than this is part of a normal start (a scheduler creates
/// a new group's consumers within seconds of the worker's first heartbeat)
/// and logged as info; a longer one says something is wrong (no scheduler,
/// another subject prefix) and is logged as a warning.
const WARN_AFTER: Duration = Duration::from_secs(15);

/// Calls `find` until it succeeds, pausing with bounded exponential backoff
/// (100 ms doubling to 5 s) and logging what it waits for. `status` says what
/// it waits for meanwhile. Cancel it by dropping the future.
pub(crate) async fn wait_for<T, E, F, Fut>(status: &WorkerStatus, what: &str, mut find: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let began = Instant::now();
    let mut delay = FIRST_RETRY;
    let mut logged: Option<Instant> = None;
    let mut warned = false;
    loop {
        match find().await {
            Ok(found) => {
                if logged.is_some() {
                    tracing::info!(waited = ?began.elapsed(), "found {what}");
                }
                status.set_waiting_for(None);
                return found;
            }
            Err(error) => {
                status.set_waiting_for(Some(what.to_string()));
                let waited = began.elapsed();
                let late = waited >= WARN_AFTER;
                if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) || (late && !warned) {
                    logged = Some(Instant::now());
                    if late {
                        warned = true;
                        tracing::warn!(?waited, %error, "still waiting for {what}: is a scheduler running, with the same --subject-prefix?");
                    } else {
                        tracing::info!(?waited, %error, "waiting for {what}");
                    }
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY);
    }
}

/// What a scheduler is asked to create, as logged and shown by `/readyz`.
pub(crate) fn awaited(kind: &str, name: &str) -> String {
    format!("a scheduler to create {kind} {name}")
}

/// The KV bucket `name`, if it exists.
pub(crate) async fn find_bucket(
    jetstream: &jetstream::Context,
    name: &str,
) -> Result<kv::Store, jetstream::context::KeyValueError> {
    jetstream.get_key_value(name).await
}

/// The stream `name`, if it exists.
pub(crate) async fn find_stream(
    jetstream: &jetstream::Context,
    name: &str,
) -> Result<stream::Stream, jetstream::context::GetStreamError> {
    jetstream.get_stream(name).await
}

/// The firing consumer of `group` and `band`, if it exists.
pub(crate) async fn find_fire_consumer(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    group: &str,
    band: Band,
) -> Result<consumer::PullConsumer, String> {
    let stream = find_stream(jetstream, &subjects.fire_stream())
        .await
        .map_err(|e| format!("stream {}: {e}", subjects.fire_stream()))?;
    let name = subjects.fire_consumer(group, band);
    stream
        .get_consumer::<consumer::pull::Config>(&name)
        .await
        .map_err(|e| format!("consumer {name}: {e}"))
}
