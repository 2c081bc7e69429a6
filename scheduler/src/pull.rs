//! Pulling from the scheduler's own durable consumers (submissions and
//! finished events), and why a pull ends.
//!
//! One continuous pull keeps messages flowing while the last ones are
//! handled, at most `batch` asked at a time, so a quiet system handles a
//! message at once and a busy one in large batches. A pull that fails ends
//! its service's run with a [`PullError`]; the supervisor opens the
//! consumer again after a backoff.

use async_nats::jetstream::consumer::pull::{MessagesError, Stream};
use async_nats::jetstream::consumer::{PullConsumer, StreamError};
use std::time::Duration;

/// Why a pull ended.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("cannot start pulling: {0}")]
    Open(#[from] StreamError),
    #[error("pulling failed: {0}")]
    Messages(#[from] MessagesError),
}

/// Opens a continuous pull of `consumer`: at most `batch` messages asked at
/// a time, each request waiting at most `wait` on the server.
pub async fn open(
    consumer: &PullConsumer,
    batch: usize,
    wait: Duration,
) -> Result<Stream, PullError> {
    Ok(consumer
        .stream()
        .max_messages_per_batch(batch)
        .expires(wait)
        .messages()
        .await?)
}
