//! A pull request held open on a drained band while the fetch loop would
//! otherwise sleep, so that the band's next firings are delivered the moment
//! they are published, without waiting for the doorbell and fetching.
//!
//! - It asks for as many messages as it sets threads aside ([`Reserved`]),
//!   at most [`OPEN_PULL_MAX_MESSAGES`]: nothing is delivered that cannot
//!   start now, one request serves a band's trickle of firings instead of
//!   one request per firing, and a burst on one band takes at most that
//!   many threads before the fetch loop serves the bands in order again.
//! - It lasts `expires` (at most the poll interval), which also picks up
//!   redeliveries the way the idle poll does. The server ends it with a
//!   timeout status; if that status is lost (a reconnect drops the server's
//!   side of the request) the loop gives up on it a margin later.
//! - Closing one early unsubscribes its inbox, and the server does not
//!   deliver to a request nobody listens to; messages already received are
//!   handed back.
//! - Each delivered message says how many more the band holds, so the loop
//!   fetches the rest of a burst at once when the request is spent.

use crate::slots::{Reserved, Slot};
use async_nats::jetstream::consumer::pull::Batch;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use futures::{FutureExt, StreamExt};
use std::time::Duration;
use tokio::time::Instant;

/// The most messages one open request asks for.
pub(crate) const OPEN_PULL_MAX_MESSAGES: usize = 16;

/// How long after its `expires` a request whose timeout status never came
/// is given up on.
const LOST_STATUS_MARGIN: Duration = Duration::from_millis(250);

/// One open pull request and the threads set aside for its messages.
pub(crate) struct OpenPull {
    batch: Batch,
    /// One for each message still to come.
    reserved: Vec<Reserved>,
    give_up_at: Instant,
}

/// What an open pull request brought.
pub(crate) enum Event {
    /// A firing, with the thread it runs on, and whether the band holds
    /// more. The request stays open until it is [spent](OpenPull::is_spent).
    Delivered {
        message: Box<jetstream::Message>,
        slot: Slot,
        more: bool,
    },
    /// It ended: its `expires` passed (or its status was lost).
    Expired,
    /// The server refused or ended it with an error.
    Failed(String),
}

impl OpenPull {
    /// Sends a request on `consumer` for one message per thread in
    /// `reserved`, lasting `expires`.
    pub(crate) async fn open(
        consumer: &PullConsumer,
        reserved: Vec<Reserved>,
        expires: Duration,
    ) -> Result<OpenPull, String> {
        let batch = consumer
            .batch()
            .max_messages(reserved.len())
            .expires(expires)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        Ok(OpenPull {
            batch,
            reserved,
            give_up_at: Instant::now() + expires + LOST_STATUS_MARGIN,
        })
    }

    /// Whether every message it asked for has been delivered: the server
    /// holds nothing more of it.
    pub(crate) fn is_spent(&self) -> bool {
        self.reserved.is_empty()
    }

    /// Waits for the request's next message or its end.
    pub(crate) async fn next(&mut self) -> Event {
        let next = tokio::time::timeout_at(self.give_up_at, self.batch.next()).await;
        match next {
            Ok(Some(Ok(message))) => match self.reserved.pop() {
                Some(reserved) => Event::Delivered {
                    more: message.info().is_ok_and(|info| info.pending > 0),
                    message: Box::new(message),
                    slot: reserved.into_slot(),
                },
                // Never hold a message no thread was set aside for.
                None => {
                    hand_back(message).await;
                    Event::Failed("more messages than the request asked for".to_string())
                }
            },
            Ok(Some(Err(error))) => Event::Failed(error.to_string()),
            Ok(None) | Err(_) => Event::Expired,
        }
    }

    /// Closes the request early: its inbox is unsubscribed, and messages
    /// that had already arrived are handed back for another worker.
    pub(crate) async fn close(mut self) {
        while let Some(Some(Ok(message))) = self.batch.next().now_or_never() {
            hand_back(message).await;
        }
    }
}

/// Gives a message back to the band at once, for another worker.
async fn hand_back(message: jetstream::Message) {
    if let Err(error) = message.ack_with(AckKind::Nak(None)).await {
        tracing::warn!(%error, "cannot hand back a firing; it comes back after its ack wait");
    }
}
