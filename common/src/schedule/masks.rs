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
