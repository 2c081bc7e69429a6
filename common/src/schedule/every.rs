//! Fixed-rate schedules: `{"every": DURATION, "start_at"?, "end_at"?, "count"?}`.
//!
//! The nth firing is `first + (n - 1) * every`, computed directly, so the
//! scheduler needs no state (no counter of past firings) to know the next one
//! or whether `count` is used up. Arithmetic is in nanoseconds on `i128`, which
//! cannot overflow for any representable instant and period.

use crate::bounds::{check_at_most, MAX_COUNT, MAX_EVERY};
use crate::error::FieldError;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The shortest period accepted, and the granularity of every period: instants
/// are stored and written with millisecond precision.
pub(crate) const MIN_EVERY: Duration = Duration::from_millis(1);

/// A compiled fixed-rate schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedRate {
    /// The first firing; `None` when `anchor + every` is past the end of time.
    first: Option<i128>,
    /// Period in nanoseconds, at least one millisecond.
    period: i128,
    /// At most this many firings.
    count: Option<u64>,
    /// No firing after this instant (nanoseconds).
    end: Option<i128>,
}

/// Why a period is refused, or `None` when it is fine.
pub(crate) fn check_every(every: Duration) -> Option<String> {
    if let Some(too_long) = check_at_most(every, MAX_EVERY) {
        return Some(too_long);
    }
    if every < MIN_EVERY {
        Some(format!(
            "must be at least 1ms, found {}",
            if every.is_zero() {
                "0".to_string()
            } else {
                format!("{every:?}")
            }
        ))
    } else if !every.subsec_nanos().is_multiple_of(1_000_000) {
        Some(format!(
            "must be a whole number of milliseconds, found {every:?}"
        ))
    } else {
        None
    }
}

/// Why a `count` is refused, or `None`.
pub(crate) fn check_count(count: u64) -> Option<String> {
    (!(1..=MAX_COUNT).contains(&count))
        .then(|| format!("must be from 1 to {MAX_COUNT}, found {count}"))
}

/// Why an `end_at` is refused given `start_at`, or `None`.
pub(crate) fn check_window(
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
) -> Option<String> {
    match (start_at, end_at) {
        (Some(s), Some(e)) if e <= s => Some(format!(
            "must be after start_at ({})",
            crate::duration::format_time(s)
        )),
        _ => None,
    }
}

impl FixedRate {
    /// Validates and compiles; `anchor` (when the job was put) stands in for a
    /// missing `start_at`, the first firing being one period after it.
    pub(crate) fn new(
        every: Duration,
        start_at: Option<DateTime<Utc>>,
        end_at: Option<DateTime<Utc>>,
        count: Option<u64>,
        anchor: DateTime<Utc>,
    ) -> Result<FixedRate, FieldError> {
        if let Some(m) = check_every(every) {
            return Err(FieldError::new("schedule.every", m));
        }
        if let Some(m) = count.and_then(check_count) {
            return Err(FieldError::new("schedule.count", m));
        }
        if let Some(m) = check_window(start_at, end_at) {
            return Err(FieldError::new("schedule.end_at", m));
        }
        let period = every.as_nanos() as i128;
        let first = match start_at {
            Some(s) => Some(nanos(s)),
            None => Some(nanos(anchor) + period).filter(|n| instant(*n).is_some()),
        };
        Ok(FixedRate {
            first,
            period,
            count,
            end: end_at.map(nanos),
        })
    }

    /// The period.
    pub(crate) fn period(&self) -> Duration {
        Duration::from_nanos(u64::try_from(self.period).unwrap_or(u64::MAX))
    }

    /// The first firing strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = self.first?;
        let after = nanos(after);
        // Zero-based index of the next firing.
        let index = if after < first {
            0
        } else {
            (after - first) / self.period + 1
        };
        if let Some(count) = self.count {
            if index >= count as i128 {
                return None;
            }
        }
        let at = first + index * self.period;
        if self.end.is_some_and(|end| at > end) {
            return None;
        }
        instant(at)
    }
}

fn nanos(t: DateTime<Utc>) -> i128 {
    t.timestamp() as i128 * 1_000_000_000 + t.timestamp_subsec_nanos() as i128
}

