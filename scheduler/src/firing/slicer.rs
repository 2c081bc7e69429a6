//! The slicer: claims time slices, stages their firings, takes over stale claims.
//!
//! Time is cut into slices (default 1 s). Each replica looks `lookahead`
//! ahead and tries `create("slice.<start>.<partition>")` in `chime-slices`;
//! exactly one replica wins each key, stages the slice's due firings in the
//! store (in small transactions spread over a moment when the slice is
//! still a lookahead away, see `SlicerConfig::stage_spread`) and puts them
//! in its wheel. There is no global lock: replicas race only per key, and
//! the store's unique (job, instant, attempt) plus `next_fire_at` advancing
//! in the same transaction make a double stage impossible even if two
//! replicas overlap.
//!
//! Every replica watches the bucket. A claim still unpublished when its lease
//! runs out, or whose owner's liveness key has lapsed (the owner died), is
//! taken over with a revision-checked `update`, and its unpublished firings
//! are published from the store.
//!
//! A takeover doubles the publishes of a slice whose owner is alive, so an
//! owner seen alive is given time, measured from the watch (see
//! [`Seen`]), to renew its key and mark its slices after a stall of the
//! bucket (a leader election, or a watch that stopped delivering): for
//! [`LIVE_GRACE_LIVENESSES`] (2) times the liveness, 2 s by default.
//!
//! - A lapsed liveness key proves its owner gone only while this replica has
//!   seen its own key renewed without a gap for that long: after a stall
//!   every key seen has lapsed, and the other replicas' first renewals may
//!   arrive after this one's.
//! - The lease of a claim whose owner's key is seen fresh ends that much
//!   later, counted from the lease's end or from the owner's first renewal
//!   after a gap, whichever is later: a live owner whose slice-published
//!   mark failed during the stall marks it again in the meantime. An owner
//!   alive but stuck (its publishes failing) is still taken over then.
//! - A failed published mark is tried again with a backoff (100 ms doubling
//!   to 1 s) until it holds, the claim is no longer this replica's, or the
//!   claim is forgotten.
//! - A claim value that cannot be read (not a claim: anyone who may publish
//!   with a reply subject can aim a JetStream ack at a slice key) is taken
//!   over once the lease a claim of that slice would have had is over, so
//!   no slice waits on it forever. Its firings, if its writer staged any,
//!   are published from the store as for any takeover; jobs nobody staged
//!   in it were staged by the next slice's claim, which takes every job due
//!   before its end.

use crate::firing::claim::{
    liveness_key, liveness_owner, slice_key, slice_start, ClaimState, ClaimValue, Liveness,
    SliceProgress,
};
use crate::firing::wheel::Wheel;
use crate::ops::alerts::Alerts;
use crate::ops::clock_monitor::ClockStatus;
use crate::ops::metrics::Metrics;
use crate::store::{StagePace, StageRequest, Store};
use async_nats::jetstream::kv::{self, Operation};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// Slicer settings.
#[derive(Debug, Clone)]
pub struct SlicerConfig {
    /// Length of a slice.
    pub slice: Duration,
    /// How far ahead slices are claimed and staged.
    pub lookahead: Duration,
    /// Partitions per slice: P replicas can share one slice (must match the store's).
    pub partitions: u32,
    /// How often the slicer looks for slices to claim or take over.
    pub tick: Duration,
    /// A claim not marked published this long after its slice ends may be taken over.
    pub takeover_after: Duration,
    /// A replica's claims are taken over once its liveness key is this
    /// stale; it renews the key four times as often.
    pub liveness: Duration,
    /// Claims older than this are forgotten (housekeeping rescues anything older).
    pub takeover_window: Duration,
    /// `misfire: fire_all` catches up at most this many instants per job per slice.
    pub max_catch_up: u32,
    /// Jobs staged per store transaction.
    pub max_jobs: u32,
    /// How far ahead the slicer looks for dense slices: a slice partition
    /// with at least `dense_jobs` jobs due is claimed and staged as soon as
    /// it comes within this horizon, not at `lookahead`, so a burst of
    /// 100,000 firings due at one instant is in the wheel before it. Equal
    /// to `lookahead`: no early claims.
    pub dense_horizon: Duration,
    /// Jobs due in one slice partition that make it dense.
    pub dense_jobs: u32,
    /// A slice claimed at the lookahead is staged in transactions of
    /// `stage_pace_jobs` jobs with `stage_pause` after each, for at most
    /// this long (shared among the partitions, which one replica may stage
    /// in turn); the rest goes at `max_jobs` without pauses. A slice too
    /// large for that shares its jobs among the pauses (see
    /// [`StagePace`]). Staging a whole slice in one transaction competes
    /// with the starts and finishes in flight for as long as it writes, and
    /// those firings start late. Zero stages every slice as fast as it can.
    pub stage_spread: Duration,
    /// Jobs per transaction while a staging is spread out (the fewest, when
    /// it is shared).
    pub stage_pace_jobs: u32,
    /// The pause after each transaction while a staging is spread out.
    pub stage_pause: Duration,
}

impl Default for SlicerConfig {
    fn default() -> Self {
        SlicerConfig {
            slice: Duration::from_secs(1),
            lookahead: Duration::from_secs(3),
            partitions: 1,
            tick: Duration::from_millis(100),
            takeover_after: Duration::from_millis(500),
            liveness: Duration::from_secs(1),
            takeover_window: Duration::from_secs(300),
            max_catch_up: 100,
            max_jobs: 5_000,
            dense_horizon: Duration::from_secs(15),
            dense_jobs: 20_000,
            stage_spread: Duration::from_millis(250),
            stage_pace_jobs: 100,
            stage_pause: Duration::from_millis(25),
        }
    }
}

