//! Test signals: events a service reports so integration tests wait on what
//! happened instead of sleeping (after River's `internal/testsignal`).
//!
//! A [`TestSignal`] is a broadcast channel that builds its event only when
//! someone subscribed: with nobody listening, [`TestSignal::emit`] is one
//! atomic load, so production pays nothing. A test subscribes before it acts,
//! then awaits the event with [`SignalReceiver::wait_for`].

use std::fmt;
use std::time::Duration;
use tokio::sync::broadcast;

/// Events a slow listener may fall behind by before it loses the oldest.
const CAPACITY: usize = 1024;

/// One kind of event a service reports. Cheap to clone; clones share listeners.
#[derive(Clone)]
pub struct TestSignal<T> {
    sender: broadcast::Sender<T>,
}

impl<T: Clone> Default for TestSignal<T> {
    fn default() -> Self {
        TestSignal {
            sender: broadcast::Sender::new(CAPACITY),
        }
    }
}

impl<T> fmt::Debug for TestSignal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestSignal")
            .field("listeners", &self.sender.receiver_count())
            .finish()
    }
}

impl<T: Clone> TestSignal<T> {
    /// Reports the event `make` builds, if anyone listens; `make` is not
    /// called otherwise.
    pub fn emit(&self, make: impl FnOnce() -> T) {
        if self.sender.receiver_count() > 0 {
            // Fails only when the last listener left in between: nobody to tell.
            let _ = self.sender.send(make());
        }
    }

    /// Listens to the events emitted from now on.
    pub fn subscribe(&self) -> SignalReceiver<T> {
        SignalReceiver {
            receiver: self.sender.subscribe(),
        }
    }
}

/// A listener of one [`TestSignal`].
pub struct SignalReceiver<T> {
    receiver: broadcast::Receiver<T>,
}

impl<T: Clone> SignalReceiver<T> {
    /// The first event from now that `matches`; panics naming `what` after
    /// `timeout` (a test helper: a missing event is the test's failure).
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut matches: impl FnMut(&T) -> bool,
    ) -> T {
        let wait = async {
            loop {
                match self.receiver.recv().await {
                    Ok(event) if matches(&event) => return event,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {
                        panic!("the service stopped before: {what}")
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(event) => event,
            Err(_) => panic!("timed out waiting for: {what}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn nothing_is_built_while_nobody_listens() {
        let signal = TestSignal::<u32>::default();
        signal.emit(|| panic!("built an event nobody listens to"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_listener_gets_the_events_emitted_after_it_subscribed() {
        let signal = TestSignal::<u32>::default();
        let mut events = signal.subscribe();
        for n in 1..=3 {
            signal.emit(|| n);
        }
        let third = events
            .wait_for(Duration::from_secs(1), "the third event", |n| *n == 3)
            .await;
        assert_eq!(third, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out waiting for: an event never sent")]
    async fn waiting_for_an_event_never_sent_times_out() {
        let signal = TestSignal::<u32>::default();
        let mut events = signal.subscribe();
        events
            .wait_for(Duration::from_secs(1), "an event never sent", |_| true)
            .await;
    }
}
