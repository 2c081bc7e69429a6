//! From local wall-clock matches to instants: the daylight-saving rule.
//!
//! A cron expression matches local times; a local time is one instant, two
//! (repeated at fall-back) or none (skipped at spring-forward). A job's `dst`
//! policy (`dst.rs`) says what happens to each:
//!
//! - `gap: shift`: a matching time inside a spring-forward gap fires at the
//!   first instant after the gap (the transition itself); `skip`: it does not
//!   fire.
//! - `repeat: first`: a matching time that repeats at fall-back fires at its
//!   first occurrence only; `both`: at both.
//!
//! Without a policy the contract takes Vixie cron's rule: fixed hours (the
//! hour field is a number, list or range) shift and fire the first
//! occurrence, so the job fires once per local day; hour field `*` or a step
//! follows real time: skip, and both.
//!
//! The search walks local times in wall-clock order (`calendar.rs`) and maps
//! each match to instants. Wall-clock order is instant order except inside a
//! fall-back overlap, where the second occurrences of the repeated times come
//! after the first occurrences of all of them. The only way that reordering can
//! hide an answer is when `after` itself lies in the first occurrence of an
//! overlap: second occurrences of repeated times *before* `after`'s wall-clock
//! time are then still to come. That case is looked up separately and the
//! earlier of the two answers wins.

use super::calendar::SEARCH_YEARS;
use super::dst::{DstMark, DstRule, Gap, Repeat};
use super::masks::CronExpr;
use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::{GapInfo, Tz};

/// An instant and, when a transition made it, how.
pub(crate) type Marked = (DateTime<Utc>, Option<DstMark>);

