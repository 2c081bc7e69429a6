//! The fetch loop: pulls as many firings as there are free threads, highest band first.
//!
//! - `free = threads - in_flight`; nothing is fetched that cannot start now
//!   (no pull-ahead: a buffered message would run down its `ack_wait`).
//! - A round fetches up to `free` from `high`, then what is still free from
//!   `normal`, then from `low`. Fetches are no-wait with a short `expires`:
//!   they return what is there at once (a fetch without `expires` can hang
//!   once `max_ack_pending` is full; an empty band costs the `expires`).
//! - A band that returned fewer messages than asked is drained; it is not
//!   fetched again until the doorbell `chime.ready.<group>` rings for it (its
//!   body names the bands that got firings; an empty body means all) or the
//!   poll interval passes (redeliveries, missed doorbells). A band that
//!   filled the request is fetched again as soon as a thread frees up.
//! - With nothing to fetch the loop holds a pull request open on each
//!   drained band (`open_pull.rs`), when the free threads cover one for
//!   every band: a band's next firings are then delivered as they are
//!   published. Each request asks for a share of the free threads that
//!   leaves some free to reopen a spent one (`open_pull_share`).
//!   A band with a request open ignores the doorbell and the poll, and
//!   while every band has one the loop unsubscribes from the doorbell. When
//!   a band has work and no thread is free, the open requests are closed to
//!   free their threads for it.
//! - Otherwise the loop sleeps until the doorbell, the poll interval, a
//!   thread freeing up (when threads were all busy), an open request ending
//!   or shutdown.
//! - A doorbell that rings while a fetch is in flight stays queued in the
//!   subscription and is read after the round (`take_doorbells` or the
//!   sleep's `select!`): its firings may have come just after the server
//!   answered the fetch, so the loop does not sleep on it: the band is
//!   fetched again, or served by a pull request opened on it.
//! - While the worker is fenced (`fence.rs`) it fetches nothing.
//! - Each fetched message's JetStream timestamp feeds the clock offset
//!   estimate (`clock.rs`).
//! - A restarted loop opens its own consumers and doorbell subscription.

use crate::clock::ServerClock;
use crate::firing::delivery::Delivery;
use crate::firing::dispatch::Dispatcher;
use crate::services::fence::Fence;
use crate::services::open_pull::{Event, OpenPull, OPEN_PULL_MAX_MESSAGES};
use crate::slots::{Slot, Slots};
use crate::topology::find_fire_consumer;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use async_nats::{Client, Subscriber};
use chime_common::protocol::doorbell_bands;
use chime_common::{Band, Subjects};
use futures::{FutureExt, StreamExt};
use prometheus::IntCounter;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The longest an open pull request lasts: a request the server dropped
/// unannounced (a reconnect) is found this late at most.
const OPEN_PULL_MAX_EXPIRY: Duration = Duration::from_secs(1);

/// What one round did, for logs and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    /// Messages fetched per band, in [`Band::ALL`] order.
    pub fetched: [usize; 3],
    /// Fetches (or consumer look-ups) that failed.
    pub errors: usize,
}

impl Round {
    fn total(&self) -> usize {
        self.fetched.iter().sum()
    }
}

/// Where a group's firings come from: one consumer per band, and the
/// doorbell that says which bands got firings.
#[derive(Clone)]
pub(crate) struct Source {
    pub(crate) client: Client,
    pub(crate) jetstream: jetstream::Context,
    subjects: Subjects,
    group: String,
}

/// The consumers and the doorbell subscription one fetch loop reads.
pub(crate) struct Feeds {
    /// In [`Band::ALL`] order.
    pub(crate) consumers: [PullConsumer; 3],
    pub(crate) doorbell: Subscriber,
}

impl Source {
    pub(crate) fn new(
        client: Client,
        jetstream: jetstream::Context,
        subjects: Subjects,
        group: String,
    ) -> Self {
        Source {
            client,
            jetstream,
            subjects,
            group,
        }
    }

    /// The firing consumer of `band`.
    pub(crate) async fn consumer(&self, band: Band) -> Result<PullConsumer, String> {
        find_fire_consumer(&self.jetstream, &self.subjects, &self.group, band).await
    }

    /// Subscribes to the group's doorbell.
    pub(crate) async fn doorbell(&self) -> Result<Subscriber, async_nats::SubscribeError> {
        self.client
            .subscribe(self.subjects.ready(&self.group))
            .await
    }

    /// Every band's consumer and a new doorbell subscription.
    async fn open(&self) -> Result<Feeds, String> {
        let mut consumers = Vec::new();
        for band in Band::ALL {
            consumers.push(self.consumer(band).await?);
        }
        let consumers: [PullConsumer; 3] = consumers
            .try_into()
            .map_err(|_| "three bands, three consumers".to_string())?;
        let doorbell = self
            .doorbell()
            .await
            .map_err(|e| format!("subscribing to the doorbell: {e}"))?;
        Ok(Feeds {
            consumers,
            doorbell,
        })
    }
}