impl SlicerConfig {
    /// Checks the settings; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.slice < Duration::from_millis(100)
            || !self.slice.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err("--slice must be a whole number of milliseconds, at least 100ms".into());
        }
        if self.lookahead < self.slice {
            return Err("--lookahead must be at least one --slice".into());
        }
        if !(1..=1024).contains(&self.partitions) {
            return Err("--partitions must be from 1 to 1024".into());
        }
        if self.tick.is_zero() || self.tick > self.slice {
            return Err("the slicer tick must be longer than zero and at most one slice".into());
        }
        if self.liveness < Duration::from_millis(100) {
            return Err("the replica liveness must be at least 100ms".into());
        }
        if self.dense_horizon < self.lookahead {
            return Err("--dense-horizon must be at least --lookahead".into());
        }
        if self.dense_jobs == 0 {
            return Err("--dense-jobs must be at least 1".into());
        }
        if self.max_catch_up == 0 || self.max_jobs == 0 {
            return Err("--max-catch-up and the job batch must be at least 1".into());
        }
        if !self.stage_spread.is_zero() && (self.stage_pace_jobs == 0 || self.stage_pause.is_zero())
        {
            return Err(
                "a spread staging needs at least 1 job and a pause longer than zero".into(),
            );
        }
        Ok(())
    }

    /// How the staging of a slice starting at `slice_start_ms` is spread
    /// out, claimed at `now_ms`: only a slice claimed at the lookahead (due
    /// in more than `lookahead` − `slice`) is; a nearer one (a catch-up, a
    /// replica starting, an early claim topped up) is due too soon, and an
    /// early dense claim (`early`) needs every transaction at full size.
    /// Returns the jobs per transaction, the pause and how long to spread:
    /// at most half a slice in all, since a replica stages its claims one
    /// after the other and one slice's stagings must not delay the next.
    fn stage_pace(
        &self,
        early: bool,
        slice_start_ms: i64,
        now_ms: i64,
    ) -> Option<(u32, Duration, Duration)> {
        let ahead = slice_start_ms.saturating_sub(now_ms);
        let near = i64::try_from(self.lookahead.saturating_sub(self.slice).as_millis())
            .unwrap_or(i64::MAX);
        if early || self.stage_spread.is_zero() || ahead <= near {
            return None;
        }
        Some((
            self.stage_pace_jobs,
            self.stage_pause,
            self.stage_spread.min(self.slice / 2) / self.partitions.max(1),
        ))
    }
}

