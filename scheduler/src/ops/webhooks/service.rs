//! The alert webhook service of one replica: for each URL, alerts pulled
//! from that URL's durable consumer on `CHIME_ALERTS`, delivered
//! (`delivery.rs`) and acknowledged once delivered or dead-lettered.
//!
//! Every replica configured with a URL pulls from the same consumer, so
//! JetStream hands each alert to one of them, whichever replica raised it.
//! A replica asks for at most `concurrency` alerts at a time per URL and
//! handles each as it arrives, so none waits unacknowledged behind others;
//! while one is being tried it tells JetStream it is in progress, so the
//! ack wait does not hand it to another replica. An alert whose replica
//! stopped before the end comes back to another after the ack wait (or at
//! once, on a clean shutdown); one that came back `max_deliveries` times is
//! dead-lettered without another POST, so no alert is tried forever.
//!
//! A delivery given up on goes to `chime.dead.webhook` (body unchanged,
//! `Chime-Error` naming the URL's label and the last failure), counts in
//! `chime_alert_webhook_failures_total{url}` and
//! `chime_dead_letters_total{kind="webhook"}`, and is logged. It raises no
//! alert: that alert would go to the same failing URL.

use super::delivery::{Delivery, DeliveryConfig, Poster};
use super::target::WebhookTarget;
use crate::ops::dead_letter::{deliveries, DeadLetter, DeadLetterKind};
use crate::ops::metrics::Metrics;
use async_nats::jetstream::{self, AckKind};
use chime_common::{ApiError, Subjects};
use chime_runtime::secret::Secret;
use chime_runtime::signal::TestSignal;
use chime_runtime::topology::{Topology, TopologyError};
use futures::TryStreamExt as _;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Alert webhook settings.
#[derive(Debug, Clone)]
pub struct AlertWebhooksConfig {
    /// The URLs (`--alert-webhook`); none: the service does not run.
    pub targets: Vec<WebhookTarget>,
    /// The signing key (`--alert-webhook-secret-file`).
    pub secret: Option<Secret>,
    /// How each alert is tried.
    pub delivery: DeliveryConfig,
    /// Alerts a replica handles at once per URL.
    pub concurrency: usize,
    /// How long JetStream waits for word on an alert before handing it to
    /// another replica (renewed every third of it while one is tried).
    pub ack_wait: Duration,
    /// The delivery of an alert (by JetStream, to a replica) on which it is
    /// dead-lettered without a POST: the replicas before stopped mid-way.
    pub max_deliveries: u32,
}

impl Default for AlertWebhooksConfig {
    fn default() -> Self {
        AlertWebhooksConfig {
            targets: Vec::new(),
            secret: None,
            delivery: DeliveryConfig::default(),
            concurrency: 8,
            ack_wait: Duration::from_secs(30),
            max_deliveries: 5,
        }
    }
}

impl AlertWebhooksConfig {
    /// Checks the settings; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.targets.is_empty() && self.secret.is_some() {
            return Err("--alert-webhook-secret-file needs --alert-webhook".into());
        }
        self.delivery.validate()?;
        if self.concurrency == 0 || self.max_deliveries == 0 {
            return Err("alert webhook concurrency and deliveries must be above zero".into());
        }
        if self.ack_wait < Duration::from_secs(3) {
            return Err("the alert webhook ack wait must be at least 3s".into());
        }
        Ok(())
    }
}

/// How one alert ended for one URL on this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookResult {
    /// Answered with a 2xx, at try `tries`.
    Delivered { tries: u32 },
    /// Given up on after `tries` POSTs and moved to `chime.dead.webhook`.
    DeadLettered { tries: u32 },
    /// Handed back to JetStream (shutdown, or the dead letter could not be
    /// stored): another replica, or this one, takes it again.
    Returned,
}

/// What the service reports for each alert (tests wait on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookReport {
    /// The URL's label.
    pub url: String,
    /// The alert's `CHIME_ALERTS` sequence (`X-Chime-Alert-Id`).
    pub alert_id: u64,
    pub result: WebhookResult,
}

