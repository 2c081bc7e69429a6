//! The worker's heartbeat: its [`WorkerInfo`] under `<group>.<id>` in KV
//! `chime-workers` ([`heartbeat_key`]).
//!
//! The bucket drops a key `worker_ttl` (15 s) after its last write, which is
//! how the scheduler learns that a worker died and re-queues its firings.
//! Each acknowledged beat renews the worker's [`Fence`] lease. Each beat lists
//! the firings the worker runs (`running`), so the scheduler finds a firing
//! it recorded as started here that this worker does not run (a start whose
//! reply the worker gave up on) within two beats.

use crate::running::Running;
use crate::services::fence::Fence;
use crate::slots::Slots;
use async_nats::jetstream::kv;
use chime_common::protocol::{heartbeat_key, WorkerInfo};
use chrono::{DateTime, Utc};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// After a failed beat, the next comes after this share of the interval, so
/// that a short outage costs as little of the lease as possible.
const RETRY_SHARE: u32 = 4;
/// The longest one beat waits for its acknowledgement (a KV put takes
/// milliseconds): a hung beat must leave time for a retry within the lease.
const BEAT_TIMEOUT: Duration = Duration::from_secs(1);

/// Puts the worker's info every interval.
#[derive(Clone)]
pub(crate) struct Heartbeat {
    store: kv::Store,
    id: String,
    group: String,
    started_at: DateTime<Utc>,
    slots: Slots,
    running: Running,
    interval: Duration,
    /// The handlers this worker runs ([`crate::handler::Handler::offered`]).
    handlers: Vec<String>,
}

impl Heartbeat {
    pub(crate) fn new(
        store: kv::Store,
        id: String,
        group: String,
        slots: Slots,
        running: Running,
        interval: Duration,
        handlers: Vec<String>,
    ) -> Self {
        Heartbeat {
            store,
            id,
            group,
            started_at: Utc::now(),
            slots,
            running,
            interval,
            handlers,
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
            running: self.running.listed(),
            handlers: Some(self.handlers.clone()),
            // It subscribes to its offer subject before its first fetch.
            offers: true,
            heartbeat_at: None,
        }
    }

    /// One beat; returns the instant just before it was sent.
    pub(crate) async fn beat_once(&self) -> Result<Instant, async_nats::Error> {
        let value = serde_json::to_vec(&self.info())?;
        let sent = Instant::now();
        self.store
            .put(heartbeat_key(&self.group, &self.id), value.into())
            .await?;
        Ok(sent)
    }

    /// Beats every interval until `stop`, renewing `fence` with each beat
    /// acknowledged. A failed beat is logged and tried again after a quarter
    /// of the interval; each beat waits at most the interval, at most 1 s.
    pub(crate) async fn run(self, fence: Fence, stop: CancellationToken) {
        let retry = (self.interval / RETRY_SHARE).max(Duration::from_millis(50));
        let beat_timeout = self.interval.min(BEAT_TIMEOUT);
        let mut pause = self.interval;
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => return,
            }
            let beat = tokio::time::timeout(beat_timeout, self.beat_once()).await;
            let error = match beat {
                Ok(Ok(sent)) => {
                    fence.renew(sent, Instant::now());
                    if failing {
                        failing = false;
                        tracing::info!("heartbeat restored");
                    }
                    pause = self.interval;
                    continue;
                }
                Ok(Err(error)) => error.to_string(),
                Err(_) => "timed out".to_string(),
            };
            pause = retry;
            if !failing {
                failing = true;
                tracing::warn!(%error, ?retry, "heartbeat failed; retrying");
            }
        }
    }

    /// Deletes the key: the worker left cleanly.
    pub(crate) async fn remove(&self) {
        match tokio::time::timeout(
            Duration::from_secs(5),
            self.store.delete(heartbeat_key(&self.group, &self.id)),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot delete the heartbeat key; it expires on its own")
            }
            Err(_) => tracing::warn!("deleting the heartbeat key timed out; it expires on its own"),
        }
    }
}