/// A claim could not be tried (NATS is unreachable): the pass stops there
/// and the next one starts over.
#[derive(Debug, thiserror::Error)]
enum ClaimError {
    #[error("cannot encode the claim: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("cannot create the claim: {0}")]
    Create(#[from] kv::CreateError),
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SlicerOutcome {
    /// Keys this replica claimed.
    pub claimed: Vec<String>,
    /// Keys this replica took over.
    pub taken_over: Vec<String>,
    /// Firings put in the wheel.
    pub staged: usize,
    /// Nothing was claimed: this replica's clock is off.
    pub clock_off: bool,
}

#[derive(Debug, Clone)]
struct Known {
    value: Option<ClaimValue>,
    revision: u64,
}

/// The slicer of one replica.
pub struct Slicer {
    config: SlicerConfig,
    replica: String,
    store: Store,
    kv: kv::Store,
    wheel: Wheel,
    progress: SliceProgress,
    metrics: Metrics,
    claims: Arc<Mutex<HashMap<String, Known>>>,
    /// Each replica's liveness, as last seen in the bucket.
    alive: Arc<Mutex<HashMap<String, Seen>>>,
    /// Owned slices whose published mark failed: when to try again, and
    /// the delay after that.
    unmarked: Mutex<HashMap<String, (tokio::time::Instant, Duration)>>,
    /// Slices starting before this (UTC ms) were checked for density once,
    /// as they came within the dense horizon.
    dense_checked: Mutex<i64>,
    /// Slices this replica claimed early as dense, not yet topped up at the
    /// lookahead.
    claimed_early: Mutex<HashSet<String>>,
    /// While this replica's clock is off, it claims and takes over nothing.
    clock: ClockStatus,
    /// Where `missed` alerts of skipped instants go; without it they are
    /// only counted.
    alerts: Option<Alerts>,
}

impl Slicer {
    /// A slicer for `replica`.
    pub fn new(
        config: SlicerConfig,
        replica: impl Into<String>,
        store: Store,
        kv: kv::Store,
        wheel: Wheel,
        progress: SliceProgress,
        metrics: Metrics,
    ) -> Self {
        Slicer {
            config,
            replica: replica.into(),
            store,
            kv,
            wheel,
            progress,
            metrics,
            claims: Arc::new(Mutex::new(HashMap::new())),
            alive: Arc::new(Mutex::new(HashMap::new())),
            unmarked: Mutex::new(HashMap::new()),
            dense_checked: Mutex::new(i64::MIN),
            claimed_early: Mutex::new(HashSet::new()),
            clock: ClockStatus::default(),
            alerts: None,
        }
    }

    /// Publishes `missed` alerts through `alerts`.
    pub fn with_alerts(mut self, alerts: Alerts) -> Self {
        self.alerts = Some(alerts);
        self
    }

    /// Claims only while `clock` says this replica's clock is in sync.
    pub fn with_clock(mut self, clock: ClockStatus) -> Self {
        self.clock = clock;
        self
    }

    /// Whether `owner` is known to be gone at `now_ms`: its liveness key was
    /// seen and has lapsed. A replica never seen (an older version, or one
    /// that died before its first beat) is judged by its claims' leases only.
    ///
    /// Only while this replica's own key, as seen through the same watch,
    /// has at least half its liveness to run and has been seen renewed
    /// without a gap for [`LIVE_GRACE_LIVENESSES`] livenesses: a lapsed key
    /// proves its owner dead only if keys are being renewed and the watch
    /// shows renewals. When a NATS node dies, the watch whose consumer lived
    /// there stalls until a missed heartbeat restarts it (about ten
    /// seconds), and while the bucket has no leader no key can be renewed:
    /// either way every key seen lapses, this replica's own with them, and
    /// judging by them would make each replica take over the other's slices
    /// while both are alive and publishing. Once renewals show again, the
    /// others' may arrive a moment after this replica's own, hence the
    /// grace. Meanwhile the claims' leases decide.
    fn gone(&self, owner: &str, now_ms: i64) -> bool {
        let alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
        owner_gone(
            alive.get(&self.replica).copied(),
            alive.get(owner).copied(),
            now_ms,
            i64::try_from(self.config.liveness.as_millis() / 2).unwrap_or(i64::MAX),
            self.live_grace_ms(),
        )
    }

    /// Whether the lease of a claim of `owner` that ends at `until_ms` is
    /// over at `now_ms` (see [`lease_over`]).
    fn lease_over(&self, owner: &str, until_ms: i64, now_ms: i64) -> bool {
        let alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
        lease_over(
            until_ms,
            alive.get(owner).copied(),
            now_ms,
            self.live_grace_ms(),
        )
    }

    /// How long an owner seen alive is given after a stall, in ms.
    fn live_grace_ms(&self) -> i64 {
        i64::try_from(self.config.liveness.as_millis())
            .unwrap_or(i64::MAX / 4)
            .saturating_mul(LIVE_GRACE_LIVENESSES)
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, HashMap<String, Known>> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slice_ms(&self) -> i64 {
        self.config.slice.as_millis() as i64
    }

    /// Claims every unclaimed slice partition in the lookahead window, then
    /// takes over stale claims. Time is passed in so tests control it.
    pub async fn run_once(&self, now: DateTime<Utc>) -> SlicerOutcome {
        let mut outcome = self.claim_pass(now).await;
        if !outcome.clock_off {
            self.takeover_pass(now, &mut outcome).await;
        }
        outcome
    }

    /// Claims every unclaimed slice partition in the lookahead window and
    /// the dense slices beyond it, staging what it wins.
    async fn claim_pass(&self, now: DateTime<Utc>) -> SlicerOutcome {
        let mut outcome = SlicerOutcome::default();
        if !self.clock.in_sync() {
            // Claims are cut by wall-clock time; a replica whose clock is
            // off would stage slices early or late. Its own unfinished
            // claims are taken over by the others as usual.
            outcome.clock_off = true;
            return outcome;
        }
        let now_ms = now.timestamp_millis();
        let len = self.slice_ms();
        let first = now_ms.div_euclid(len) * len;
        let last = (now_ms + self.config.lookahead.as_millis() as i64).div_euclid(len) * len;
        let mut start = first;
        while start <= last {
            for partition in 0..self.config.partitions {
                let key = slice_key(start, partition);
                if self.claims().contains_key(&key) {
                    if self.take_early(&key) {
                        // Jobs that became due in it since the early claim,
                        // like the every-second ones that were due before it.
                        outcome.staged += self.stage(&key, partition, None, start + len, now).await;
                    }
                    continue;
                }
                match self.claim(&key, None, start + len, now).await {
                    Ok(Some(staged)) => {
                        outcome.claimed.push(key);
                        outcome.staged += staged;
                    }
                    Ok(None) => {}
                    Err(_) => return outcome,
                }
            }
            start += len;
        }
        let _ = self.claim_dense(start, now, &mut outcome).await;
        outcome
    }

    /// Takes over the stale claims of other replicas and forgets old ones.
    async fn takeover_pass(&self, now: DateTime<Utc>, outcome: &mut SlicerOutcome) {
        self.retry_marks().await;
        if !self.clock.in_sync() {
            outcome.clock_off = true;
            return;
        }
        self.take_over_stale(now, outcome).await;
        self.forget_old(now.timestamp_millis());
    }

    /// Whether `key` is an early claim of this replica's still to be topped
    /// up; forgets it either way.
    fn take_early(&self, key: &str) -> bool {
        let early = self
            .claimed_early
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        early
            && self
                .claims()
                .get(key)
                .and_then(|k| k.value.as_ref())
                .is_some_and(|v| v.owner == self.replica)
    }

    /// Claims the dense slices between `from` (the first slice start past
    /// the lookahead) and the dense horizon. Each slice is checked once, as
    /// it comes within the horizon: a check reads at most `dense_jobs` index
    /// entries, and a slice filled later is claimed at the lookahead as
    /// usual. An early claim stages only the slice's own instants; catch-ups
    /// and the slices in between are left to their own claims.
    async fn claim_dense(
        &self,
        from: i64,
        now: DateTime<Utc>,
        outcome: &mut SlicerOutcome,
    ) -> Result<(), ClaimError> {
        let len = self.slice_ms();
        let horizon = now.timestamp_millis() + self.config.dense_horizon.as_millis() as i64;
        let last = horizon.div_euclid(len) * len;
        let checked = *self.dense_checked.lock().unwrap_or_else(|p| p.into_inner());
        let mut start = from.max(checked);
        while start <= last {
            let (from_at, to_at) = (
                chime_common::duration::from_millis(start),
                chime_common::duration::from_millis(start + len),
            );
            for partition in 0..self.config.partitions {
                let key = slice_key(start, partition);
                if self.claims().contains_key(&key) {
                    continue;
                }
                let dense = self
                    .store
                    .due_jobs_reach(partition, from_at, to_at, self.config.dense_jobs)
                    .await;
                match dense {
                    Ok(true) => {
                        if let Some(staged) =
                            self.claim(&key, Some(start), start + len, now).await?
                        {
                            tracing::info!(key, staged, "claimed a dense slice early");
                            self.claimed_early
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(key.clone());
                            outcome.claimed.push(key);
                            outcome.staged += staged;
                        }
                    }
                    Ok(false) => {}
                    Err(e) => {
                        // Checked again next pass; the lookahead still claims it.
                        tracing::warn!(key, error = %e, "cannot check a slice's density");
                        return Ok(());
                    }
                }
            }
            start += len;
            *self.dense_checked.lock().unwrap_or_else(|p| p.into_inner()) = start;
        }
        Ok(())
    }

    /// Tries to win `key`; on a win stages its firings from `start_ms` (all
    /// due ones if `None`) to `end_ms`.
    async fn claim(
        &self,
        key: &str,
        start_ms: Option<i64>,
        end_ms: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<usize>, ClaimError> {
        let value = ClaimValue {
            owner: self.replica.clone(),
            state: ClaimState::Claimed,
            until_ms: end_ms + self.config.takeover_after.as_millis() as i64,
        };
        let bytes = serde_json::to_vec(&value)?;
        match self.kv.create(key, bytes.into()).await {
            Ok(revision) => {
                self.claims().insert(
                    key.to_string(),
                    Known {
                        value: Some(value),
                        revision,
                    },
                );
                self.metrics.slices_claimed.inc();
                let partition = key
                    .rsplit('.')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                Ok(Some(
                    self.stage(key, partition, start_ms, end_ms, now).await,
                ))
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                // The watch fills in the owner and revision.
                self.claims().entry(key.to_string()).or_insert(Known {
                    value: None,
                    revision: 0,
                });
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "cannot claim slice");
                Err(e.into())
            }
        }
    }

    /// Stages a won slice in the store and puts its firings in the wheel.
    async fn stage(
        &self,
        key: &str,
        partition: u32,
        start_ms: Option<i64>,
        end_ms: i64,
        now: DateTime<Utc>,
    ) -> usize {
        let pace = self
            .config
            .stage_pace(
                start_ms.is_some(),
                end_ms.saturating_sub(self.slice_ms()),
                now.timestamp_millis(),
            )
            .map(|(jobs, pause, spread)| StagePace {
                jobs,
                pause,
                until: std::time::Instant::now() + spread,
            });
        let request = StageRequest {
            slice: key.to_string(),
            partition,
            slice_start: start_ms.map(chime_common::duration::from_millis),
            slice_end: chime_common::duration::from_millis(end_ms),
            now,
            max_catch_up: self.config.max_catch_up,
            max_jobs: self.config.max_jobs,
            pace,
        };
        let slice: Arc<str> = Arc::from(key);
        // Staging counts as one pending firing until it ends, so the acks of
        // an early batch cannot report the slice published while later
        // batches are still being staged.
        self.progress.register(slice.clone(), 1);
        let mut count = 0;
        let timer = self.metrics.stage_duration.start_timer();
        let result = self
            .store
            .stage_slice_each(&request, |firings| {
                count += firings.len();
                self.progress.register(slice.clone(), firings.len());
                self.wheel.insert(firings, Some(slice.clone()));
            })
            .await;
        timer.observe_duration();
        match result {
            Ok(outcome) => {
                self.metrics.misfires.inc_by(outcome.misfired);
                self.metrics.misfire_skipped.inc_by(outcome.skipped);
                for missed in &outcome.missed {
                    self.metrics
                        .firings_missed
                        .with_label_values(&[missed.alert.group.as_str(), missed.cause.as_str()])
                        .inc();
                    if let Some(alerts) = &self.alerts {
                        alerts.publish(&missed.alert).await;
                    }
                }
            }
            Err(e) => {
                // Jobs whose next_fire_at did not advance: the next slice stages them, late.
                self.metrics
                    .store_errors
                    .with_label_values(&["stage_slice"])
                    .inc();
                tracing::error!(key, error = %e, "cannot stage (all of) the slice; its remaining jobs move to the next slice");
            }
        }
        self.progress.acked(&slice);
        count
    }

    async fn take_over_stale(&self, now: DateTime<Utc>, outcome: &mut SlicerOutcome) {
        let now_ms = now.timestamp_millis();
        let unread_lease = self.slice_ms() + self.config.takeover_after.as_millis() as i64;
        let known: Vec<(String, u64, Option<ClaimValue>)> = self
            .claims()
            .iter()
            // Revision 0: a claim lost to `create`, not seen by the watch yet.
            .filter(|(_, k)| k.revision > 0)
            .map(|(key, k)| (key.clone(), k.revision, k.value.clone()))
            .collect();
        let stale = stale_due_first(known, |claim| match claim {
            Claim::Read(value) => value.takeable_by(
                &self.replica,
                self.gone(&value.owner, now_ms),
                self.lease_over(&value.owner, value.until_ms, now_ms),
            ),
            Claim::Unread(key) => {
                slice_start(key).is_some_and(|start| start.saturating_add(unread_lease) < now_ms)
            }
        });
        for (key, revision, unread) in stale {
            let value = ClaimValue {
                owner: self.replica.clone(),
                state: ClaimState::Claimed,
                until_ms: now_ms + self.config.takeover_after.as_millis() as i64 + self.slice_ms(),
            };
            let Ok(bytes) = serde_json::to_vec(&value) else {
                continue;
            };
            match self.kv.update(&key, bytes.into(), revision).await {
                Ok(new_revision) => {
                    self.claims().insert(
                        key.clone(),
                        Known {
                            value: Some(value),
                            revision: new_revision,
                        },
                    );
                    self.metrics.slices_taken_over.inc();
                    match self.store.slice_firings(&key).await {
                        Ok(firings) => {
                            tracing::info!(key, firings = firings.len(), "took over a stale slice");
                            outcome.staged += firings.len();
                            let slice: Arc<str> = Arc::from(key.as_str());
                            self.progress.register(slice.clone(), firings.len());
                            self.wheel.insert(firings, Some(slice));
                        }
                        Err(e) => {
                            self.metrics
                                .store_errors
                                .with_label_values(&["slice_firings"])
                                .inc();
                            tracing::error!(key, error = %e, "took over a slice but cannot read its firings; housekeeping will rescue them");
                        }
                    }
                    if unread {
                        tracing::warn!(key, "took over a slice whose claim could not be read");
                    }
                    outcome.taken_over.push(key);
                }
                // Another replica was faster; the watch will tell us.
                Err(e) => tracing::debug!(key, error = %e, "takeover lost"),
            }
        }
    }

    fn forget_old(&self, now_ms: i64) {
        let horizon = now_ms - self.config.takeover_window.as_millis() as i64;
        let recent = |key: &String| slice_start(key).is_some_and(|s| s >= horizon);
        self.claims().retain(|key, _| recent(key));
        self.claimed_early
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(recent);
        self.unmarked_marks().retain(|key, _| recent(key));
    }

    fn unmarked_marks(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (tokio::time::Instant, Duration)>> {
        self.unmarked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks an owned slice published once all its firings are
    /// acknowledged. A mark that fails (the bucket between leaders, NATS
    /// unreachable) is tried again by the next passes, with a backoff
    /// (see [`Slicer::retry_marks`]); returns whether it holds now.
    pub async fn mark_published(&self, key: &str) -> bool {
        let marked = self.try_mark(key).await;
        let mut unmarked = self.unmarked_marks();
        match marked {
            Mark::Failed => {
                let delay = unmarked
                    .get(key)
                    .map_or(MARK_RETRY_FIRST, |(_, delay)| *delay);
                unmarked.insert(
                    key.to_string(),
                    (
                        tokio::time::Instant::now() + delay,
                        (delay * 2).min(MARK_RETRY_MAX),
                    ),
                );
                false
            }
            Mark::Done | Mark::NotOurs => {
                unmarked.remove(key);
                marked == Mark::Done
            }
        }
    }

    /// Tries again each failed published mark that is due.
    pub async fn retry_marks(&self) {
        let now = tokio::time::Instant::now();
        let due: Vec<String> = self
            .unmarked_marks()
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            if self.mark_published(&key).await {
                tracing::info!(key, "marked a slice published on a later try");
            }
        }
    }

    /// One try at marking `key` published.
    async fn try_mark(&self, key: &str) -> Mark {
        let known = self.claims().get(key).cloned();
        let Some(Known {
            value: Some(mut value),
            revision,
        }) = known
        else {
            return Mark::NotOurs;
        };
        if value.owner != self.replica {
            return Mark::NotOurs;
        }
        if value.state == ClaimState::Published {
            // An earlier try that seemed to fail held after all.
            return Mark::Done;
        }
        value.state = ClaimState::Published;
        let Ok(bytes) = serde_json::to_vec(&value) else {
            return Mark::NotOurs;
        };
        match self.kv.update(key, bytes.into(), revision).await {
            Ok(new_revision) => {
                self.claims().insert(
                    key.to_string(),
                    Known {
                        value: Some(value),
                        revision: new_revision,
                    },
                );
                Mark::Done
            }
            Err(e) => {
                // Taken over, or the bucket did not answer: the watch
                // tells which before the next try.
                tracing::debug!(key, error = %e, "cannot mark slice published; trying again");
                Mark::Failed
            }
        }
    }

    /// Gives up owned, unfinished slices so another replica takes them over at once.
    pub async fn release_unfinished(&self) {
        for key in self.progress.unfinished() {
            let known = self.claims().get(key.as_ref()).cloned();
            if let Some(Known {
                value: Some(mut value),
                revision,
            }) = known
            {
                if value.owner == self.replica {
                    value.state = ClaimState::Released;
                    if let Ok(bytes) = serde_json::to_vec(&value) {
                        let _ = self.kv.update(key.as_ref(), bytes.into(), revision).await;
                    }
                }
            }
        }
    }

    /// Keeps this replica's liveness key fresh until `shutdown`.
    async fn beat(replica: String, kv: kv::Store, liveness: Duration, shutdown: CancellationToken) {
        let key = liveness_key(&replica);
        let mut tick = tokio::time::interval(liveness / 4);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            let value = Liveness {
                alive_until_ms: Utc::now().timestamp_millis() + liveness.as_millis() as i64,
            };
            let Ok(bytes) = serde_json::to_vec(&value) else {
                continue;
            };
            if let Err(e) = kv.put(key.as_str(), bytes.into()).await {
                tracing::warn!(error = %e, "cannot renew this replica's liveness");
            }
        }
    }

    /// Follows the bucket so every replica knows every claim's owner and
    /// revision, and every replica's liveness. Each (re)start of the watch
    /// delivers every key's current value first: claims made before this
    /// replica started, or changed while its watch was down, are known too,
    /// and a takeover or a mark is never tried with a revision that can no
    /// longer match.
    async fn watch(
        claims: Arc<Mutex<HashMap<String, Known>>>,
        alive: Arc<Mutex<HashMap<String, Seen>>>,
        kv: kv::Store,
        liveness: Duration,
        shutdown: CancellationToken,
    ) {
        let liveness_ms = i64::try_from(liveness.as_millis()).unwrap_or(i64::MAX);
        loop {
            let mut watch = match kv.watch_with_history(">").await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch slice claims; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = shutdown.cancelled() => return,
                    }
                }
            };
            loop {
                let next = tokio::select! {
                    next = watch.next() => next,
                    _ = shutdown.cancelled() => return,
                };
                match next {
                    Some(Ok(entry)) if liveness_owner(&entry.key).is_some() => {
                        let owner = liveness_owner(&entry.key).unwrap_or_default().to_string();
                        let mut alive = alive.lock().unwrap_or_else(|p| p.into_inner());
                        match entry.operation {
                            Operation::Put => {
                                if let Ok(value) = serde_json::from_slice::<Liveness>(&entry.value)
                                {
                                    let seen = Seen::renewed(
                                        alive.get(&owner).copied(),
                                        value.alive_until_ms,
                                        Utc::now().timestamp_millis(),
                                        liveness_ms,
                                    );
                                    alive.insert(owner, seen);
                                }
                            }
                            Operation::Delete | Operation::Purge => {
                                alive.remove(&owner);
                            }
                        }
                    }
                    Some(Ok(entry)) => {
                        let mut claims = claims.lock().unwrap_or_else(|p| p.into_inner());
                        match entry.operation {
                            Operation::Put => {
                                let value = serde_json::from_slice(&entry.value).ok();
                                let newer = claims
                                    .get(&entry.key)
                                    .is_none_or(|k| k.revision <= entry.revision);
                                if newer {
                                    claims.insert(
                                        entry.key,
                                        Known {
                                            value,
                                            revision: entry.revision,
                                        },
                                    );
                                }
                            }
                            Operation::Delete | Operation::Purge => {
                                claims.remove(&entry.key);
                            }
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "slice watch failed; restarting it");
                        break;
                    }
                    None => break,
                }
            }
        }
    }

