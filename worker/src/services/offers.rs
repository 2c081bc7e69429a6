//! Offers: the firings of broadcast jobs addressed to this worker, core
//! NATS `chime.offer.<group>.<worker id>` (docs/PROTOCOL.md §4, "Offers").
//!
//! An offer is taken only into a free thread: the worker pulls no more than
//! it can run, and an offer it cannot take now is dropped, to be offered
//! again a second later. One it takes goes the way of any pulled firing,
//! through the dispatcher, with nothing to acknowledge.

use crate::firing::delivery::Delivery;
use crate::firing::dispatch::Dispatcher;
use crate::slots::Slots;
use async_nats::{Client, Subscriber};
use futures::StreamExt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The offer listener of one worker, as started (and restarted) by its supervisor.
#[derive(Clone)]
pub(crate) struct OfferListener {
    pub(crate) client: Client,
    /// `chime.offer.<group>.<worker id>` under the subject prefix.
    pub(crate) subject: String,
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) slots: Slots,
    /// The firings' tasks; shutdown waits for them.
    pub(crate) firings: TaskTracker,
}

impl OfferListener {
    /// Takes offers until `stop`, read from `offers` (start-up's
    /// subscription) or, when `None` (a restart), from a subscription it
    /// makes itself.
    pub(crate) async fn run(
        self,
        offers: Option<Subscriber>,
        stop: CancellationToken,
    ) -> Result<(), async_nats::SubscribeError> {
        let mut offers = match offers {
            Some(offers) => offers,
            None => self.client.subscribe(self.subject.clone()).await?,
        };
        loop {
            let offer = tokio::select! {
                offer = offers.next() => match offer {
                    Some(offer) => offer,
                    None => return Ok(()),
                },
                _ = stop.cancelled() => break,
            };
            match self.slots.try_take() {
                Some(slot) => {
                    let dispatch = self
                        .dispatcher
                        .clone()
                        .dispatch(Delivery::Offered(offer), slot);
                    self.firings.spawn(dispatch);
                }
                None => tracing::debug!("every thread is busy; leaving an offer to be made again"),
            }
        }
        let _ = offers.unsubscribe().await;
        Ok(())
    }
}
