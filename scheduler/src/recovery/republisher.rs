//! The republisher: no published firing waits for good on a message that
//! is gone.
//!
//! A firing is `published` once JetStream acknowledged its message, and a
//! worker starts it from that message. The message can leave `CHIME_FIRE`
//! without a start: a worker acked or terminated it after a refusal of its
//! own making, a forged message took the firing's `Nats-Msg-Id` first (the
//! real publish was then acknowledged as a duplicate of it), or the stream
//! lost it. Nothing else would ever publish the firing again.
//!
//! Each pass reads the published firings no worker started within `after`
//! and looks their message up by the stream sequence its publish ack named
//! (stored with the firing by the publish mark). A message still there, and
//! still this firing's, waits for a worker: nothing to do but, past
//! `not_started_after`, a `not_started` alert that names the likely cause:
//! no live worker of the group, none that offers the firing's handler (by
//! the handlers their heartbeats list), or live ones that did not take it.
//! A message gone, or replaced by another with the
//! same id, is published again under the message id `<firing id>~r<n>`,
//! which no earlier copy used, so the duplicate window cannot drop it. The
//! store still decides every start: a copy of a firing that did start is
//! refused like any second delivery, and a copy never runs twice. After
//! `max_republishes` copies the firing ends `failed` with the reason, and a
//! `firing_failed` alert says so.
//!
//! One replica runs it at a time (a lease, as the expiry monitor).

use crate::firing::message::{copy_message_id, firing_headers, whereabouts, Cause, Whereabouts};
use crate::nats::Nats;
use crate::ops::alerts::Alerts;
use crate::ops::metrics::Metrics;
use crate::pass::check_pass;
use crate::store::{PublishedFiring, Store, StoreError};
use crate::workers::registry::{Registry, Unoffered};
use async_nats::jetstream::{self, kv, message::PublishMessage};
use chime_common::headers;
use chime_common::protocol::{doorbell_body, Alert, AlertKind, WorkerInfo};
use chime_common::{Band, FiringId};
use chime_runtime::service::{Service, ServiceError};
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::time::Duration;

/// Republisher settings.
#[derive(Debug, Clone)]
pub struct RepublisherConfig {
    /// How often to look for published firings no worker started.
    pub interval: Duration,
    /// A published firing no worker started this long after its (latest)
    /// message was published has its message looked up, and is published
    /// again if the message is gone.
    pub after: Duration,
    /// Copies published per firing before it ends `failed`.
    pub max_republishes: u32,
    /// A published firing whose message still waits this long raises a
    /// `not_started` alert.
    pub not_started_after: Duration,
    /// Firings judged per pass.
    pub batch: u32,
    /// The lease that makes one replica the republisher.
    pub lease_ttl: Duration,
}