    /// Follows the bucket (claims and liveness) and keeps this replica's
    /// liveness key fresh until `stop` or until the handles are dropped:
    /// what [`Slicer::run`] runs beside its passes, for tests that call
    /// [`Slicer::run_once`] themselves.
    pub fn follow(&self, stop: CancellationToken) -> [AbortOnDropHandle<()>; 2] {
        [
            AbortOnDropHandle::new(tokio::spawn(Self::watch(
                self.claims.clone(),
                self.alive.clone(),
                self.kv.clone(),
                self.config.liveness,
                stop.clone(),
            ))),
            AbortOnDropHandle::new(tokio::spawn(Self::beat(
                self.replica.clone(),
                self.kv.clone(),
                self.config.liveness,
                stop,
            ))),
        ]
    }

    /// Runs until `shutdown`: a pass every tick, marking finished slices in
    /// between. After `shutdown` it keeps marking slices while the publisher
    /// drains the wheel, and once `drained` it releases whatever slice is
    /// still unfinished so another replica takes it over at once.
    ///
    /// Takes `&self` and the channel by reference so the supervisor can run
    /// it again after a panic with the slicer's claims intact; the watch and
    /// the liveness beat end with the run, however it ends.
    pub async fn run(
        &self,
        done: &mut mpsc::UnboundedReceiver<Arc<str>>,
        shutdown: CancellationToken,
        drained: CancellationToken,
    ) {
        let _following = self.follow(drained.clone());
        // Claims and takeovers run side by side: a claim pass waits for its
        // staging, spread over up to half a slice (`stage_spread`), and a
        // dead replica's slices must not wait behind that.
        tokio::join!(
            self.claim_passes(&shutdown, &drained),
            self.takeover_passes(done, &shutdown, &drained)
        );
        while let Ok(key) = done.try_recv() {
            self.mark_published(&key).await;
        }
        self.release_unfinished().await;
    }

