//! The publisher's alarm: wakes at an instant to the tens of microseconds.
//!
//! tokio's timer wakes on whole milliseconds (its driver parks in
//! `epoll_wait`, whose timeout is in milliseconds, and rounds deadlines up),
//! so a firing would leave the wheel up to two milliseconds after its
//! instant, a third of the whole start lateness at 1,000 firings/s. On Linux
//! the alarm is a timerfd read through tokio's reactor (`tokio-timerfd`),
//! whose expiry has nanosecond resolution; elsewhere, and if a timerfd
//! cannot be made, it is tokio's timer.

use std::time::Instant;

/// A reusable alarm (one timerfd for its whole life).
pub struct Alarm {
    #[cfg(target_os = "linux")]
    timer: Option<tokio_timerfd::Delay>,
}

impl Alarm {
    /// An alarm; must be made inside a tokio runtime.
    pub fn new() -> Self {
        Alarm {
            #[cfg(target_os = "linux")]
            timer: tokio_timerfd::Delay::new(Instant::now())
                .map_err(|e| {
                    tracing::warn!(error = %e, "no timerfd; firings leave on tokio's millisecond timer");
                })
                .ok(),
        }
    }

    /// Waits until `deadline`.
    pub async fn sleep_until(&mut self, deadline: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(timer) = &mut self.timer {
            timer.reset(deadline);
            match timer.await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "timerfd failed; firings leave on tokio's millisecond timer");
                    self.timer = None;
                }
            }
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

impl Default for Alarm {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_at_the_deadline_and_can_be_reused() {
        let mut alarm = Alarm::new();
        for wait_us in [300, 1_500, 0] {
            let deadline = Instant::now() + Duration::from_micros(wait_us);
            alarm.sleep_until(deadline).await;
            assert!(Instant::now() >= deadline, "woke before the deadline");
        }
        // A sleep abandoned half-way (the publisher's select!) leaves the
        // alarm usable for the next one.
        let abandoned = tokio::time::timeout(
            Duration::from_millis(1),
            alarm.sleep_until(Instant::now() + Duration::from_secs(60)),
        )
        .await;
        assert!(abandoned.is_err(), "a 60 s alarm went off within 1 ms");
        let deadline = Instant::now() + Duration::from_micros(500);
        alarm.sleep_until(deadline).await;
        assert!(Instant::now() >= deadline);
    }
}