fn instant(n: i128) -> Option<DateTime<Utc>> {
    let secs = i64::try_from(n.div_euclid(1_000_000_000)).ok()?;
    DateTime::from_timestamp(secs, n.rem_euclid(1_000_000_000) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::{format_time, parse_time_str};

    fn t(s: &str) -> DateTime<Utc> {
        parse_time_str(s).unwrap()
    }

    fn take(rate: &FixedRate, from: &str, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = t(from);
        while out.len() < n {
            match rate.next_after(at) {
                Some(next) => {
                    out.push(format_time(next));
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn without_start_at_the_first_firing_is_one_period_after_the_anchor() {
        let r = FixedRate::new(
            Duration::from_secs(30),
            None,
            None,
            None,
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            take(&r, "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T00:00:30.000Z",
                "2026-01-01T00:01:00.000Z",
                "2026-01-01T00:01:30.000Z"
            ]
        );
        // Asking from any later instant lands on the same grid.
        assert_eq!(
            take(&r, "2026-01-01T00:10:05.123Z", 1),
            ["2026-01-01T00:10:30.000Z"]
        );
        assert_eq!(
            take(&r, "2026-01-01T00:10:00Z", 1),
            ["2026-01-01T00:10:30.000Z"]
        );
    }

    #[test]
    fn start_at_is_the_first_firing() {
        let r = FixedRate::new(
            Duration::from_millis(1500),
            Some(t("2026-01-01T12:00:00Z")),
            None,
            None,
            t("2025-06-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            take(&r, "2025-12-31T00:00:00Z", 3),
            [
                "2026-01-01T12:00:00.000Z",
                "2026-01-01T12:00:01.500Z",
                "2026-01-01T12:00:03.000Z"
            ]
        );
        // Strictly after: from the first firing itself, the second.
        assert_eq!(
            take(&r, "2026-01-01T12:00:00Z", 1),
            ["2026-01-01T12:00:01.500Z"]
        );
    }

    #[test]
    fn count_limits_the_number_of_firings_without_state() {
        let r = FixedRate::new(
            Duration::from_secs(60),
            Some(t("2026-01-01T00:00:00Z")),
            None,
            Some(3),
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            take(&r, "2025-01-01T00:00:00Z", 10),
            [
                "2026-01-01T00:00:00.000Z",
                "2026-01-01T00:01:00.000Z",
                "2026-01-01T00:02:00.000Z"
            ]
        );
        assert_eq!(r.next_after(t("2026-01-01T00:02:00Z")), None);
        assert_eq!(r.next_after(t("2030-01-01T00:00:00Z")), None);
    }

    #[test]
    fn nothing_fires_after_end_at_but_end_at_itself_does() {
        let r = FixedRate::new(
            Duration::from_secs(60),
            Some(t("2026-01-01T00:00:00Z")),
            Some(t("2026-01-01T00:02:00Z")),
            None,
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(take(&r, "2025-12-31T00:00:00Z", 10).len(), 3);
        let r = FixedRate::new(
            Duration::from_secs(60),
            None,
            Some(t("2026-01-01T00:00:30Z")),
            None,
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(
            r.next_after(t("2025-01-01T00:00:00Z")),
            None,
            "the first firing is already past end_at"
        );
    }

    #[test]
    fn count_and_end_at_together_stop_at_whichever_comes_first() {
        let start = Some(t("2026-01-01T00:00:00Z"));
        let r = FixedRate::new(
            Duration::from_secs(1),
            start,
            Some(t("2026-01-01T00:00:10Z")),
            Some(3),
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(take(&r, "2025-01-01T00:00:00Z", 100).len(), 3);
        let r = FixedRate::new(
            Duration::from_secs(1),
            start,
            Some(t("2026-01-01T00:00:01Z")),
            Some(3),
            t("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        assert_eq!(take(&r, "2025-01-01T00:00:00Z", 100).len(), 2);
    }

    #[test]
    fn bad_periods_counts_and_windows_are_refused_by_field() {
        let a = t("2026-01-01T00:00:00Z");
        let e = FixedRate::new(Duration::ZERO, None, None, None, a).unwrap_err();
        assert_eq!(e.field, "schedule.every");
        let e = FixedRate::new(Duration::from_micros(1500), None, None, None, a).unwrap_err();
        assert!(e.message.contains("whole number of milliseconds"), "{e}");
        let e = FixedRate::new(Duration::from_secs(1), None, None, Some(0), a).unwrap_err();
        assert_eq!(e.field, "schedule.count");
        let e = FixedRate::new(Duration::from_secs(1), Some(a), Some(a), None, a).unwrap_err();
        assert_eq!(e.field, "schedule.end_at");
    }

    #[test]
    fn periods_beyond_the_range_are_refused() {
        let a = t("2026-01-01T00:00:00Z");
        let e = FixedRate::new(Duration::from_secs(u64::MAX / 2), None, None, None, a).unwrap_err();
        assert_eq!(e.field, "schedule.every");
        assert!(e.message.contains("at most"), "{e}");
    }

    #[test]
    fn the_longest_period_from_the_last_instant_ends_without_overflowing() {
        let last = t("2099-12-31T23:59:59.999Z");
        let r = FixedRate::new(MAX_EVERY, Some(last), None, Some(MAX_COUNT), last).unwrap();
        let mut at = r.next_after(t("2099-01-01T00:00:00Z"));
        assert_eq!(at, Some(last));
        for _ in 0..10_000 {
            match at.and_then(|a| r.next_after(a)) {
                Some(next) => at = Some(next),
                None => break,
            }
        }
        let r = FixedRate::new(MAX_EVERY, None, None, None, last).unwrap();
        assert!(r.next_after(last).is_some());
    }
}