    /// A claim pass every tick until `shutdown` (or `drained`).
    async fn claim_passes(&self, shutdown: &CancellationToken, drained: &CancellationToken) {
        // Each pass waits a random 50–150 % of the tick: with a fixed period
        // the replica whose phase comes first after a slice enters the window
        // would win every slice and do all the staging alone.
        let mut next_pass = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next_pass) => {}
                _ = shutdown.cancelled() => return,
                _ = drained.cancelled() => return,
            }
            next_pass =
                tokio::time::Instant::now() + self.config.tick.mul_f64(rand::random::<f64>() + 0.5);
            let outcome = self.claim_pass(Utc::now()).await;
            if !outcome.claimed.is_empty() {
                tracing::debug!(?outcome, "slicer claim pass");
            }
        }
    }

    /// A takeover pass every tick until `shutdown`, and finished slices
    /// marked published as they finish until `drained`.
    async fn takeover_passes(
        &self,
        done: &mut mpsc::UnboundedReceiver<Arc<str>>,
        shutdown: &CancellationToken,
        drained: &CancellationToken,
    ) {
        let mut next_pass = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next_pass), if !shutdown.is_cancelled() => {
                    next_pass = tokio::time::Instant::now() + self.config.tick;
                    let mut outcome = SlicerOutcome::default();
                    self.takeover_pass(Utc::now(), &mut outcome).await;
                    if !outcome.taken_over.is_empty() {
                        tracing::debug!(?outcome, "slicer takeover pass");
                    }
                }
                Some(key) = done.recv() => {
                    self.mark_published(&key).await;
                }
                _ = drained.cancelled() => return,
            }
        }
    }
}

