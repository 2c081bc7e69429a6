//! `jitter`: each instant of a job moves later by a fixed amount in
//! `[0, jitter)`, drawn from the job's seed and the instant, so a thousand
//! jobs on the same schedule do not start together and every replica agrees
//! on when each one fires.
//!
//! The jittered instants of a schedule are the set `{t + offset(t)}` over its
//! instants `t`; [`Jitter::next_after`] finds the least of them after a
//! time. With `jitter` at most the schedule's shortest period (the validated
//! rule, `period.rs`) the set keeps the order of the instants, but the search
//! does not rely on it: a daylight-saving shift can bring two instants closer
//! than the period.

use super::seed::Seed;
use chrono::{DateTime, TimeDelta, Utc};

/// Instants looked at per search at most; with `jitter` at most the period
/// there are two or three.
const MAX_STEPS: u32 = 64;

/// A compiled jitter: at least one millisecond wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Jitter {
    seed: Seed,
    width_ms: i64,
}

impl Jitter {
    /// `None` for a width under one millisecond (no jitter).
    pub(crate) fn new(seed: Seed, width: std::time::Duration) -> Option<Jitter> {
        let width_ms = i64::try_from(width.as_millis()).ok()?;
        (width_ms >= 1).then_some(Jitter { seed, width_ms })
    }

    /// How much later the instant `t` fires: whole milliseconds in `[0, width)`.
    pub(crate) fn offset(&self, t: DateTime<Utc>) -> TimeDelta {
        let draw = self
            .seed
            .draw(&t.timestamp_millis().to_be_bytes())
            .rem_euclid(self.width_ms as u64);
        TimeDelta::milliseconds(draw as i64)
    }

    /// The least jittered instant strictly after `after`, given `next(t)`,
    /// the schedule's first instant strictly after `t` with what travels with
    /// it (its daylight-saving mark).
    pub(crate) fn next_after<M>(
        &self,
        after: DateTime<Utc>,
        next: impl Fn(DateTime<Utc>) -> Option<(DateTime<Utc>, M)>,
    ) -> Option<(DateTime<Utc>, M)> {
        // An instant before `after - width` cannot land after `after`.
        let mut cursor = after
            .checked_sub_signed(TimeDelta::milliseconds(self.width_ms))
            .unwrap_or(after);
        let mut best: Option<(DateTime<Utc>, M)> = None;
        for _ in 0..MAX_STEPS {
            let Some((t, mark)) = next(cursor) else { break };
            // Later instants land at or after themselves: none can beat `best`.
            if best.as_ref().is_some_and(|(b, _)| t >= *b) {
                break;
            }
            let Some(moved) = t.checked_add_signed(self.offset(t)) else {
                break;
            };
            if moved > after && best.as_ref().is_none_or(|(b, _)| moved < *b) {
                best = Some((moved, mark));
            }
            cursor = t;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    /// Every `period` ms from 0.
    fn every(period: i64) -> impl Fn(DateTime<Utc>) -> Option<(DateTime<Utc>, ())> {
        move |t| {
            let ms = t.timestamp_millis();
            Some((at((ms.div_euclid(period) + 1) * period), ()))
        }
    }

    #[test]
    fn offsets_are_fixed_and_within_the_width() {
        let j = Jitter::new(Seed::of_job("a"), Duration::from_secs(60)).unwrap();
        for i in 0..1000 {
            let o = j.offset(at(i * 60_000));
            assert!(o >= TimeDelta::zero() && o < TimeDelta::seconds(60), "{o}");
            assert_eq!(o, j.offset(at(i * 60_000)));
        }
        assert!(Jitter::new(Seed::ANY, Duration::ZERO).is_none());
        assert!(Jitter::new(Seed::ANY, Duration::from_micros(999)).is_none());
    }

    #[test]
    fn the_search_walks_the_jittered_instants_in_order() {
        let j = Jitter::new(Seed::of_job("b"), Duration::from_secs(60)).unwrap();
        let next = every(60_000);
        let expected: Vec<DateTime<Utc>> = (1..=50)
            .map(|i| at(i * 60_000) + j.offset(at(i * 60_000)))
            .collect();
        let mut t = at(59_999);
        for want in &expected {
            t = j.next_after(t, &next).unwrap().0;
            assert_eq!(t, *want);
        }
        // From any time between two, the next one.
        for want in expected.windows(2) {
            let mid = want[0] + (want[1] - want[0]) / 2;
            assert_eq!(j.next_after(mid, &next).unwrap().0, want[1]);
            assert_eq!(
                j.next_after(want[1] - TimeDelta::milliseconds(1), &next)
                    .unwrap()
                    .0,
                want[1]
            );
        }
    }

    #[test]
    fn instants_closer_than_the_width_are_still_found_least_first() {
        // A width of three periods: the jittered set is no longer in the
        // instants' order, and the search still yields it increasing.
        let j = Jitter::new(Seed::of_job("c"), Duration::from_millis(300)).unwrap();
        let next = every(100);
        let mut all: Vec<DateTime<Utc>> = (-5..200)
            .map(|i| at(i * 100) + j.offset(at(i * 100)))
            .collect();
        all.sort();
        all.dedup();
        let mut t = at(250);
        for want in all.iter().filter(|x| **x > at(250)).take(150) {
            t = j.next_after(t, &next).unwrap().0;
            assert_eq!(t, *want);
        }
    }
}
