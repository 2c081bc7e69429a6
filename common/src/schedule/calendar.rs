//! Searching a [`CronExpr`] on the local calendar: the next matching wall-clock
//! date and time, with no time zone involved (that is `zone.rs`'s job).
//!
//! The search never steps second by second: years and months are skipped by
//! their masks, the days of a month are resolved into one 32-bit mask (this is
//! where `L`, `W` and `#` are evaluated, because they depend on the month), and
//! the time of day is found with three bit scans. A typical next-firing query
//! touches one or two months.

use super::masks::{CronExpr, DayCombine, Years, LAST_YEAR};
use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, Timelike};

/// How many years past the starting point a search may look before deciding
/// there is no further firing. The Gregorian calendar repeats every 400 years,
/// so an expression that matches at all matches within this window.
pub(crate) const SEARCH_YEARS: i32 = 400;

/// Day `1 + 7k` for k = 0..5, shifted to a month's first such weekday.
const WEEKLY: u64 = 1 | 1 << 7 | 1 << 14 | 1 << 21 | 1 << 28;

impl CronExpr {
    /// The earliest matching local time strictly after `after`, looking no
    /// further than the end of `last_year`.
    pub(crate) fn next_naive_after(
        &self,
        after: NaiveDateTime,
        last_year: i32,
    ) -> Option<NaiveDateTime> {
        // Matches are whole seconds: the next candidate is the next whole second.
        let start = after
            .with_nanosecond(0)?
            .checked_add_signed(TimeDelta::seconds(1))?;
        let date = start.date();
        let day = self.next_date(date, last_year)?;
        if day == date {
            if let Some(t) = self.next_time(start.hour(), start.minute(), start.second()) {
                return Some(day.and_time(t));
            }
            let next = self.next_date(date.succ_opt()?, last_year)?;
            return Some(next.and_time(self.first_time()));
        }
        Some(day.and_time(self.first_time()))
    }

    /// Whether the local date and time matches: the slow, obvious reading,
    /// against which the tests check the search.
    #[cfg(test)]
    pub(crate) fn matches(&self, t: NaiveDateTime) -> bool {
        self.seconds & (1 << t.second()) != 0
            && self.minutes & (1 << t.minute()) != 0
            && self.hours & (1 << t.hour()) != 0
            && self.date_matches(t.date())
    }

    #[cfg(test)]
    fn date_matches(&self, d: NaiveDate) -> bool {
        self.years.contains(d.year())
            && self.months & (1 << d.month()) != 0
            && self.day_mask(d.year(), d.month()) & (1 << d.day()) != 0
    }

    /// The first matching date at or after `from`, up to the end of `last_year`.
    fn next_date(&self, from: NaiveDate, last_year: i32) -> Option<NaiveDate> {
        let (mut y, mut m, mut d) = (from.year(), from.month(), from.day());
        let last_year = match self.years {
            Years::Any => last_year,
            Years::In(_) => last_year.min(LAST_YEAR),
        };
        loop {
            if y > last_year {
                return None;
            }
            if !self.years.contains(y) {
                y = self.years.next_from(y + 1)?;
                (m, d) = (1, 1);
                continue;
            }
            let months = self.months & (!0u16 << m);
            if months == 0 {
                (y, m, d) = (y + 1, 1, 1);
                continue;
            }
            let next_m = months.trailing_zeros();
            if next_m != m {
                (m, d) = (next_m, 1);
            }
            let days = self.day_mask(y, m) & (!0u32 << d);
            if days != 0 {
                return NaiveDate::from_ymd_opt(y, m, days.trailing_zeros());
            }
            (m, d) = (m + 1, 1);
            if m > 12 {
                (y, m) = (y + 1, 1);
            }
        }
    }

