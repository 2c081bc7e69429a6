//! What the workers' `noop` handler records: start lateness per measurement
//! window, duplicate runs, start instants.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use chime_worker::FiringContext;
use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;

/// One measurement window: the firings whose scheduled instant lies in
/// `[start_ms, end_ms)`.
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
    /// Start lateness of first attempts, µs, from the scheduled instant.
    pub lateness: Histogram<u64>,
    /// Start lateness, µs, of the runs due later than their scheduled
    /// instant (a retry, a released queued firing), from when each was due
    /// (`Chime-Due-At`): how long work waited once it could run.
    pub due_lateness: Histogram<u64>,
    /// Handler runs of first attempts.
    pub started: u64,
    /// Handler runs of later attempts (retries, re-queued lost attempts).
    pub retries: u64,
    /// Firing ids that ran more than once.
    pub duplicates: u64,
    /// Largest first-attempt lateness (µs) per scheduled second of the window.
    pub max_by_second: std::collections::BTreeMap<i64, u64>,
    /// Wall-clock ms of every handler start, in arrival order.
    pub start_times: Vec<i64>,
    seen: HashSet<String>,
}

impl Window {
    fn new(start_ms: i64, end_ms: i64) -> Self {
        Window {
            start_ms,
            end_ms,
            lateness: lateness_histogram(),
            due_lateness: lateness_histogram(),
            started: 0,
            retries: 0,
            duplicates: 0,
            max_by_second: Default::default(),
            start_times: Vec::new(),
            seen: HashSet::new(),
        }
    }

    /// The longest stretch (ms) without a handler start, between the first
    /// and last start of the window.
    pub fn longest_silence_ms(&self) -> i64 {
        let mut times = self.start_times.clone();
        times.sort_unstable();
        times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
    }

    /// How far the worst lateness per second climbed over the window, in ms:
    /// the rise, from the first second to the last, of the least-squares
    /// line through each second's worst. A rate the pipeline keeps up with
    /// scatters around a level (a rise near 0, of either sign); one it falls
    /// behind on climbs by the backlog it gathers.
    pub fn worst_growth_ms(&self) -> f64 {
        let points: Vec<(f64, f64)> = self
            .max_by_second
            .iter()
            .map(|(&second, &us)| (second as f64, us as f64 / 1000.0))
            .collect();
        rise_of_fit(&points)
    }
}

/// The rise of the least-squares line through `points` over their span of
/// x; 0 for fewer than two distinct x.
fn rise_of_fit(points: &[(f64, f64)]) -> f64 {
    if points.len() < 2 {
        return 0.0;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(sxy, sxx), (x, y)| {
        let dx = x - mean_x;
        (sxy + dx * (y - mean_y), sxx + dx * dx)
    });
    if sxx == 0.0 {
        return 0.0;
    }
    let (first, last) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    sxy / sxx * (last - first)
}

#[derive(Default)]
struct Inner {
    windows: Vec<Window>,
    total: u64,
}

/// Shared by the handler and the scenario.
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<Inner>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a window; returns its index.
    pub fn add_window(&self, start_ms: i64, end_ms: i64) -> usize {
        let mut inner = self.inner.lock().unwrap();
        inner.windows.push(Window::new(start_ms, end_ms));
        inner.windows.len() - 1
    }

    /// Called first thing in the handler.
    pub fn record(&self, ctx: &FiringContext, now: DateTime<Utc>) {
        let firing = &ctx.firing;
        self.record_start(
            &firing.firing_id,
            firing.scheduled_at,
            firing.due_at,
            firing.attempt,
            now,
        );
    }

    /// Records that the firing `firing_id` of the instant `scheduled_at`,
    /// due at `due_at`, started its `attempt` at `now`.
    pub fn record_start(
        &self,
        firing_id: &impl std::fmt::Display,
        scheduled_at: DateTime<Utc>,
        due_at: DateTime<Utc>,
        attempt: u32,
        now: DateTime<Utc>,
    ) {
        let scheduled_ms = scheduled_at.timestamp_millis();
        let now_ms = now.timestamp_millis();
        let late_us = micros_after(scheduled_at, now);
        let due_late_us = (due_at > scheduled_at).then(|| micros_after(due_at, now));
        let mut inner = self.inner.lock().unwrap();
        inner.total += 1;
        for w in inner.windows.iter_mut() {
            if scheduled_ms < w.start_ms || scheduled_ms >= w.end_ms {
                continue;
            }
            if !w.seen.insert(firing_id.to_string()) {
                w.duplicates += 1;
            }
            if attempt == 1 {
                w.started += 1;
                w.lateness.saturating_record(late_us);
                let second = (scheduled_ms - w.start_ms) / 1000;
                let max = w.max_by_second.entry(second).or_default();
                *max = (*max).max(late_us);
            } else {
                w.retries += 1;
            }
            if let Some(us) = due_late_us {
                w.due_lateness.saturating_record(us);
            }
            w.start_times.push(now_ms);
        }
    }

    /// Runs `f` on window `index`.
    pub fn with<T>(&self, index: usize, f: impl FnOnce(&Window) -> T) -> T {
        f(&self.inner.lock().unwrap().windows[index])
    }
}

/// Microseconds to the hour, three significant figures.
fn lateness_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// `now - since` in µs, at least 1 (a histogram records no zero).
fn micros_after(since: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    (now - since).num_microseconds().unwrap_or(i64::MAX).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::rise_of_fit;

    fn seconds(worst_ms: &[f64]) -> Vec<(f64, f64)> {
        worst_ms
            .iter()
            .enumerate()
            .map(|(i, &y)| (i as f64, y))
            .collect()
    }

    #[test]
    fn a_level_that_scatters_does_not_rise() {
        let rise = rise_of_fit(&seconds(&[100.0, 60.0, 140.0, 80.0, 120.0, 100.0]));
        assert!(rise.abs() < 30.0, "rise {rise}");
    }

    #[test]
    fn a_backlog_rises_by_what_it_gathered() {
        // Falling behind by a second each second: 0.5 s late, then 1.5 s, ...
        let rise = rise_of_fit(&seconds(&[500.0, 1500.0, 2500.0, 3500.0, 4500.0]));
        assert!((rise - 4000.0).abs() < 1e-6, "rise {rise}");
    }

    #[test]
    fn a_missing_second_keeps_the_slope_in_time() {
        // Seconds 0, 1 and 4 (2 and 3 had no start): 100 ms more each second.
        let rise = rise_of_fit(&[(0.0, 0.0), (1.0, 100.0), (4.0, 400.0)]);
        assert!((rise - 400.0).abs() < 1e-6, "rise {rise}");
    }

    #[test]
    fn too_few_seconds_have_no_rise() {
        assert_eq!(rise_of_fit(&[]), 0.0);
        assert_eq!(rise_of_fit(&[(3.0, 900.0)]), 0.0);
        assert_eq!(rise_of_fit(&[(3.0, 900.0), (3.0, 100.0)]), 0.0);
    }
}
