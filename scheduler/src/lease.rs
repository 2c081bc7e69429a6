//! A lease in the `chime-leases` KV bucket: one replica at a time runs the
//! expiry monitor and housekeeping, and another takes over when it stops renewing.
//!
//! The value records the holder and an expiry instant; acquiring an expired
//! lease and renewing one's own are revision-checked updates, so two replicas
//! can never both believe they hold it after the same revision.

use async_nats::jetstream::kv;
use chime_runtime::service::Leadership;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use prometheus::IntGauge;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Serialize, Deserialize)]
struct LeaseValue {
    holder: String,
    until_ms: i64,
}

/// One named lease, seen from one replica.
pub struct Lease {
    kv: kv::Store,
    key: String,
    holder: String,
    ttl: Duration,
    /// Set to 1 while held, 0 otherwise (`chime_leader`), when given.
    gauge: Option<IntGauge>,
}

impl Lease {
    /// The lease `key`, to be held by `holder` for `ttl` per renewal.
    pub fn new(
        kv: kv::Store,
        key: impl Into<String>,
        holder: impl Into<String>,
        ttl: Duration,
    ) -> Self {
        Lease {
            kv,
            key: key.into(),
            holder: holder.into(),
            ttl,
            gauge: None,
        }
    }

    /// Reports whether the lease is held on `gauge` after each try.
    pub fn with_gauge(mut self, gauge: IntGauge) -> Self {
        self.gauge = Some(gauge);
        self
    }

    /// Takes the lease if free or expired, renews it if held; true while this replica holds it.
    pub async fn acquire_or_renew(&self, now: DateTime<Utc>) -> bool {
        let held = self.try_hold(now).await;
        if let Some(gauge) = &self.gauge {
            gauge.set(i64::from(held));
        }
        held
    }

    async fn try_hold(&self, now: DateTime<Utc>) -> bool {
        let value = LeaseValue {
            holder: self.holder.clone(),
            until_ms: now.timestamp_millis() + self.ttl.as_millis() as i64,
        };
        let Ok(bytes) = serde_json::to_vec(&value) else {
            return false;
        };
        match self.kv.entry(&self.key).await {
            Ok(None) => self.kv.create(&self.key, bytes.into()).await.is_ok(),
            Ok(Some(entry)) => {
                let current: Option<LeaseValue> = serde_json::from_slice(&entry.value).ok();
                let takeable = match &current {
                    Some(c) => c.holder == self.holder || c.until_ms < now.timestamp_millis(),
                    // Deleted, purged or garbage: free.
                    None => true,
                };
                takeable
                    && self
                        .kv
                        .update(&self.key, bytes.into(), entry.revision)
                        .await
                        .is_ok()
            }
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "cannot read lease");
                false
            }
        }
    }

    /// Gives the lease up (on shutdown) so another replica takes it at once.
    pub async fn release(&self) {
        if let Ok(Some(entry)) = self.kv.entry(&self.key).await {
            let mine = serde_json::from_slice::<LeaseValue>(&entry.value)
                .map(|v| v.holder == self.holder)
                .unwrap_or(false);
            if mine {
                let _ = self
                    .kv
                    .delete_expect_revision(&self.key, Some(entry.revision))
                    .await;
            }
        }
    }
}

impl Leadership for Lease {
    fn hold(&self, now: DateTime<Utc>) -> BoxFuture<'_, bool> {
        Box::pin(self.acquire_or_renew(now))
    }

    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(Lease::release(self))
    }
}