/// The fetch loop of one worker, as started (and restarted) by its supervisor.
#[derive(Clone)]
pub(crate) struct Puller {
    pub(crate) source: Source,
    /// Takes each fetched message from receipt to report.
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) slots: Slots,
    pub(crate) fence: Fence,
    /// The firings' tasks; shutdown waits for them.
    pub(crate) firings: TaskTracker,
    pub(crate) clock: ServerClock,
    pub(crate) fetch_errors: IntCounter,
    /// See [`WorkerConfig::poll_interval`](crate::WorkerConfig::poll_interval).
    pub(crate) poll_interval: Duration,
    /// See [`WorkerConfig::fetch_expiry`](crate::WorkerConfig::fetch_expiry).
    pub(crate) fetch_expiry: Duration,
    /// True while the loop waits with nothing it can fetch now
    /// ([`WorkerHandle::waiting`](crate::WorkerHandle::waiting)).
    pub(crate) waiting: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Puller {
    /// Fetches and dispatches until `stop`, reading `feeds` (start-up's) or,
    /// when `None` (a restart), feeds it opens itself. Messages already
    /// fetched are dispatched before it returns; nothing is left held and
    /// unstarted.
    pub(crate) async fn run(
        self,
        feeds: Option<Feeds>,
        stop: CancellationToken,
    ) -> Result<(), String> {
        let feeds = match feeds {
            Some(feeds) => feeds,
            None => self.source.open().await?,
        };
        let pulling = Pulling {
            puller: self,
            consumers: feeds.consumers.map(Some),
            maybe_work: [true; 3],
            open: [None, None, None],
            by_doorbell: [false; 3],
            doorbell: Some(feeds.doorbell),
        };
        pulling.run(stop).await;
        Ok(())
    }
}

/// One run of the fetch loop and what it learned.
struct Pulling {
    puller: Puller,
    /// One consumer per band, in [`Band::ALL`] order; `None` after a failure, looked up again next round.
    consumers: [Option<PullConsumer>; 3],
    /// Whether a band may hold messages (see the module docs).
    maybe_work: [bool; 3],
    /// The pull request held open on each band, if any.
    open: [Option<OpenPull>; 3],
    /// Bands whose last open request failed: they wait for the doorbell
    /// until the next poll.
    by_doorbell: [bool; 3],
    doorbell: Option<Subscriber>,
}

