//! A compiled cron expression: the bit masks `cron.rs` produces from the
//! text, `calendar.rs` searches and `zone.rs` maps to instants.
//!
//! The compiled form has a file of its own so that the parser and the search
//! both depend on it and neither depends on the other's internals.

/// The first year a 7-field expression may name (Quartz's limit).
pub(crate) const FIRST_YEAR: i32 = 1970;
/// The last year a 7-field expression may name (Quartz's limit).
pub(crate) const LAST_YEAR: i32 = 2099;

/// A compiled cron expression: one bit per allowed value, nothing on the heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CronExpr {
    /// Bit `s` set when second `s` is allowed (5-field expressions: only 0).
    pub(crate) seconds: u64,
    /// Bit `m` set when minute `m` is allowed.
    pub(crate) minutes: u64,
    /// Bit `h` set when hour `h` is allowed.
    pub(crate) hours: u32,
    /// The day-of-month and day-of-week fields together.
    pub(crate) days: Days,
    /// Bit `m` (1-12) set when month `m` is allowed.
    pub(crate) months: u16,
    /// The year field of 7-field expressions.
    pub(crate) years: Years,
    /// The hour field is fixed (numbers, lists, ranges), so the job fires once
    /// per local day across daylight-saving changes; otherwise (`*` or a step)
    /// it follows real time. See `zone.rs`.
    pub(crate) fixed_hours: bool,
}

impl CronExpr {
    /// The shortest step between two matching times, as `jitter` is bounded
    /// by: the smallest distance between neighbouring values (wrapping
    /// around) of the finest field with more than one, second, minute or
    /// hour; one day when each of them has a single value.
    pub(crate) fn shortest_step(&self) -> std::time::Duration {
        let fields = [
            (self.seconds, 60, 1),
            (self.minutes, 60, 60),
            (u64::from(self.hours), 24, 3600),
        ];
        let step = fields
            .into_iter()
            .find(|(bits, _, _)| bits.count_ones() > 1)
            .map_or(24 * 3600, |(bits, width, unit)| {
                smallest_distance(bits, width) * unit
            });
        std::time::Duration::from_secs(step)
    }
}

/// The smallest distance between two set bits of `bits` (at least two set)
/// on a circle of `width` bits.
fn smallest_distance(bits: u64, width: u64) -> u64 {
    let first = u64::from(bits.trailing_zeros());
    let mut previous = first;
    let mut smallest = width;
    for i in first + 1..width {
        if bits & (1 << i) != 0 {
            smallest = smallest.min(i - previous);
            previous = i;
        }
    }
    smallest.min(width - previous + first)
}

/// How the day-of-month and day-of-week results combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DayCombine {
    /// Both must match (one of them is unrestricted, so effectively the other).
    Both,
    /// Either may match (Vixie cron, both restricted).
    Either,
}

/// The day fields, kept apart from the rest because `L`, `W` and `#` depend
/// on the month being searched and are resolved per month in `calendar.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Days {
    /// Bit `d` (1-31): day `d` of the month.
    pub(crate) dom: u32,
    /// Bit `k`: the day `k` days before the month's last (`L` is `k = 0`).
    pub(crate) dom_from_last: u32,
    /// Bit `d`: the weekday nearest day `d` (`dW`).
    pub(crate) dom_nearest: u32,
    /// Bit `k`: the weekday nearest the day `k` before the last (`LW`, `L-kW`).
    pub(crate) dom_nearest_from_last: u32,
    /// Bit `w` (0 = Sunday): every such weekday.
    pub(crate) dow: u8,
    /// `[w]`, bit `n` (1-5): the `n`th such weekday of the month (`w#n`).
    pub(crate) dow_nth: [u8; 7],
    /// Bit `w`: the last such weekday of the month (`wL`).
    pub(crate) dow_last: u8,
    pub(crate) combine: DayCombine,
}

/// The year field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Years {
    Any,
    /// Bit `y - FIRST_YEAR`.
    In([u64; 3]),
}

impl Years {
    pub(crate) fn contains(&self, year: i32) -> bool {
        match self {
            Years::Any => true,
            Years::In(bits) => {
                (FIRST_YEAR..=LAST_YEAR).contains(&year) && {
                    let i = (year - FIRST_YEAR) as usize;
                    bits[i / 64] & (1 << (i % 64)) != 0
                }
            }
        }
    }

    /// The first allowed year at or after `year`.
    pub(crate) fn next_from(&self, year: i32) -> Option<i32> {
        match self {
            Years::Any => Some(year),
            Years::In(_) => (year.max(FIRST_YEAR)..=LAST_YEAR).find(|y| self.contains(*y)),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shortest_steps_come_from_the_finest_field_with_several_values() {
        let step = |text: &str| {
            super::CronExpr::parse(text)
                .unwrap()
                .shortest_step()
                .as_secs()
        };
        assert_eq!(step("*/15 * * * *"), 15 * 60);
        assert_eq!(step("0,50 * * * *"), 10 * 60, "50 to the next hour's 0");
        assert_eq!(step("*/20 * * * * *"), 20);
        assert_eq!(step("0 9,17 * * *"), 8 * 3600);
        assert_eq!(step("0 0 * * *"), 24 * 3600);
        assert_eq!(step("0 0 1 * *"), 24 * 3600);
    }
}