/// How many livenesses an owner seen alive is given after a stall of the
/// bucket or of the watch (see the module docs).
pub const LIVE_GRACE_LIVENESSES: i64 = 2;

/// The first delay before a failed published mark is tried again; it
/// doubles up to [`MARK_RETRY_MAX`].
const MARK_RETRY_FIRST: Duration = Duration::from_millis(100);
const MARK_RETRY_MAX: Duration = Duration::from_secs(1);

/// What one try at marking a slice published did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Done,
    /// Not this replica's claim (any more): nothing to mark.
    NotOurs,
    /// The bucket did not take it: try again.
    Failed,
}

/// A replica's liveness key as this replica's watch saw it. Instants are UTC
/// ms; `received_ms` and `steady_since_ms` are this replica's clock, at the
/// time the watch delivered a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    /// What the key says: the owner counts as gone after this.
    alive_until_ms: i64,
    /// When the last renewal was seen.
    received_ms: i64,
    /// When the renewals seen since without a gap began: a gap is a
    /// liveness without a renewal seen (renewals come four times as often),
    /// so after a leader election of the bucket or a stalled watch this is
    /// the first renewal seen after it.
    steady_since_ms: i64,
}

impl Seen {
    /// The record after a renewal holding `alive_until_ms` was seen at
    /// `now_ms`, following `before`.
    fn renewed(before: Option<Seen>, alive_until_ms: i64, now_ms: i64, liveness_ms: i64) -> Seen {
        let steady_since_ms = match before {
            Some(before) if now_ms.saturating_sub(before.received_ms) <= liveness_ms => {
                before.steady_since_ms
            }
            _ => now_ms,
        };
        Seen {
            alive_until_ms,
            received_ms: now_ms,
            steady_since_ms,
        }
    }
}