impl Pulling {
    async fn run(mut self, stop: CancellationToken) {
        let mut poll = tokio::time::interval(self.puller.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        loop {
            if stop.is_cancelled() {
                break;
            }
            if self.puller.fence.is_fenced() {
                self.close_open_pulls().await;
                let fence = self.puller.fence.clone();
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = fence.lifted() => self.maybe_work = [true; 3],
                }
                continue;
            }
            self.take_doorbells();
            let round = self.run_once().await;
            let slots = self.puller.slots.clone();
            if round.errors > 0 {
                // Back off until the next poll tick (or a doorbell).
                tracing::debug!(?round, "fetch round had errors");
            } else if round.total() > 0 && slots.free() > 0 && self.maybe_work.contains(&true) {
                continue;
            } else if slots.free() == 0 && self.waits_for_open_pulls() {
                self.close_open_pulls().await;
                continue;
            }
            self.open_pulls().await;
            if self.follow_doorbell().await {
                continue;
            }
            let all_busy = slots.free() == 0;
            self.puller.waiting.send_replace(true);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = slots.freed(), if all_busy => {}
                _ = poll.tick() => {
                    self.by_doorbell = [false; 3];
                    self.rung(&Band::ALL);
                }
                rung = next_doorbell(&mut self.doorbell) => match rung {
                    Some(bands) => self.rung(&bands),
                    None => self.doorbell = None,
                },
                (i, event) = next_event(&mut self.open) => self.on_open_pull(i, event),
            }
            self.puller.waiting.send_replace(false);
        }
        self.close_open_pulls().await;
        if let Some(doorbell) = self.doorbell.as_mut() {
            let _ = doorbell.unsubscribe().await;
        }
    }

    /// Whether a band has work that only threads set aside for open pull
    /// requests could take.
    fn waits_for_open_pulls(&self) -> bool {
        let has_open = self.open.iter().any(Option::is_some);
        let waiting = (0..Band::ALL.len()).any(|i| self.maybe_work[i] && self.open[i].is_none());
        has_open && waiting
    }

    /// Opens a pull request on each drained band without one, when the free
    /// threads cover one for every such band (a band left to the doorbell
    /// would otherwise find every free thread set aside). Each asks for
    /// [`open_pull_share`] messages.
    async fn open_pulls(&mut self) {
        let lacking = self.lacking_open_pulls();
        let free = self.puller.slots.free();
        if lacking == 0 || lacking > free {
            return;
        }
        let share = open_pull_share(free, lacking);
        let expires = self.puller.poll_interval.min(OPEN_PULL_MAX_EXPIRY);
        for i in 0..Band::ALL.len() {
            if !self.lacks_open_pull(i) {
                continue;
            }
            // A consumer that failed is looked up again by the next round.
            let Some(consumer) = self.consumers[i].clone() else {
                continue;
            };
            let reserved: Vec<_> = (0..share)
                .map_while(|_| self.puller.slots.try_reserve())
                .collect();
            if reserved.is_empty() {
                return;
            }
            match OpenPull::open(&consumer, reserved, expires).await {
                Ok(pull) => self.open[i] = Some(pull),
                Err(error) => self.open_pull_failed(i, &error),
            }
        }
    }

    /// Subscribes to the doorbell while a band has no request open, and
    /// unsubscribes while every band has one: each ring would wake the
    /// worker for nothing. Returns whether it subscribed; the bands without
    /// a request are then fetched once, for a ring it may have missed.
    async fn follow_doorbell(&mut self) -> bool {
        let needed = self.open.iter().any(Option::is_none);
        match (self.doorbell.as_mut(), needed) {
            (Some(doorbell), false) => {
                let _ = doorbell.unsubscribe().await;
                self.doorbell = None;
                false
            }
            (None, true) => match self.puller.source.doorbell().await {
                Ok(doorbell) => {
                    self.doorbell = Some(doorbell);
                    for i in 0..Band::ALL.len() {
                        if self.open[i].is_none() {
                            self.maybe_work[i] = true;
                        }
                    }
                    true
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot subscribe to the doorbell; waiting for the poll");
                    false
                }
            },
            _ => false,
        }
    }

    /// Whether band `i` is drained, could hold a request open and has none.
    fn lacks_open_pull(&self, i: usize) -> bool {
        self.open[i].is_none() && !self.maybe_work[i] && !self.by_doorbell[i]
    }

    /// How many bands lack an open pull request.
    fn lacking_open_pulls(&self) -> usize {
        (0..Band::ALL.len())
            .filter(|&i| self.lacks_open_pull(i))
            .count()
    }

    /// What an open pull request on band `i` brought.
    fn on_open_pull(&mut self, i: usize, event: Event) {
        match event {
            Event::Delivered {
                message,
                slot,
                more,
            } => {
                if self.open[i].as_ref().is_none_or(OpenPull::is_spent) {
                    self.open[i] = None;
                    // Its doorbells were ignored while the request was open,
                    // so unless another request can be opened on it at once
                    // (the server then delivers what came meanwhile), fetch it.
                    let reopens = self.lacking_open_pulls() <= self.puller.slots.free();
                    if more || !reopens {
                        self.maybe_work[i] = true;
                    }
                }
                self.puller.clock.sample(&message);
                self.dispatch(*message, slot);
            }
            Event::Expired => self.open[i] = None,
            Event::Failed(error) => {
                self.open[i] = None;
                self.open_pull_failed(i, &error);
            }
        }
    }

    /// Leaves band `i` to the doorbell until the next poll, and looks its
    /// consumer up again.
    fn open_pull_failed(&mut self, i: usize, error: &str) {
        self.puller.fetch_errors.inc();
        self.consumers[i] = None;
        self.by_doorbell[i] = true;
        tracing::warn!(band = %Band::ALL[i], %error, "holding a pull request open failed");
    }

    /// Closes every open pull request, freeing the threads set aside.
    async fn close_open_pulls(&mut self) {
        for pull in self.open.iter_mut().filter_map(Option::take) {
            pull.close().await;
        }
    }

    /// Notes doorbells that rang while busy.
    fn take_doorbells(&mut self) {
        let Some(doorbell) = self.doorbell.as_mut() else {
            return;
        };
        let mut bands = Vec::new();
        while let Some(rung) = doorbell.next().now_or_never() {
            match rung {
                Some(message) => bands.extend(doorbell_bands(&message.payload)),
                None => {
                    self.doorbell = None;
                    break;
                }
            }
        }
        self.rung(&bands);
    }

    /// Notes that `bands` may hold work, except those with a request open,
    /// which is delivered whatever they get.
    fn rung(&mut self, bands: &[Band]) {
        for (i, band) in Band::ALL.into_iter().enumerate() {
            if bands.contains(&band) && self.open[i].is_none() {
                self.maybe_work[i] = true;
            }
        }
    }

    /// One round: fetch up to the free threads, high band first, and dispatch.
    async fn run_once(&mut self) -> Round {
        let mut round = Round::default();
        for (i, band) in Band::ALL.into_iter().enumerate() {
            let free = self.puller.slots.free();
            if free == 0 {
                break;
            }
            if !self.maybe_work[i] {
                continue;
            }
            let consumer = match &self.consumers[i] {
                Some(consumer) => consumer.clone(),
                None => match self.puller.source.consumer(band).await {
                    Ok(consumer) => {
                        self.consumers[i] = Some(consumer.clone());
                        consumer
                    }
                    Err(error) => {
                        self.puller.fetch_errors.inc();
                        round.errors += 1;
                        tracing::warn!(%band, %error, "cannot open the firing consumer");
                        continue;
                    }
                },
            };
            match self.fetch(&consumer, free, &mut round.fetched[i]).await {
                Ok(()) => {
                    if round.fetched[i] < free {
                        self.maybe_work[i] = false;
                    }
                }
                Err(error) => {
                    self.puller.fetch_errors.inc();
                    round.errors += 1;
                    self.consumers[i] = None;
                    tracing::warn!(%band, %error, "fetching firings failed");
                }
            }
        }
        round
    }

    /// Runs `message` on `slot`, in a task of its own.
    fn dispatch(&self, message: jetstream::Message, slot: Slot) {
        let puller = &self.puller;
        puller.firings.spawn(
            puller
                .dispatcher
                .clone()
                .dispatch(Delivery::Pulled(message), slot),
        );
    }

    /// Fetches up to `max` messages and dispatches each as it arrives.
    async fn fetch(
        &self,
        consumer: &PullConsumer,
        max: usize,
        fetched: &mut usize,
    ) -> Result<(), String> {
        let puller = &self.puller;
        let mut batch = consumer
            .fetch()
            .max_messages(max)
            .expires(puller.fetch_expiry)
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        // The batch ends on its own: `max` messages, the server's end-of-batch
        // status, or the client's timer (`expires` + 5 s).
        while let Some(item) = batch.next().await {
            let message = item.map_err(|e| e.to_string())?;
            *fetched += 1;
            puller.clock.sample(&message);
            match puller.slots.try_take() {
                Some(slot) => self.dispatch(message, slot),
                None => {
                    // Only this loop takes slots, so this cannot happen; never hold it unstarted.
                    tracing::error!("fetched a firing without a free thread; handing it back");
                    let _ = message.ack_with(AckKind::Nak(None)).await;
                }
            }
        }
        Ok(())
    }
}