    /// Bit `d` set when day `d` of the month matches both day fields as
    /// combined (Vixie's either-rule or both).
    pub(crate) fn day_mask(&self, year: i32, month: u32) -> u32 {
        let days = &self.days;
        let len = days_in_month(year, month);
        let valid: u32 = ((1u64 << (len + 1)) - 2) as u32;
        // Weekday (0 = Sunday) of the 1st.
        let first_wd = NaiveDate::from_ymd_opt(year, month, 1)
            .map(|d| d.weekday().num_days_from_sunday())
            .unwrap_or(0);

        let mut dom = days.dom & valid;
        for k in ones(days.dom_from_last) {
            if k < len {
                dom |= 1 << (len - k);
            }
        }
        for d in ones(days.dom_nearest) {
            if d <= len {
                dom |= 1 << nearest_weekday(d, len, first_wd);
            }
        }
        for k in ones(days.dom_nearest_from_last) {
            if k < len {
                dom |= 1 << nearest_weekday(len - k, len, first_wd);
            }
        }

        let mut dow: u64 = 0;
        if days.dow == 0x7f {
            dow = valid as u64;
        } else {
            for w in ones(days.dow as u32) {
                dow |= WEEKLY << first_day_with_weekday(w, first_wd);
            }
        }
        for w in 0..7u32 {
            let nth = days.dow_nth[w as usize];
            let last = days.dow_last & (1 << w) != 0;
            if nth == 0 && !last {
                continue;
            }
            let first = first_day_with_weekday(w, first_wd);
            for n in ones(nth as u32) {
                dow |= 1 << (first + 7 * (n - 1));
            }
            if last {
                dow |= 1 << (first + 7 * ((len - first) / 7));
            }
        }
        let dow = dow as u32 & valid;

        match days.combine {
            DayCombine::Both => dom & dow,
            DayCombine::Either => dom | dow,
        }
    }

    /// The earliest allowed time of day at or after `h:m:s`, if any today.
    fn next_time(&self, h: u32, m: u32, s: u32) -> Option<NaiveTime> {
        if self.hours & (1 << h) != 0 {
            if self.minutes & (1 << m) != 0 {
                if let Some(s) = next_bit(self.seconds, s) {
                    return NaiveTime::from_hms_opt(h, m, s);
                }
            }
            if let Some(m) = next_bit(self.minutes, m + 1) {
                return NaiveTime::from_hms_opt(h, m, self.seconds.trailing_zeros());
            }
        }
        let h = next_bit(self.hours as u64, h + 1)?;
        NaiveTime::from_hms_opt(
            h,
            self.minutes.trailing_zeros(),
            self.seconds.trailing_zeros(),
        )
    }

    fn first_time(&self) -> NaiveTime {
        NaiveTime::from_hms_opt(
            self.hours.trailing_zeros(),
            self.minutes.trailing_zeros(),
            self.seconds.trailing_zeros(),
        )
        .expect("the parser never produces an empty hour, minute or second field")
    }
}

/// The day of the month (1-7) of the first weekday `w`, given the 1st's weekday.
fn first_day_with_weekday(w: u32, first_wd: u32) -> u32 {
    1 + (w + 7 - first_wd) % 7
}

/// Quartz `W`: day `d` itself on Monday-Friday, else the nearest weekday
/// without leaving the month (a Saturday 1st moves to Monday the 3rd, a Sunday
/// last day back to Friday).
fn nearest_weekday(d: u32, len: u32, first_wd: u32) -> u32 {
    match (first_wd + d - 1) % 7 {
        6 if d == 1 => 3,
        6 => d - 1,
        0 if d == len => d - 2,
        0 => d + 1,
        _ => d,
    }
}

pub(crate) fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// The lowest set bit at or above `from`.
fn next_bit(mask: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let m = mask & (!0u64 << from);
    (m != 0).then(|| m.trailing_zeros())
}

