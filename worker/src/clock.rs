//! The worker's clock offset from the NATS server, measured on the firings it
//! fetches.
//!
//! JetStream stamps every message with the server's time when it stored it
//! (`published` in the message's info). `local receive time − published` is
//! the offset of the local clock from the server's (positive: the worker's
//! clock is ahead) plus the time the message spent in the stream and on the
//! wire, which is never negative. The smallest sample of a recent window is
//! therefore the tightest estimate, and an upper bound of the real offset: a
//! backlog or a redelivery only adds large samples, which the minimum ignores.
//!
//! Workers compare wall-clock deadlines (`Chime-Deadline`) with their own
//! clock, so an offset shows up as runs cut off early or late;
//! `chime_clock_offset_seconds` makes it visible.

use async_nats::jetstream;
use prometheus::Gauge;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How far back samples count.
pub const OFFSET_WINDOW: Duration = Duration::from_secs(300);
/// The most samples held (the window minimum needs far fewer in practice).
const MAX_SAMPLES: usize = 1024;

/// The minimum of the offset samples seen within [`OFFSET_WINDOW`].
#[derive(Debug)]
pub struct ClockOffset {
    window: Duration,
    /// Samples that can still become the minimum: times increase from front
    /// to back and so do offsets (a later, smaller sample makes every
    /// earlier larger one useless). The front is the window's minimum.
    candidates: VecDeque<(Instant, f64)>,
}

impl Default for ClockOffset {
    fn default() -> Self {
        ClockOffset::new(OFFSET_WINDOW)
    }
}

impl ClockOffset {
    /// An estimator over the last `window`.
    pub fn new(window: Duration) -> Self {
        ClockOffset {
            window,
            candidates: VecDeque::new(),
        }
    }

    /// Records a message stored by the server at `published_unix_nanos`
    /// (server clock) and received at `received_unix_nanos` (local clock),
    /// observed at monotonic time `now`. Returns the sample in seconds.
    pub fn observe(
        &mut self,
        now: Instant,
        published_unix_nanos: i128,
        received_unix_nanos: i128,
    ) -> Option<f64> {
        let sample = received_unix_nanos.checked_sub(published_unix_nanos)? as f64 / 1e9;
        if !sample.is_finite() {
            return None;
        }
        while self
            .candidates
            .back()
            .is_some_and(|(_, offset)| *offset >= sample)
        {
            self.candidates.pop_back();
        }
        if self.candidates.len() >= MAX_SAMPLES {
            self.candidates.pop_front();
        }
        self.candidates.push_back((now, sample));
        Some(sample)
    }

    /// The offset in seconds at monotonic time `now`: the smallest sample in
    /// the window, `None` without one.
    pub fn estimate(&mut self, now: Instant) -> Option<f64> {
        while self
            .candidates
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > self.window)
        {
            self.candidates.pop_front();
        }
        self.candidates.front().map(|(_, offset)| *offset)
    }
}

/// One worker's estimate, fed with every message its fetch loop receives
/// and published as `chime_clock_offset_seconds`. A restarted fetch loop
/// keeps feeding the same estimate.
#[derive(Clone)]
pub(crate) struct ServerClock {
    offset: Arc<Mutex<ClockOffset>>,
    gauge: Gauge,
}

impl ServerClock {
    pub(crate) fn new(gauge: Gauge) -> Self {
        ServerClock {
            offset: Arc::default(),
            gauge,
        }
    }

    /// Feeds the estimate with `message`'s server timestamp.
    pub(crate) fn sample(&self, message: &jetstream::Message) {
        let Ok(info) = message.info() else {
            return;
        };
        let Some(received) = chrono::Utc::now().timestamp_nanos_opt() else {
            return;
        };
        let now = Instant::now();
        let mut offset = self.offset.lock().unwrap_or_else(|p| p.into_inner());
        offset.observe(now, info.published.unix_timestamp_nanos(), received.into());
        if let Some(estimate) = offset.estimate(now) {
            self.gauge.set(estimate);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000_000;

    #[test]
    fn the_estimate_is_the_smallest_recent_sample() {
        let mut clock = ClockOffset::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(clock.estimate(t0), None);
        // Local clock 2 s ahead; delivery took 30 ms, then a 10 s backlog, then 5 ms.
        let server = 1_800_000_000 * S;
        clock.observe(t0, server, server + 2 * S + 30_000_000);
        clock.observe(t0, server, server + 12 * S);
        assert_eq!(clock.estimate(t0), Some(2.03));
        clock.observe(
            t0 + Duration::from_secs(1),
            server + S,
            server + 3 * S + 5_000_000,
        );
        assert_eq!(clock.estimate(t0 + Duration::from_secs(1)), Some(2.005));
    }

    #[test]
    fn a_clock_behind_the_server_gives_a_negative_offset() {
        let mut clock = ClockOffset::default();
        let now = Instant::now();
        let server = 1_800_000_000 * S;
        assert_eq!(clock.observe(now, server, server - 700_000_000), Some(-0.7));
        assert_eq!(clock.estimate(now), Some(-0.7));
    }

    #[test]
    fn old_samples_leave_the_window() {
        let mut clock = ClockOffset::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let server = 1_800_000_000 * S;
        clock.observe(t0, server, server + S / 10);
        clock.observe(t0 + Duration::from_secs(30), server, server + S);
        assert_eq!(clock.estimate(t0 + Duration::from_secs(59)), Some(0.1));
        // The small sample is older than the window: the larger, newer one remains.
        assert_eq!(clock.estimate(t0 + Duration::from_secs(61)), Some(1.0));
        assert_eq!(clock.estimate(t0 + Duration::from_secs(120)), None);
    }

    #[test]
    fn memory_stays_bounded_under_rising_samples() {
        let mut clock = ClockOffset::new(Duration::from_secs(3600));
        let t0 = Instant::now();
        for i in 0..10_000i128 {
            clock.observe(t0 + Duration::from_millis(i as u64), 0, i * 1_000_000);
        }
        assert!(clock.candidates.len() <= MAX_SAMPLES);
        assert!(clock.estimate(t0 + Duration::from_secs(10)).is_some());
    }

    #[test]
    fn extreme_timestamps_do_not_overflow() {
        let mut clock = ClockOffset::default();
        let now = Instant::now();
        assert_eq!(clock.observe(now, i128::MIN, i128::MAX), None);
        assert!(clock.observe(now, i128::MAX, 0).is_some());
    }
}