/// Whether a claim's owner, seen as `owner` (`None`: never seen), is gone at
/// `now_ms`, judged by a replica that sees its own key as `own`: its own key
/// must have at least `margin_ms` to run and have been renewed without a gap
/// for `grace_ms` (see [`Slicer::gone`]).
fn owner_gone(
    own: Option<Seen>,
    owner: Option<Seen>,
    now_ms: i64,
    margin_ms: i64,
    grace_ms: i64,
) -> bool {
    own.is_some_and(|own| {
        own.alive_until_ms >= now_ms.saturating_add(margin_ms)
            && own.steady_since_ms.saturating_add(grace_ms) <= now_ms
    }) && owner.is_some_and(|owner| owner.alive_until_ms < now_ms)
}

/// Whether the lease of a claim that ends at `until_ms` is over at `now_ms`,
/// for an owner seen as `owner`. An owner whose key is seen fresh keeps its
/// claim `grace_ms` longer, counted from the lease's end or from the first
/// renewal seen after a gap, whichever is later: after a stall it can mark
/// the slices it published meanwhile before anyone publishes them again.
fn lease_over(until_ms: i64, owner: Option<Seen>, now_ms: i64, grace_ms: i64) -> bool {
    match owner {
        Some(owner) if owner.alive_until_ms >= now_ms => {
            until_ms.max(owner.steady_since_ms).saturating_add(grace_ms) < now_ms
        }
        _ => until_ms < now_ms,
    }
}