/// A run of the service ended; the supervisor starts it again.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Consumer(#[from] TopologyError),
    #[error("pulling alerts for {url} failed: {reason}")]
    Pull { url: String, reason: String },
}

/// How long one request for alerts waits on the server.
const FETCH_WAIT: Duration = Duration::from_secs(5);

/// The webhook deliveries of one replica. Cheap to clone.
#[derive(Clone)]
pub struct AlertWebhooks {
    config: AlertWebhooksConfig,
    topology: Topology,
    jetstream: jetstream::Context,
    subjects: Subjects,
    metrics: Metrics,
    poster: Poster,
    reports: TestSignal<WebhookReport>,
}

impl AlertWebhooks {
    /// The service for `config`'s URLs, their series started at zero.
    pub fn new(
        config: AlertWebhooksConfig,
        topology: Topology,
        metrics: Metrics,
        reports: TestSignal<WebhookReport>,
    ) -> Result<AlertWebhooks, String> {
        let poster = Poster::new(config.secret.clone())
            .map_err(|e| format!("cannot make the alert webhook HTTP client: {e}"))?;
        for target in &config.targets {
            metrics.start_webhook_at_zero(target.label());
        }
        Ok(AlertWebhooks {
            jetstream: topology.jetstream.clone(),
            subjects: topology.subjects.clone(),
            config,
            topology,
            metrics,
            poster,
            reports,
        })
    }

    /// Serves every URL until `shutdown`; an error ends them all, for the
    /// supervisor to start again.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let serving = self
            .config
            .targets
            .iter()
            .map(|target| self.serve(target, &shutdown));
        futures::future::try_join_all(serving).await?;
        Ok(())
    }

    /// Pulls and delivers `target`'s alerts until `shutdown`.
    async fn serve(
        &self,
        target: &WebhookTarget,
        shutdown: &CancellationToken,
    ) -> Result<(), WebhookError> {
        let consumer = self
            .topology
            .alert_consumer(target.consumer(), self.config.ack_wait)
            .await?;
        let failed = |e: &dyn std::fmt::Display| WebhookError::Pull {
            url: target.label().to_string(),
            reason: e.to_string(),
        };
        while !shutdown.is_cancelled() {
            let batch = tokio::select! {
                batch = consumer
                    .fetch()
                    .max_messages(self.config.concurrency)
                    .expires(FETCH_WAIT)
                    .messages() => batch.map_err(|e| failed(&e))?,
                _ = shutdown.cancelled() => break,
            };
            batch
                .map_err(|e| failed(&e))
                .try_for_each_concurrent(self.config.concurrency, |message| async move {
                    self.handle(target, &message, shutdown).await;
                    Ok(())
                })
                .await?;
        }
        Ok(())
    }

    /// Delivers one alert to `target` and settles it with JetStream.
    async fn handle(
        &self,
        target: &WebhookTarget,
        message: &jetstream::Message,
        shutdown: &CancellationToken,
    ) {
        let info = message.info().ok();
        let alert_id = info.as_ref().map_or(0, |i| i.stream_sequence);
        let source = info
            .as_ref()
            .map(|i| format!("{}:{}:{}", i.stream, i.stream_sequence, target.consumer()));
        let delivered = deliveries(message).unwrap_or(1);
        let delivery = if delivered > u64::from(self.config.max_deliveries) {
            Delivery::GaveUp {
                tries: 0,
                elapsed: Duration::ZERO,
                reason: format!(
                    "handed to a replica {delivered} times and never settled (the replicas \
                     stopped while trying it)"
                ),
            }
        } else if !is_json_object(&message.payload) {
            Delivery::GaveUp {
                tries: 0,
                elapsed: Duration::ZERO,
                reason: "not a JSON object, so not an alert: not sent".into(),
            }
        } else {
            self.deliver(target, message, alert_id, shutdown).await
        };
        let result = match delivery {
            Delivery::Delivered { tries } => {
                self.metrics
                    .alert_webhook_deliveries
                    .with_label_values(&[target.label()])
                    .inc();
                settle(message, AckKind::Ack).await;
                WebhookResult::Delivered { tries }
            }
            Delivery::GaveUp {
                tries,
                elapsed,
                reason,
            } => {
                let error = ApiError::unavailable(format!(
                    "alert {alert_id} was not delivered to {} after {tries} tries in {:.1}s: \
                     {reason}",
                    target.label(),
                    elapsed.as_secs_f64()
                ));
                self.dead_letter(target, message, error, tries, source)
                    .await
            }
            Delivery::Interrupted { .. } => {
                settle(message, AckKind::Nak(None)).await;
                WebhookResult::Returned
            }
        };
        self.reports.emit(|| WebhookReport {
            url: target.label().to_string(),
            alert_id,
            result,
        });
    }

    /// Tries the alert, telling JetStream it is in progress meanwhile.
    async fn deliver(
        &self,
        target: &WebhookTarget,
        message: &jetstream::Message,
        alert_id: u64,
        shutdown: &CancellationToken,
    ) -> Delivery {
        let retries = self
            .metrics
            .alert_webhook_retries
            .with_label_values(&[target.label()]);
        let id = alert_id.to_string();
        let delivery = self.poster.deliver(
            target,
            &message.payload,
            &id,
            &self.config.delivery,
            shutdown,
            || retries.inc(),
        );
        tokio::pin!(delivery);
        let mut progress = tokio::time::interval(self.config.ack_wait / 3);
        progress.tick().await;
        loop {
            tokio::select! {
                delivered = &mut delivery => return delivered,
                _ = progress.tick() => {
                    let _ = message.ack_with(AckKind::Progress).await;
                }
            }
        }
    }

    /// Moves the alert to `chime.dead.webhook` and acks it; if the dead
    /// letter cannot be stored, hands the alert back to be tried again.
    async fn dead_letter(
        &self,
        target: &WebhookTarget,
        message: &jetstream::Message,
        error: ApiError,
        tries: u32,
        source: Option<String>,
    ) -> WebhookResult {
        tracing::error!(
            webhook = target.label(),
            tries,
            error = %error.message,
            "alert webhook gave up on an alert"
        );
        let letter = DeadLetter {
            kind: DeadLetterKind::Webhook,
            subject: message.subject.to_string(),
            body: message.payload.clone(),
            error,
            deliveries: u64::from(tries),
            source,
        };
        if !letter
            .store(&self.jetstream, &self.subjects, &self.metrics)
            .await
        {
            settle(message, AckKind::Nak(Some(Duration::from_secs(1)))).await;
            return WebhookResult::Returned;
        }
        self.metrics
            .alert_webhook_failures
            .with_label_values(&[target.label()])
            .inc();
        settle(message, AckKind::Ack).await;
        WebhookResult::DeadLettered { tries }
    }
}