/// The positions of the set bits, lowest first.
fn ones(mut mask: u32) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros();
            mask &= mask - 1;
            i
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(expr: &str, year: i32, month: u32) -> Vec<u32> {
        let e = CronExpr::parse(expr).unwrap();
        let mask = e.day_mask(year, month);
        (1..=31).filter(|d| mask & (1 << d) != 0).collect()
    }

    #[test]
    fn nearest_weekday_stays_in_the_month() {
        // 2022-10-01 is a Saturday: 1W is Monday the 3rd, not September 30.
        assert_eq!(days("0 0 1W * *", 2022, 10), vec![3]);
        // 2026-05-31 is a Sunday: 31W is Friday the 29th.
        assert_eq!(days("0 0 31W * *", 2026, 5), vec![29]);
        // 2026-03-15 is a Sunday: Monday the 16th. 2026-08-15 is a Saturday: Friday the 14th.
        assert_eq!(days("0 0 15W * *", 2026, 3), vec![16]);
        assert_eq!(days("0 0 15W * *", 2026, 8), vec![14]);
        // A Wednesday stays.
        assert_eq!(days("0 0 15W * *", 2026, 4), vec![15]);
        // 30W in February: no such day, no firing that month.
        assert_eq!(days("0 0 30W * *", 2026, 2), Vec::<u32>::new());
    }

    #[test]
    fn last_day_forms() {
        assert_eq!(days("0 0 L * *", 2024, 2), vec![29]);
        assert_eq!(days("0 0 L * *", 2026, 2), vec![28]);
        assert_eq!(days("0 0 L-2 * *", 2026, 4), vec![28]);
        // 2026-05-31 is a Sunday: the last weekday is Friday the 29th.
        assert_eq!(days("0 0 LW * *", 2026, 5), vec![29]);
        assert_eq!(days("0 0 1,L * *", 2026, 6), vec![1, 30]);
    }

    #[test]
    fn nth_and_last_weekdays() {
        // March 2026: Sundays 1, 8, 15, 22, 29; Fridays 6, 13, 20, 27.
        assert_eq!(days("0 0 * * 5#3", 2026, 3), vec![20]);
        assert_eq!(days("0 0 * * 0#5", 2026, 3), vec![29]);
        assert_eq!(days("0 0 * * 5#5", 2026, 3), Vec::<u32>::new());
        assert_eq!(days("0 0 * * 5L", 2026, 3), vec![27]);
        assert_eq!(days("0 0 * * FRIL", 2026, 3), vec![27]);
        // Quartz numbering: 6 = Friday, 5 = Thursday.
        assert_eq!(days("0 0 0 ? * 6#3", 2026, 3), vec![20]);
        assert_eq!(days("0 0 0 ? * 5L", 2026, 3), vec![26]);
        assert_eq!(days("0 0 0 ? * L", 2026, 3), vec![7, 14, 21, 28]);
    }

    #[test]
    fn the_search_finds_exactly_the_matching_minutes() {
        let start = NaiveDate::from_ymd_opt(2026, 2, 20)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap();
        for text in ["*/7 1-3 L,15W * *", "0 */5 * * 1#2,5L", "30 0 1-7 * 1"] {
            let e = CronExpr::parse(text).unwrap();
            let mut found = e.next_naive_after(start, 2030).unwrap();
            let mut t = start + TimeDelta::minutes(1);
            // Sixty days, minute by minute: every match is found, in order.
            while t < start + TimeDelta::days(60) {
                if e.matches(t) {
                    assert_eq!(found, t, "{text}");
                    found = e.next_naive_after(found, 2030).unwrap();
                } else {
                    assert!(found > t, "{text}: {found} does not match");
                }
                t += TimeDelta::minutes(1);
            }
        }
    }

    #[test]
    fn next_naive_skips_to_the_next_whole_second() {
        let e = CronExpr::parse("* * * * * *").unwrap();
        let t = NaiveDate::from_ymd_opt(2026, 1, 1)
            .unwrap()
            .and_hms_milli_opt(0, 0, 0, 500)
            .unwrap();
        assert_eq!(
            e.next_naive_after(t, 2030).unwrap().to_string(),
            "2026-01-01 00:00:01"
        );
        let e = CronExpr::parse("0 0 L 12 *").unwrap();
        assert_eq!(
            e.next_naive_after(t, 2030).unwrap().to_string(),
            "2026-12-31 00:00:00"
        );
        let e = CronExpr::parse("0 0 0 1 1 ? 2020").unwrap();
        assert_eq!(e.next_naive_after(t, 2500), None);
    }
}
