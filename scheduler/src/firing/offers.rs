//! Offers: the firings of broadcast jobs reach their workers as offers,
//! core NATS messages on `chime.offer.<group>.<worker id>`
//! (docs/PROTOCOL.md §4, "Offers"), not through the group's consumers,
//! which any worker of the group pulls from.
//!
//! The publisher sends each addressed firing's first offer at its instant.
//! An offer is not durable and a worker with no free thread drops it, so
//! this pass offers every addressed firing not started yet again, each
//! `interval`; the store's start decision lets it start once. It gives a
//! firing up, ending it `lost` without a retry (its share belongs to its
//! worker alone), when the worker's heartbeat is gone, or when the worker
//! has not taken it `give_up_after` past its due time.
//!
//! Each pass also tells the store who the broadcast firings staged next go
//! to (the live workers that take offers, [`Audiences`]): every replica
//! stages, so every replica runs it, and its first pass runs before the
//! replica's first slice.

use crate::firing::message::firing_headers;
use crate::nats::Nats;
use crate::ops::alerts::Alerts;
use crate::pass::check_pass;
use crate::store::{Audiences, StagedFiring, Store, StoreError};
use crate::workers::registry::Registry;
use chime_common::FiringId;
use chime_runtime::service::{Service, ServiceError};
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::time::Duration;

/// Offers settings.
#[derive(Debug, Clone)]
pub struct OffersConfig {
    /// How often addressed firings not started are offered again.
    pub interval: Duration,
    /// An addressed firing its worker has not started this long after its
    /// due time ends `lost`.
    pub give_up_after: Duration,
    /// Firings offered per pass.
    pub batch: u32,
}

impl Default for OffersConfig {
    fn default() -> Self {
        OffersConfig {
            interval: Duration::from_secs(1),
            give_up_after: Duration::from_secs(60),
            batch: 1_000,
        }
    }
}

impl OffersConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_pass("offers", self.interval, Some(self.batch), None)?;
        if self.give_up_after <= self.interval {
            return Err("the offers give-up time must be longer than their interval".into());
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OffersOutcome {
    /// Live workers that take offers.
    pub audience: usize,
    /// Firings offered again.
    pub offered: Vec<FiringId>,
    /// Firings given up on: ended `lost`.
    pub withdrawn: Vec<FiringId>,
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum OffersError {
    #[error("cannot read or write the store: {0}")]
    Store(#[from] StoreError),
    /// The heartbeat bucket cannot be read now.
    #[error("cannot read the workers' heartbeats: {0}")]
    Workers(String),
}

impl ServiceError for OffersError {
    fn is_retryable(&self) -> bool {
        match self {
            OffersError::Store(e) => e.is_retryable(),
            OffersError::Workers(_) => true,
        }
    }
}

/// Offers addressed firings again, and keeps the store's audiences fresh.
pub struct Offers {
    config: OffersConfig,
    store: Store,
    workers: Registry,
    nats: Nats,
    alerts: Alerts,
}

impl Offers {
    pub fn new(
        config: OffersConfig,
        store: Store,
        workers: Registry,
        nats: Nats,
        alerts: Alerts,
    ) -> Self {
        Offers {
            config,
            store,
            workers,
            nats,
            alerts,
        }
    }

    /// One pass at `now`.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<OffersOutcome, OffersError> {
        let workers = self.workers.recent().await.map_err(OffersError::Workers)?;
        let audiences = Audiences::of(&workers);
        let mut outcome = OffersOutcome {
            audience: workers.iter().filter(|w| w.offers).count(),
            ..OffersOutcome::default()
        };
        self.store.set_audiences(audiences);
        let live: HashSet<(&str, &str)> = workers
            .iter()
            .map(|w| (w.group.as_str(), w.id.as_str()))
            .collect();
        let interval = chrono::Duration::from_std(self.config.interval).unwrap_or_default();
        let give_up = chrono::Duration::from_std(self.config.give_up_after).unwrap_or_default();
        let waiting = self
            .store
            .offered_unstarted(now - interval, self.config.batch)
            .await?;
        for firing in waiting {
            let Some(worker) = firing.worker_id.as_deref() else {
                continue;
            };
            let error = if !live.contains(&(firing.group.as_str(), worker)) {
                format!("worker {worker} is gone")
            } else if now - firing.due_at > give_up {
                format!(
                    "worker {worker} did not take its offer within {}",
                    chime_common::duration::format_duration(self.config.give_up_after)
                )
            } else {
                self.offer(&firing, worker, now).await;
                outcome.offered.push(firing.id);
                continue;
            };
            if let Some(alert) = self.store.withdraw_offer(&firing.id, &error, now).await? {
                tracing::warn!(firing_id = %firing.id, %error, "gave an addressed firing up");
                self.alerts.publish(&alert).await;
                outcome.withdrawn.push(firing.id);
            }
        }
        Ok(outcome)
    }

    /// Offers `firing` to `worker` once more (best effort: the next pass
    /// offers it again).
    async fn offer(&self, firing: &StagedFiring, worker: &str, now: DateTime<Utc>) {
        let sent = self
            .nats
            .client
            .publish_with_headers(
                self.nats.subjects.offer(&firing.group, worker),
                firing_headers(firing, now),
                firing.payload.clone(),
            )
            .await;
        if let Err(error) = sent {
            tracing::debug!(firing_id = %firing.id, %error, "cannot offer a firing again now");
        }
    }
}

impl Service for Offers {
    type Outcome = OffersOutcome;
    type Error = OffersError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<OffersOutcome, OffersError> {
        Offers::run_once(self, now).await
    }
}