/// Whether `body` is a JSON object, as every alert is. Its fields are not
/// checked: an alert of a kind a newer release raises is sent all the same.
fn is_json_object(body: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<serde_json::Value>(body),
        Ok(serde_json::Value::Object(_))
    )
}

/// Acks (waiting for the server's word, so a delivered alert is not handed
/// out again) or naks `message`.
async fn settle(message: &jetstream::Message, kind: AckKind) {
    let settled = match kind {
        AckKind::Ack => message.double_ack().await,
        kind => message.ack_with(kind).await,
    };
    if let Err(e) = settled {
        tracing::warn!(error = %e, "cannot settle an alert with JetStream; it may be delivered again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_objects_are_sent_whatever_their_fields() {
        assert!(is_json_object(br#"{"kind": "a_kind_of_a_newer_release"}"#));
        assert!(!is_json_object(b"[1, 2]"));
        assert!(!is_json_object(b"not json"));
        assert!(!is_json_object(&[0xff, 0xfe]));
    }

    #[test]
    fn a_secret_without_a_webhook_is_refused() {
        let config = AlertWebhooksConfig {
            secret: Some(Secret::new("s")),
            ..AlertWebhooksConfig::default()
        };
        assert_eq!(
            config.validate().unwrap_err(),
            "--alert-webhook-secret-file needs --alert-webhook"
        );
        assert!(AlertWebhooksConfig::default().validate().is_ok());
    }
}
