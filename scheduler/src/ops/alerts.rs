//! Alerts: what an operator must hear of, published on `chime.alerts`
//! (stream `CHIME_ALERTS`) and counted in `chime_alerts_total{kind}`.
//!
//! Publishing is best effort: an alert about a firing is also in its
//! history, and one about a dead letter in the dead-letter stream.

use crate::ops::metrics::Metrics;
use async_nats::jetstream;
use chime_common::protocol::Alert;
use chime_common::Subjects;

/// Where a replica's services send their alerts.
#[derive(Clone)]
pub struct Alerts {
    jetstream: jetstream::Context,
    subjects: Subjects,
    metrics: Metrics,
}

impl Alerts {
    pub fn new(jetstream: jetstream::Context, subjects: Subjects, metrics: Metrics) -> Self {
        Alerts {
            jetstream,
            subjects,
            metrics,
        }
    }

    /// Publishes `alert` and counts it.
    pub async fn publish(&self, alert: &Alert) {
        publish(&self.jetstream, &self.subjects, &self.metrics, alert).await;
    }
}

/// Publishes an alert on `chime.alerts` and counts it (best effort: an alert
/// about a firing is also in its history, a dead letter in its stream).
pub(crate) async fn publish(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    metrics: &Metrics,
    alert: &Alert,
) {
    metrics
        .alerts
        .with_label_values(&[alert.kind.as_str()])
        .inc();
    tracing::warn!(kind = alert.kind.as_str(), job_id = %alert.job_id, message = %alert.message, "alert");
    if let Ok(body) = serde_json::to_vec(alert) {
        match jetstream.publish(subjects.alerts(), body.into()).await {
            Ok(ack) => {
                let _ = ack.await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot publish alert"),
        }
    }
}
