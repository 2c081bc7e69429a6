//! Immediate work: publishes the firings staged outside any slice (a
//! trigger, a backfill, a retry, an `on_success` or fan-in firing, a held
//! firing released) as soon as the transaction that staged them commits,
//! instead of when the next slice claim of their partition adopts them, up
//! to a slice later.
//!
//! Whoever commits such a firing wakes this replica's pass ([`Wake`]); the
//! pass reads the unadopted firings due within one slice and puts them in
//! the wheel, owned by no slice, to leave at their instant. (The next slice
//! claim, at most a slice away, adopts any firing due later in time.) Adoption is
//! unchanged and remains the guarantee: the slice that adopts one of these
//! firings publishes it again with the same `Nats-Msg-Id`, which JetStream's
//! duplicate window drops, so a replica that dies between its commit and
//! its publish loses nothing, and the store's start decision still lets
//! each attempt start once. The periodic tick only catches a wake that
//! failed; it is not what makes the work immediate.

use crate::firing::wheel::Wheel;
use crate::pass::check_pass;
use crate::store::{Store, StoreError};
use chime_common::FiringId;
use chime_runtime::service::Service;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub use chime_runtime::service::Wake;

/// Immediate publishing settings.
#[derive(Debug, Clone)]
pub struct ImmediateConfig {
    /// Passes between wakes, for a wake whose pass failed.
    pub interval: Duration,
    /// Firings read per pass; more wait for their slice's adoption.
    pub batch: u32,
}

impl Default for ImmediateConfig {
    fn default() -> Self {
        ImmediateConfig {
            interval: Duration::from_secs(5),
            batch: 1_000,
        }
    }
}

impl ImmediateConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_pass(
            "immediate publishing",
            self.interval,
            Some(self.batch),
            None,
        )
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ImmediateOutcome {
    /// Firings put in the wheel by this pass.
    pub queued: Vec<FiringId>,
}

/// Puts unadopted due firings in this replica's wheel.
pub struct Immediate {
    config: ImmediateConfig,
    /// Firings due within this much of now are put in the wheel; the next
    /// slice claim adopts later ones in time (one slice).
    horizon: Duration,
    store: Store,
    wheel: Wheel,
    /// Publications already put in the wheel (firing and publish sequence:
    /// a held firing released again is a new one), by due instant (UTC ms),
    /// so a wake before their adoption or published mark does not queue
    /// them twice.
    queued: Mutex<HashMap<(FiringId, u32), i64>>,
}

impl Immediate {
    /// A pass for firings due within `horizon` (one slice).
    pub fn new(config: ImmediateConfig, horizon: Duration, store: Store, wheel: Wheel) -> Self {
        Immediate {
            config,
            horizon,
            store,
            wheel,
            queued: Mutex::new(HashMap::new()),
        }
    }

    /// One pass at `now`.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<ImmediateOutcome, StoreError> {
        let horizon = chrono::Duration::from_std(self.horizon).unwrap_or_default();
        let due = self
            .store
            .unadopted_due(now + horizon, self.config.batch)
            .await?;
        let fresh = {
            let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
            // By then a firing was published and marked, or adopted by its
            // slice; one still unpublished is queued again (the duplicate
            // window drops a copy).
            let forget_before = now
                .timestamp_millis()
                .saturating_sub(i64::try_from((self.horizon * 4).as_millis()).unwrap_or(i64::MAX));
            queued.retain(|_, due_ms| *due_ms >= forget_before);
            due.into_iter()
                .filter(|f| {
                    queued
                        .insert((f.id.clone(), f.publish_seq), f.due_at.timestamp_millis())
                        .is_none()
                })
                .collect::<Vec<_>>()
        };
        let outcome = ImmediateOutcome {
            queued: fresh.iter().map(|f| f.id.clone()).collect(),
        };
        if !fresh.is_empty() {
            self.wheel.insert(fresh, None);
        }
        Ok(outcome)
    }
}

impl Service for Immediate {
    type Outcome = ImmediateOutcome;
    type Error = StoreError;

    async fn run_once(&self, now: DateTime<Utc>) -> Result<ImmediateOutcome, StoreError> {
        Immediate::run_once(self, now).await
    }
}