/// The first firing instant strictly after `after` under `rule`, or `None`
/// when there is none within the search window.
pub(crate) fn next_after(
    expr: &CronExpr,
    tz: Tz,
    rule: DstRule,
    after: DateTime<Utc>,
) -> Option<Marked> {
    if tz == Tz::UTC {
        let last_year = after.year().checked_add(SEARCH_YEARS)?;
        return expr
            .next_naive_after(after.naive_utc(), last_year)
            .map(|n| (n.and_utc(), None));
    }
    let local = after.with_timezone(&tz);
    // Within hours of the ends of time the local time is not representable
    // (`naive_local` panics there); nothing fires beyond them.
    let wall = after.naive_utc().checked_add_offset(local.offset().fix())?;
    let last_year = wall.year().checked_add(SEARCH_YEARS)?;

    // Second occurrences still to come of repeated times at or before `wall`.
    let mut repeated = None;
    if rule.repeat == Repeat::Both {
        if let LocalResult::Ambiguous(first, second) = tz.from_local_datetime(&wall) {
            if local.offset().fix() == first.offset().fix() {
                let (start, end) = overlap(tz, &first, &second);
                repeated = expr
                    .next_naive_after(start - TimeDelta::seconds(1), last_year)
                    .filter(|n| *n < end)
                    .and_then(|n| tz.from_local_datetime(&n).latest())
                    .map(|t| (t.with_timezone(&Utc), Some(DstMark::Repeated)));
            }
        }
    }

    let mut cursor = wall;
    let found = loop {
        let Some(n) = expr.next_naive_after(cursor, last_year) else {
            break None;
        };
        cursor = n;
        let candidate = match tz.from_local_datetime(&n) {
            LocalResult::Single(t) => Some((t, None)),
            LocalResult::Ambiguous(first, second) => match rule.repeat {
                Repeat::Both if first > local => Some((first, Some(DstMark::Repeated))),
                Repeat::Both => Some((second, Some(DstMark::Repeated))),
                Repeat::First if first > local => Some((first, None)),
                // The first occurrence has already fired.
                Repeat::First => None,
            },
            LocalResult::None => {
                let end = GapInfo::new(&n, &tz).and_then(|g| g.end);
                match end {
                    Some(end) if rule.gap == Gap::Shift => Some((end, Some(DstMark::Shifted))),
                    Some(end) => {
                        // Skip the rest of the gap in one step.
                        cursor = cursor.max(end.naive_local() - TimeDelta::seconds(1));
                        None
                    }
                    None => None,
                }
            }
        };
        if let Some((t, mark)) = candidate.filter(|(t, _)| *t > local) {
            break Some((t.with_timezone(&Utc), mark));
        }
    };
    match (found, repeated) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The wall-clock range `[start, end)` that a fall-back transition repeats,
/// given the two instants of one time inside it.
fn overlap(tz: Tz, first: &DateTime<Tz>, second: &DateTime<Tz>) -> (NaiveDateTime, NaiveDateTime) {
    let old = first.offset().fix();
    let new = second.offset().fix();
    // The transition lies in (first, second]; tz data has whole-second transitions.
    let mut lo = first.timestamp();
    let mut hi = second.timestamp() + 1;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let at = DateTime::from_timestamp(mid, 0).expect("between two valid instants");
        if tz.offset_from_utc_datetime(&at.naive_utc()).fix() == old {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let transition = DateTime::from_timestamp(hi, 0)
        .expect("between two valid instants")
        .naive_utc();
    (
        transition + TimeDelta::seconds(new.local_minus_utc().into()),
        transition + TimeDelta::seconds(old.local_minus_utc().into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::{format_time, parse_time_str};

    /// The next `n` firings after `from` under the v1 rule, formatted.
    fn fire(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let e = CronExpr::parse(expr).unwrap();
        let tz: Tz = tz.parse().unwrap();
        let rule = super::super::dst::DstPolicy::default().rule(e.fixed_hours);
        let mut t = parse_time_str(from).unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            t = next_after(&e, tz, rule, t).unwrap().0;
            out.push(format_time(t));
        }
        out
    }

    #[test]
    fn berlin_fixed_time_in_the_spring_gap_fires_at_the_transition() {
        // The contract's worked example: 02:30 does not exist on 2026-03-29.
        assert_eq!(
            fire("0 30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", 3),
            [
                "2026-03-28T01:30:00.000Z",
                "2026-03-29T01:00:00.000Z",
                "2026-03-30T00:30:00.000Z"
            ]
        );
    }

    #[test]
    fn berlin_fixed_time_in_the_repeated_hour_fires_once() {
        // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
        assert_eq!(
            fire("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 3),
            [
                "2026-10-25T00:30:00.000Z",
                "2026-10-26T01:30:00.000Z",
                "2026-10-27T01:30:00.000Z"
            ]
        );
    }

    #[test]
    fn berlin_star_hour_follows_real_time() {
        // Spring: 02:00-02:59 local does not exist; 01:30 CET then 03:00 CEST.
        assert_eq!(
            fire("*/30 * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", 3),
            [
                "2026-03-29T00:30:00.000Z",
                "2026-03-29T01:00:00.000Z",
                "2026-03-29T01:30:00.000Z"
            ]
        );
        // Autumn: 02:00 and 02:30 fire in CEST and again in CET.
        assert_eq!(
            fire("*/30 * * * *", "Europe/Berlin", "2026-10-24T23:45:00Z", 5),
            [
                "2026-10-25T00:00:00.000Z",
                "2026-10-25T00:30:00.000Z",
                "2026-10-25T01:00:00.000Z",
                "2026-10-25T01:30:00.000Z",
                "2026-10-25T02:00:00.000Z"
            ]
        );
    }

    #[test]
    fn new_york_spring_gap_and_fall_repeat() {
        // 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00Z).
        assert_eq!(
            fire("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 3),
            [
                "2026-03-08T07:00:00.000Z",
                "2026-03-09T06:30:00.000Z",
                "2026-03-10T06:30:00.000Z"
            ]
        );
        // A list and a range are fixed hours too: 02:15 in the gap fires at 03:00 EDT.
        assert_eq!(
            fire(
                "15 1-2 * * *",
                "America/New_York",
                "2026-03-08T05:00:00Z",
                3
            ),
            [
                "2026-03-08T06:15:00.000Z",
                "2026-03-08T07:00:00.000Z",
                "2026-03-09T05:15:00.000Z"
            ]
        );
        // 2026-11-01 02:00 EDT falls back to 01:00 EST: 01:30 fires at 05:30Z only.
        assert_eq!(
            fire("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
            ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]
        );
        // Every minute of hour 1 (fixed): the repeated hour runs once, in EDT.
        let t = fire("* 1 * * *", "America/New_York", "2026-11-01T05:58:00Z", 2);
        assert_eq!(t, ["2026-11-01T05:59:00.000Z", "2026-11-02T06:00:00.000Z"]);
        // Real time across the repeat: both 01:00s, both 01:40s.
        assert_eq!(
            fire(
                "*/20 * * * *",
                "America/New_York",
                "2026-11-01T04:50:00Z",
                8
            ),
            [
                "2026-11-01T05:00:00.000Z",
                "2026-11-01T05:20:00.000Z",
                "2026-11-01T05:40:00.000Z",
                "2026-11-01T06:00:00.000Z",
                "2026-11-01T06:20:00.000Z",
                "2026-11-01T06:40:00.000Z",
                "2026-11-01T07:00:00.000Z",
                "2026-11-01T07:20:00.000Z"
            ]
        );
        // Hourly across the gap: 01:00 EST then 03:00 EDT, no 02:00.
        assert_eq!(
            fire("0 * * * *", "America/New_York", "2026-03-08T05:30:00Z", 2),
            ["2026-03-08T06:00:00.000Z", "2026-03-08T07:00:00.000Z"]
        );
    }

    #[test]
    fn starting_inside_the_first_occurrence_still_sees_the_second() {
        // From 01:50 EDT: 01:00 EST (06:00Z) is still to come, before 02:00 EST.
        assert_eq!(
            fire("0 * * * *", "America/New_York", "2026-11-01T05:50:00Z", 2),
            ["2026-11-01T06:00:00.000Z", "2026-11-01T07:00:00.000Z"]
        );
        assert_eq!(
            fire("10 * * * *", "America/New_York", "2026-11-01T05:30:00Z", 3),
            [
                "2026-11-01T06:10:00.000Z",
                "2026-11-01T07:10:00.000Z",
                "2026-11-01T08:10:00.000Z"
            ]
        );
        // Starting in the second occurrence.
        assert_eq!(
            fire(
                "*/20 * * * *",
                "America/New_York",
                "2026-11-01T06:05:00Z",
                2
            ),
            ["2026-11-01T06:20:00.000Z", "2026-11-01T06:40:00.000Z"]
        );
    }

    #[test]
    fn lord_howe_half_hour_shift() {
        // Australia/Lord_Howe: +10:30 standard, +11 summer, changing at 02:00.
        // 2026-10-04 02:00 +10:30 jumps to 02:30 +11 (2026-10-03T15:30Z).
        assert_eq!(
            fire(
                "15 2 * * *",
                "Australia/Lord_Howe",
                "2026-10-02T12:00:00Z",
                3
            ),
            [
                "2026-10-02T15:45:00.000Z",
                "2026-10-03T15:30:00.000Z",
                "2026-10-04T15:15:00.000Z"
            ]
        );
        // Real time: 02:00 and 02:15 do not exist, 02:30 does.
        assert_eq!(
            fire(
                "*/15 * * * *",
                "Australia/Lord_Howe",
                "2026-10-03T15:10:00Z",
                2
            ),
            ["2026-10-03T15:15:00.000Z", "2026-10-03T15:30:00.000Z"]
        );
        // 2026-04-05 02:00 +11 falls back to 01:30 +10:30 (2026-04-04T15:00Z):
        // 01:45 happens at 14:45Z and 15:15Z; only the first fires. The next
        // day's 01:45 is +10:30.
        assert_eq!(
            fire(
                "45 1 * * *",
                "Australia/Lord_Howe",
                "2026-04-04T12:00:00Z",
                2
            ),
            ["2026-04-04T14:45:00.000Z", "2026-04-05T15:15:00.000Z"]
        );
        assert_eq!(
            fire(
                "*/15 * * * *",
                "Australia/Lord_Howe",
                "2026-04-04T14:20:00Z",
                5
            ),
            [
                "2026-04-04T14:30:00.000Z",
                "2026-04-04T14:45:00.000Z",
                "2026-04-04T15:00:00.000Z",
                "2026-04-04T15:15:00.000Z",
                "2026-04-04T15:30:00.000Z"
            ]
        );
    }

    #[test]
    fn tokyo_has_no_transitions() {
        assert_eq!(
            fire("0 30 2 * * *", "Asia/Tokyo", "2026-03-28T00:00:00Z", 3),
            [
                "2026-03-28T17:30:00.000Z",
                "2026-03-29T17:30:00.000Z",
                "2026-03-30T17:30:00.000Z"
            ]
        );
        assert_eq!(
            fire("0 * * * *", "Asia/Tokyo", "2026-11-01T00:10:00Z", 2),
            ["2026-11-01T01:00:00.000Z", "2026-11-01T02:00:00.000Z"]
        );
    }

    /// Found by fuzzing (fuzz/regressions/schedule/): the local time of an
    /// instant within hours of chrono's ends is out of range.
    #[test]
    fn the_ends_of_time_in_a_zone_are_not_a_panic() {
        let rule = super::super::dst::DstPolicy::default().rule(true);
        let e = CronExpr::parse("0 0 1,15 * *").unwrap();
        let tz: Tz = "America/Sao_Paulo".parse().unwrap();
        assert_eq!(next_after(&e, tz, rule, DateTime::<Utc>::MIN_UTC), None);
        let e = CronExpr::parse("0 0 0 ? * L").unwrap();
        let tz: Tz = "Asia/Kathmandu".parse().unwrap();
        assert_eq!(next_after(&e, tz, rule, DateTime::<Utc>::MAX_UTC), None);
    }

    #[test]
    fn overlap_bounds_are_the_repeated_wall_clock_hour() {
        let tz: Tz = "America/New_York".parse().unwrap();
        let wall = chrono::NaiveDate::from_ymd_opt(2026, 11, 1)
            .unwrap()
            .and_hms_opt(1, 30, 0)
            .unwrap();
        let LocalResult::Ambiguous(a, b) = tz.from_local_datetime(&wall) else {
            panic!("01:30 repeats on 2026-11-01");
        };
        let (start, end) = overlap(tz, &a, &b);
        assert_eq!(start.to_string(), "2026-11-01 01:00:00");
        assert_eq!(end.to_string(), "2026-11-01 02:00:00");
    }
}