/// How many messages each of `bands` new open pull requests asks for, with
/// `free` threads: an equal share of the free threads as if there were one
/// more band, so that threads stay free to reopen a spent request without
/// closing the others (and a burst on a low band takes at most half),
/// but at least 1 and at most [`OPEN_PULL_MAX_MESSAGES`].
fn open_pull_share(free: usize, bands: usize) -> usize {
    (free / bands.saturating_add(1)).clamp(1, OPEN_PULL_MAX_MESSAGES)
}

/// Waits for the first open pull request to bring something (the highest
/// band's if several have): its band's index and what it brought.
async fn next_event(open: &mut [Option<OpenPull>; 3]) -> (usize, Event) {
    let [high, normal, low] = open;
    tokio::select! {
        biased;
        event = next_of(high) => (0, event),
        event = next_of(normal) => (1, event),
        event = next_of(low) => (2, event),
    }
}

/// Waits for `pull`'s next event; never, if there is none.
async fn next_of(pull: &mut Option<OpenPull>) -> Event {
    match pull {
        Some(pull) => pull.next().await,
        None => std::future::pending().await,
    }
}

/// Waits for the next doorbell: the bands it names, or `None` when the
/// subscription ended.
async fn next_doorbell(doorbell: &mut Option<Subscriber>) -> Option<Vec<Band>> {
    match doorbell {
        Some(doorbell) => doorbell
            .next()
            .await
            .map(|message| doorbell_bands(&message.payload)),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_requests_leave_threads_free_to_reopen_a_spent_one() {
        // Too few threads for a margin: one each, as before.
        assert_eq!(open_pull_share(3, 3), 1);
        assert_eq!(open_pull_share(1, 1), 1);
        // A margin as soon as there are threads for one.
        assert_eq!(open_pull_share(6, 3), 1);
        assert_eq!(open_pull_share(48, 3), 12);
        assert_eq!(open_pull_share(512, 3), OPEN_PULL_MAX_MESSAGES);
        for free in 4..200 {
            for bands in 1..=3.min(free) {
                let share = open_pull_share(free, bands);
                assert!(share * bands < free, "{free} free, {bands} bands: {share}");
            }
        }
    }
}
