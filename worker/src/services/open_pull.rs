//! A pull request held open on a drained band while the fetch loop would
//! otherwise sleep, so that the band's next firing is delivered the moment
//! it is published, without waiting for the doorbell and fetching.
//!
//! - It asks for one message and sets one thread aside for it
//!   ([`Reserved`]): nothing is delivered that cannot start now, and a burst
//!   costs the other bands at most that one thread each.
//! - It lasts `expires` (at most the poll interval), which also picks up
//!   redeliveries the way the idle poll does. The server ends it with a
//!   timeout status; if that status is lost (a reconnect drops the server's
//!   side of the request) the loop gives up on it a margin later.
//! - Closing one early unsubscribes its inbox, and the server does not
//!   deliver to a request nobody listens to; a message already received is
//!   handed back.
//! - The delivered message says how many more the band holds, so the loop
//!   fetches the rest of a burst at once instead of one per request.

use crate::slots::{Reserved, Slot};
use async_nats::jetstream::consumer::pull::Batch;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use futures::{FutureExt, StreamExt};
use std::time::Duration;
use tokio::time::Instant;

/// How long after its `expires` a request whose timeout status never came
/// is given up on.
const LOST_STATUS_MARGIN: Duration = Duration::from_millis(250);

/// One open pull request and the thread set aside for its message.
pub(crate) struct OpenPull {
    batch: Batch,
    /// Until its message takes it.
    reserved: Option<Reserved>,
    give_up_at: Instant,
}

/// How an open pull request ended.
pub(crate) enum Ended {
    /// A firing, with the thread it runs on, and whether the band holds more.
    Delivered {
        message: Box<jetstream::Message>,
        slot: Slot,
        more: bool,
    },
    /// Its `expires` passed (or its status was lost) with nothing delivered.
    Expired,
    /// The server refused or ended it with an error.
    Failed(String),
}

impl OpenPull {
    /// Sends a request for one message on `consumer`, lasting `expires`.
    pub(crate) async fn open(
        consumer: &PullConsumer,
        reserved: Reserved,
        expires: Duration,
    ) -> Result<OpenPull, String> {
        let batch = consumer
            .batch()
            .max_messages(1)
            .expires(expires)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        Ok(OpenPull {
            batch,
            reserved: Some(reserved),
            give_up_at: Instant::now() + expires + LOST_STATUS_MARGIN,
        })
    }

    /// Waits for the request to end.
    pub(crate) async fn ended(&mut self) -> Ended {
        let next = tokio::time::timeout_at(self.give_up_at, self.batch.next()).await;
        match next {
            Ok(Some(Ok(message))) => match self.reserved.take() {
                Some(reserved) => Ended::Delivered {
                    more: message.info().is_ok_and(|info| info.pending > 0),
                    message: Box::new(message),
                    slot: reserved.into_slot(),
                },
                // A one-message request ends after its message; never hold one unstarted.
                None => {
                    hand_back(message).await;
                    Ended::Failed("a second message on a one-message request".to_string())
                }
            },
            Ok(Some(Err(error))) => Ended::Failed(error.to_string()),
            Ok(None) | Err(_) => Ended::Expired,
        }
    }

    /// Closes the request early: its inbox is unsubscribed, and a message
    /// that had already arrived is handed back for another worker.
    pub(crate) async fn close(mut self) {
        if let Some(Some(Ok(message))) = self.batch.next().now_or_never() {
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