impl Default for RepublisherConfig {
    fn default() -> Self {
        RepublisherConfig {
            interval: Duration::from_secs(2),
            after: Duration::from_secs(15),
            max_republishes: 3,
            not_started_after: Duration::from_secs(60),
            batch: 500,
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl RepublisherConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.after < Duration::from_secs(1) {
            return Err("--republish-after must be at least 1s".into());
        }
        check_pass(
            "republish",
            self.interval,
            Some(self.batch),
            Some(self.lease_ttl),
        )
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RepublishOutcome {
    /// Firings published again, with why.
    pub republished: Vec<(FiringId, Cause)>,
    /// Firings that ended `failed`: their copies went unstarted too.
    pub failed: Vec<FiringId>,
    /// Firings whose message waits, reported `not_started`.
    pub not_started: Vec<FiringId>,
}

/// A pass could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RepublishError {
    #[error("cannot read or write the store: {0}")]
    Store(#[from] StoreError),
    /// The stream cannot be read now (NATS unreachable, no leader).
    #[error("cannot read the firing stream: {0}")]
    Stream(String),
}

impl ServiceError for RepublishError {
    fn is_retryable(&self) -> bool {
        match self {
            RepublishError::Store(e) => e.is_retryable(),
            RepublishError::Stream(_) => true,
        }
    }
}

/// The republisher.
pub struct Republisher {
    pub config: RepublisherConfig,
    pub store: Store,
    /// The live workers, from their heartbeats (`chime-workers`).
    pub workers: Registry,
    pub nats: Nats,
    pub alerts: Alerts,
    pub metrics: Metrics,
    /// Firings already reported `not_started` (each once).
    reported: std::sync::Mutex<HashSet<FiringId>>,
    /// Where the next pass goes on: the last firing a full pass judged.
    /// A pass that judged fewer than a batch starts over from the oldest.
    cursor: std::sync::Mutex<Option<(DateTime<Utc>, FiringId)>>,
}

impl Republisher {
    /// A republisher over `store`, judging groups by the `workers` bucket.
    pub fn new(
        config: RepublisherConfig,
        store: Store,
        workers: kv::Store,
        nats: Nats,
        alerts: Alerts,
        metrics: Metrics,
    ) -> Self {
        Republisher {
            config,
            store,
            workers: Registry::new(workers),
            nats,
            alerts,
            metrics,
            reported: Default::default(),
            cursor: Default::default(),
        }
    }

    fn jetstream(&self) -> &jetstream::Context {
        &self.nats.jetstream
    }

    /// Where the message of `published` is. Err when the stream cannot
    /// answer now.
    async fn whereabouts(
        &self,
        stream: &jetstream::stream::Stream<()>,
        published: &PublishedFiring,
    ) -> Result<Whereabouts, RepublishError> {
        let Some(seq) = published.stream_seq else {
            return Ok(Whereabouts::Unknown);
        };
        whereabouts(stream, seq, &published.firing)
            .await
            .map_err(RepublishError::Stream)
    }

    /// Publishes copy `n` of `published` under the message id
    /// `<firing id>~r<n>` and waits for its ack; returns the ack's sequence.
    async fn republish(&self, published: &PublishedFiring, n: u32) -> Result<u64, String> {
        let firing = &published.firing;
        let band = Band::of_priority(firing.priority);
        let subjects = &self.nats.subjects;
        let mut h = firing_headers(firing, Utc::now());
        h.insert(headers::NATS_MSG_ID, copy_message_id(&firing.id, n));
        let message = PublishMessage::build()
            .payload(firing.payload.clone())
            .headers(h);
        let ack = self
            .jetstream()
            .send_publish(subjects.fire(&firing.group, band), message)
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        if ack.duplicate {
            // Someone took this copy's id too: the sequence is theirs, and
            // the next pass finds it is not this firing's message.
            tracing::warn!(firing_id = %firing.id, copy = n, "a republished copy was acknowledged as a duplicate");
        }
        // Idle workers wait for the doorbell.
        if let Err(e) = self
            .nats
            .client
            .publish(subjects.ready(&firing.group), doorbell_body([band]).into())
            .await
        {
            tracing::debug!(group = %firing.group, error = %e, "doorbell not sent");
        }
        Ok(ack.sequence)
    }

    /// One pass. Returns what it did, for logs, metrics and tests.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<RepublishOutcome, RepublishError> {
        let mut outcome = RepublishOutcome::default();
        let since = |d: Duration| now - chrono::Duration::from_std(d).unwrap_or_default();
        let (republish_before, alert_before) = (
            since(self.config.after),
            since(self.config.not_started_after),
        );
        let cursor = self
            .cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let candidates = self
            .store
            .published_unstarted_after(
                republish_before.max(alert_before),
                cursor.as_ref(),
                self.config.batch,
            )
            .await?;
        *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) =
            if candidates.len() >= self.config.batch as usize {
                candidates
                    .last()
                    .map(|p| (p.published_at, p.firing.id.clone()))
            } else {
                None
            };
        if candidates.is_empty() {
            return Ok(outcome);
        }
        let stream = self
            .jetstream()
            .get_stream_no_info(self.nats.subjects.fire_stream())
            .await
            .map_err(|e| RepublishError::Stream(e.to_string()))?;
        let mut live: Option<Vec<WorkerInfo>> = None;
        for published in candidates {
            let firing = &published.firing;
            match self.whereabouts(&stream, &published).await? {
                Whereabouts::Gone(cause) if published.published_at < republish_before => {
                    let seq = published.stream_seq.unwrap_or_default();
                    if published.republishes >= self.config.max_republishes {
                        let error = format!(
                            "published {} times and never started: {}",
                            published.republishes + 1,
                            cause.describe(seq)
                        );
                        if let Some(alert) = self
                            .store
                            .fail_unstarted_published(&firing.id, &error, now)
                            .await?
                        {
                            tracing::error!(firing_id = %firing.id, %error, "a published firing never started; failed");
                            self.alerts.publish(&alert).await;
                            outcome.failed.push(firing.id.clone());
                        }
                        continue;
                    }
                    let n = published.republishes + 1;
                    match self.republish(&published, n).await {
                        Ok(new_seq) => {
                            self.store
                                .record_republished(&firing.id, new_seq, Utc::now())
                                .await?;
                            self.metrics
                                .firings_republished
                                .with_label_values(&[firing.group.as_str(), cause.as_str()])
                                .inc();
                            tracing::warn!(
                                firing_id = %firing.id,
                                cause = cause.as_str(),
                                copy = n,
                                stream_seq = new_seq,
                                "published a firing again: {}",
                                cause.describe(seq)
                            );
                            outcome.republished.push((firing.id.clone(), cause));
                        }
                        Err(e) => {
                            // The next pass tries again: nothing was recorded.
                            tracing::warn!(firing_id = %firing.id, error = %e, "cannot publish a firing again; will retry");
                            self.metrics.publish_errors.inc();
                        }
                    }
                }
                Whereabouts::Gone(_) => {}
                Whereabouts::Waiting | Whereabouts::Unknown
                    if published.published_at < alert_before =>
                {
                    let fresh = self
                        .reported
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(firing.id.clone());
                    if !fresh {
                        continue;
                    }
                    if live.is_none() {
                        live = Some(self.workers.live().await.map_err(RepublishError::Stream)?);
                    }
                    let workers = live.as_deref().unwrap_or_default();
                    let alert =
                        not_started_alert(&published, workers, self.config.not_started_after, now);
                    self.alerts.publish(&alert).await;
                    outcome.not_started.push(firing.id.clone());
                }
                Whereabouts::Waiting | Whereabouts::Unknown => {}
            }
        }
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        if reported.len() > 100_000 {
            reported.clear();
        }
        Ok(outcome)
    }
}

/// The `not_started` alert of a firing whose message waits in the stream,
/// naming why it is likely not started, judged from the `live` workers: no
/// live worker of its group, none that offers its handler, or live ones
/// that did not take it.
fn not_started_alert(
    published: &PublishedFiring,
    live: &[WorkerInfo],
    after: Duration,
    now: DateTime<Utc>,
) -> Alert {
    let firing = &published.firing;
    let waits = match published.stream_seq {
        Some(seq) => format!("its message waits in the stream (sequence {seq})"),
        None => "its message's stream sequence is not known".to_string(),
    };
    let cause = match Unoffered::judge(&firing.group, &firing.handler, live) {
        Some(unoffered) => unoffered.describe(&firing.group, &firing.handler),
        None => format!(
            "{} live worker(s) of group {:?} have not taken it (all busy, paused by a limit, or not fetching that band)",
            live.iter().filter(|w| w.group == firing.group).count(),
            firing.group
        ),
    };
    Alert {
        kind: AlertKind::NotStarted,
        job_id: firing.job_id.clone(),
        group: firing.group.clone(),
        firing_id: Some(firing.id.clone()),
        message: format!(
            "firing {} was published to group {:?} and no worker started it within {:?}; {waits}: {cause}",
            firing.id, firing.group, after
        ),
        at: now,
        consecutive_failures: None,
        paused: false,
        lateness_ms: None,
    }
}

impl Service for Republisher {
    type Outcome = RepublishOutcome;
    type Error = RepublishError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<RepublishOutcome, RepublishError> {
        Republisher::run_once(self, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_s_message_id_is_none_of_the_firing_s_other_ids() {
        let id = FiringId::new("nightly", 1_774_661_400_250, 2);
        assert_eq!(copy_message_id(&id, 1), "nightly@1774661400250#2~r1");
        assert_ne!(copy_message_id(&id, 1), copy_message_id(&id, 2));
        assert_ne!(copy_message_id(&id, 3), format!("{id}~3"));
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(RepublisherConfig::default().validate(), Ok(()));
        let quick = RepublisherConfig {
            after: Duration::from_millis(10),
            ..RepublisherConfig::default()
        };
        assert!(quick.validate().unwrap_err().contains("--republish-after"));
    }
}
