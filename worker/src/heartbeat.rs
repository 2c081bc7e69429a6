//! The worker's heartbeat: its [`WorkerInfo`] under its id in KV `chime-workers`.
//!
//! The bucket drops a key `worker_ttl` (6 s) after its last write, which is
//! how the scheduler learns that a worker died and re-queues its firings.

use crate::slots::Slots;
use async_nats::jetstream::kv;
use chime_common::protocol::WorkerInfo;
use chrono::{DateTime, Utc};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Puts the worker's info every interval.
#[derive(Clone)]
pub(crate) struct Heartbeat {
    store: kv::Store,
    id: String,
    group: String,
    started_at: DateTime<Utc>,
    slots: Slots,
    interval: Duration,
}

impl Heartbeat {
    pub(crate) fn new(
        store: kv::Store,
        id: String,
        group: String,
        slots: Slots,
        interval: Duration,
    ) -> Self {
        Heartbeat {
            store,
            id,
            group,
            started_at: Utc::now(),
            slots,
            interval,
        }
    }

    /// The value written now.
    pub(crate) fn info(&self) -> WorkerInfo {
        WorkerInfo {
            id: self.id.clone(),
            group: self.group.clone(),
            threads: u32::try_from(self.slots.threads()).unwrap_or(u32::MAX),
            in_flight: u32::try_from(self.slots.in_flight()).unwrap_or(u32::MAX),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: self.started_at,
        }
    }

    /// One beat.
    pub(crate) async fn beat_once(&self) -> Result<(), async_nats::Error> {
        let value = serde_json::to_vec(&self.info())?;
        self.store.put(&self.id, value.into()).await?;
        Ok(())
    }

    /// Beats until `stop`; failures are logged and the next beat tries again.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.cancelled() => return,
            }
            let beat =
                tokio::time::timeout(self.interval.max(Duration::from_secs(1)), self.beat_once())
                    .await;
            match beat {
                Ok(Ok(())) if failing => {
                    failing = false;
                    tracing::info!("heartbeat restored");
                }
                Ok(Ok(())) => {}
                Ok(Err(error)) if !failing => {
                    failing = true;
                    tracing::warn!(%error, "heartbeat failed; retrying every beat");
                }
                Err(_) if !failing => {
                    failing = true;
                    tracing::warn!("heartbeat timed out; retrying every beat");
                }
                _ => {}
            }
        }
    }

    /// Deletes the key: the worker left cleanly.
    pub(crate) async fn remove(&self) {
        match tokio::time::timeout(Duration::from_secs(5), self.store.delete(&self.id)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot delete the heartbeat key; it expires on its own")
            }
            Err(_) => tracing::warn!("deleting the heartbeat key timed out; it expires on its own"),
        }
    }
}