/// A claim as the takeover pass judges it.
enum Claim<'a> {
    Read(&'a ClaimValue),
    /// A value that is not a claim; its key.
    Unread(&'a str),
}

/// The claims of `known` this replica may take over (`takeable`), with their
/// revisions and whether their value could not be read, the slice due first
/// first: a dead replica leaves several, and the later ones can wait.
fn stale_due_first(
    known: Vec<(String, u64, Option<ClaimValue>)>,
    takeable: impl Fn(Claim<'_>) -> bool,
) -> Vec<(String, u64, bool)> {
    let mut stale: Vec<(String, u64, bool)> = known
        .into_iter()
        .filter(|(key, _, value)| match value {
            Some(value) => takeable(Claim::Read(value)),
            None => takeable(Claim::Unread(key)),
        })
        .map(|(key, revision, value)| (key, revision, value.is_none()))
        .collect();
    stale.sort_by_key(|(key, _, _)| slice_start(key));
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000;

    /// A key seen renewed steadily since `since`, now holding `until`.
    fn seen(until: i64, since: i64) -> Option<Seen> {
        Some(Seen {
            alive_until_ms: until,
            received_ms: until - SECOND,
            steady_since_ms: since,
        })
    }

    #[test]
    fn a_dead_replicas_slices_are_taken_over_the_first_due_first() {
        let claim = |owner: &str| {
            Some(ClaimValue {
                owner: owner.to_string(),
                state: ClaimState::Claimed,
                until_ms: 10 * SECOND,
            })
        };
        let known = vec![
            (slice_key(3 * SECOND, 0), 7, claim("dead")),
            (slice_key(SECOND, 0), 5, claim("dead")),
            (slice_key(4 * SECOND, 0), 9, claim("alive")),
            (slice_key(2 * SECOND, 0), 6, claim("dead")),
            (slice_key(0, 0), 4, claim("me")),
        ];
        let stale = stale_due_first(known, |claim| match claim {
            Claim::Read(value) => value.takeable_by("me", value.owner == "dead", false),
            Claim::Unread(_) => false,
        });
        assert_eq!(
            stale,
            [
                (slice_key(SECOND, 0), 5, false),
                (slice_key(2 * SECOND, 0), 6, false),
                (slice_key(3 * SECOND, 0), 7, false)
            ]
        );
    }

    #[test]
    fn an_unreadable_claim_is_judged_by_its_slice() {
        let known = vec![
            (slice_key(2 * SECOND, 0), 3, None),
            (slice_key(SECOND, 0), 2, None),
        ];
        let stale = stale_due_first(known, |claim| match claim {
            Claim::Unread(key) => slice_start(key) == Some(SECOND),
            Claim::Read(_) => true,
        });
        assert_eq!(stale, [(slice_key(SECOND, 0), 2, true)]);
    }

    #[test]
    fn a_lapsed_key_proves_its_owner_gone_only_while_the_judge_sees_its_own_renewed() {
        let (margin, grace) = (500, 2 * SECOND);
        // Its own key seen fresh (until 4.8 s at 4 s): the other's, lapsed at 3 s, is gone.
        assert!(owner_gone(
            seen(4_800, 0),
            seen(3 * SECOND, 0),
            4 * SECOND,
            margin,
            grace
        ));
        assert!(!owner_gone(
            seen(4_800, 0),
            seen(6 * SECOND, 0),
            4 * SECOND,
            margin,
            grace
        ));
        assert!(
            !owner_gone(seen(4_800, 0), None, 4 * SECOND, margin, grace),
            "never seen"
        );
        // The watch stalled (or no key can be renewed): every key seen
        // lapses, its own a moment after the other's. Nobody is gone.
        assert!(!owner_gone(
            seen(4_200, 0),
            seen(3_950, 0),
            4 * SECOND,
            margin,
            grace
        ));
        assert!(!owner_gone(
            seen(3_900, 0),
            seen(3_800, 0),
            4 * SECOND,
            margin,
            grace
        ));
        assert!(
            !owner_gone(None, seen(SECOND, 0), 4 * SECOND, margin, grace),
            "its own never seen"
        );
    }

    #[test]
    fn after_a_stall_the_others_have_two_livenesses_to_renew_before_they_are_judged() {
        let (margin, grace) = (500, 2 * SECOND);
        // The bucket had no leader until 10 s. The judge's own renewals show
        // again from 10 s; the owner's last renewal seen lapsed at 3 s, and
        // its next one is on its way.
        let owner = seen(3 * SECOND, 0);
        for now in [10_100, 11_000, 11_900] {
            let own = seen(now + 900, 10 * SECOND);
            assert!(
                !owner_gone(own, owner, now, margin, grace),
                "judged at {now} ms"
            );
        }
        // A replica that stays silent two livenesses after the stall is gone.
        assert!(owner_gone(
            seen(12_900, 10 * SECOND),
            owner,
            12 * SECOND,
            margin,
            grace
        ));
    }

    #[test]
    fn an_owner_seen_alive_keeps_its_claim_two_livenesses_past_its_lease() {
        let grace = 2 * SECOND;
        let lease_end = 5 * SECOND;
        // Not seen, or seen lapsed: the lease alone.
        assert!(lease_over(lease_end, None, 5_001, grace));
        assert!(lease_over(lease_end, seen(4 * SECOND, 0), 5_001, grace));
        assert!(!lease_over(lease_end, None, lease_end, grace));
        // Seen alive, renewing steadily: two livenesses more.
        assert!(!lease_over(
            lease_end,
            seen(8 * SECOND, 0),
            6 * SECOND,
            grace
        ));
        assert!(!lease_over(
            lease_end,
            seen(8 * SECOND, 0),
            7 * SECOND,
            grace
        ));
        assert!(lease_over(lease_end, seen(8 * SECOND, 0), 7_001, grace));
        // Seen alive again after a stall that outlasted the lease: counted
        // from its first renewal after it.
        assert!(!lease_over(
            lease_end,
            seen(12 * SECOND, 10 * SECOND),
            11 * SECOND,
            grace
        ));
        assert!(lease_over(
            lease_end,
            seen(13 * SECOND, 10 * SECOND),
            12_001,
            grace
        ));
    }

    #[test]
    fn renewals_without_a_gap_keep_their_start() {
        let liveness = SECOND;
        let first = Seen::renewed(None, 2 * SECOND, SECOND, liveness);
        assert_eq!(first.steady_since_ms, SECOND);
        let next = Seen::renewed(Some(first), 2_250, 1_250, liveness);
        assert_eq!((next.steady_since_ms, next.received_ms), (SECOND, 1_250));
        // Nothing seen for more than a liveness: steady again only from now.
        let after_gap = Seen::renewed(Some(next), 9 * SECOND, 8 * SECOND, liveness);
        assert_eq!(after_gap.steady_since_ms, 8 * SECOND);
    }

    #[test]
    fn a_slice_claimed_at_the_lookahead_is_spread_out() {
        let config = SlicerConfig::default();
        // Lookahead 3 s: the slice starting 2.95 s from now was just reached.
        assert_eq!(
            config.stage_pace(false, 2_950, 0),
            Some((100, Duration::from_millis(25), Duration::from_millis(250)))
        );
    }

    #[test]
    fn a_nearer_slice_an_early_claim_or_a_zero_spread_is_staged_at_once() {
        let config = SlicerConfig::default();
        assert_eq!(config.stage_pace(false, 2 * SECOND, 0), None, "a catch-up");
        assert_eq!(config.stage_pace(false, 0, 500), None, "the current slice");
        assert_eq!(
            config.stage_pace(true, 10 * SECOND, 0),
            None,
            "a dense slice"
        );
        let unpaced = SlicerConfig {
            stage_spread: Duration::ZERO,
            ..SlicerConfig::default()
        };
        assert_eq!(unpaced.stage_pace(false, 2_950, 0), None);
    }

    #[test]
    fn partitions_share_the_spread() {
        let config = SlicerConfig {
            partitions: 4,
            ..SlicerConfig::default()
        };
        let (_, _, spread) = config.stage_pace(false, 2_950, 0).expect("paced");
        assert_eq!(spread, Duration::from_micros(62_500));
    }

    #[test]
    fn the_spread_is_at_most_half_a_slice() {
        let config = SlicerConfig {
            slice: Duration::from_millis(100),
            lookahead: Duration::from_millis(300),
            ..SlicerConfig::default()
        };
        assert_eq!(config.validate(), Ok(()));
        let (_, _, spread) = config.stage_pace(false, 290, 0).expect("paced");
        assert_eq!(spread, Duration::from_millis(50));
    }

    #[test]
    fn a_spread_without_a_pause_is_refused() {
        let no_pause = SlicerConfig {
            stage_pause: Duration::ZERO,
            ..SlicerConfig::default()
        };
        assert!(no_pause.validate().unwrap_err().contains("pause"));
        assert_eq!(SlicerConfig::default().validate(), Ok(()));
    }
}
