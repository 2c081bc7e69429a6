//! A publish JetStream acknowledged as a duplicate is checked against the
//! stream before it counts as published.
//!
//! A duplicate ack says only that the duplicate window holds the message
//! id, with the sequence the server recorded for it. In a three-node
//! cluster that is not proof: while a stream leader is elected, publishes
//! of one firing by two replicas (a slice taken over while its owner still
//! publishes, or a retry after `409 duplicate message id is in process`)
//! can be answered as duplicates of a proposal that never reached the
//! stream, and a message with the firing's id published by someone else
//! makes the real one a duplicate of a message that is not the firing's.
//! Retrying under the same id is answered the same way for the whole
//! window, and a takeover republishes under the same id too, so nothing
//! else would ever publish the firing.
//!
//! So each duplicate ack is read back by its sequence. The firing's own
//! message there (its `Chime-Firing-Id` and staged payload) is proof. No
//! message, or another one, while the store still has the firing waiting
//! (a firing whose message was consumed has started, or was refused, before
//! the worker acked it) is published once more at once under
//! `<firing id>~v`, an id its earlier publishes never used, and that
//! copy's ack is what the publish mark records. A started firing needs
//! nothing. Duplicates are rare (retries and takeovers), so a read each is cheap.

use crate::firing::message::{firing_headers, whereabouts, Acked, Cause, Whereabouts};
use crate::ops::metrics::Metrics;
use crate::store::{StagedFiring, Store};
use async_nats::jetstream::{self, message::PublishMessage};
use chime_common::headers;
use chime_common::protocol::doorbell_body;
use chime_common::{Band, Subjects};
use chrono::Utc;
use tokio::sync::mpsc;

/// A firing whose publish was acknowledged as a duplicate of `stream_seq`.
pub(crate) struct Duplicate {
    pub firing: StagedFiring,
    pub stream_seq: u64,
}

/// Checks duplicate acks, one at a time, and hands each firing on to the
/// publish mark with the sequence that holds its message.
pub(crate) struct DuplicateCheck {
    pub jetstream: jetstream::Context,
    pub nats: async_nats::Client,
    pub subjects: Subjects,
    pub store: Store,
    pub metrics: Metrics,
    pub marks: mpsc::UnboundedSender<Acked>,
}

/// The message id of the copy published when a duplicate ack was not
/// backed by the firing's message.
pub fn verified_message_id(firing: &StagedFiring) -> String {
    format!("{}~v", firing.id)
}

impl DuplicateCheck {
    pub(crate) async fn run(self, mut duplicates: mpsc::UnboundedReceiver<Duplicate>) {
        while let Some(duplicate) = duplicates.recv().await {
            if let Some(stream_seq) = self.check(&duplicate).await {
                let _ = self.marks.send(Acked {
                    id: duplicate.firing.id.clone(),
                    stream_seq,
                    at: Utc::now(),
                });
            }
        }
    }

    /// The sequence to record for the firing, or `None` when it needs no
    /// mark (it started meanwhile).
    async fn check(&self, duplicate: &Duplicate) -> Option<u64> {
        let firing = &duplicate.firing;
        let cause = match self.where_is(duplicate).await {
            Ok(Whereabouts::Waiting) => return Some(duplicate.stream_seq),
            Ok(Whereabouts::Gone(cause)) => cause,
            Ok(Whereabouts::Unknown) | Err(_) => {
                // Not known now: recorded as acknowledged; the republisher
                // looks again after its bound.
                return Some(duplicate.stream_seq);
            }
        };
        match self.store.awaits_start(&firing.id).await {
            Ok(false) => return None,
            Ok(true) => {}
            Err(e) => {
                tracing::debug!(firing_id = %firing.id, error = %e, "cannot tell whether a duplicate's firing started; publishing a copy");
            }
        }
        match self.publish_copy(firing).await {
            Ok(stream_seq) => {
                self.metrics
                    .firings_republished
                    .with_label_values(&[firing.group.as_str(), Cause::DuplicateAck.as_str()])
                    .inc();
                tracing::warn!(
                    firing_id = %firing.id,
                    duplicate_of = duplicate.stream_seq,
                    stream_seq,
                    "a publish was acknowledged as a duplicate but {}; published a copy",
                    cause.describe(duplicate.stream_seq)
                );
                Some(stream_seq)
            }
            Err(e) => {
                tracing::warn!(firing_id = %firing.id, error = %e, "a publish was acknowledged as a duplicate of a message not in the stream, and a copy cannot be published; the republisher will");
                Some(duplicate.stream_seq)
            }
        }
    }

    async fn where_is(&self, duplicate: &Duplicate) -> Result<Whereabouts, String> {
        if duplicate.stream_seq == 0 {
            // A duplicate of a proposal that was never stored.
            return Ok(Whereabouts::Gone(Cause::MessageGone));
        }
        let stream = self
            .jetstream
            .get_stream_no_info(self.subjects.fire_stream())
            .await
            .map_err(|e| e.to_string())?;
        whereabouts(&stream, duplicate.stream_seq, &duplicate.firing).await
    }

    async fn publish_copy(&self, firing: &StagedFiring) -> Result<u64, String> {
        let band = Band::of_priority(firing.priority);
        let mut h = firing_headers(firing, Utc::now());
        h.insert(headers::NATS_MSG_ID, verified_message_id(firing));
        let message = PublishMessage::build()
            .payload(firing.payload.clone())
            .headers(h);
        let ack = self
            .jetstream
            .send_publish(self.subjects.fire(&firing.group, band), message)
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        let _ = self
            .nats
            .publish(
                self.subjects.ready(&firing.group),
                doorbell_body([band]).into(),
            )
            .await;
        Ok(ack.sequence)
    }
}
