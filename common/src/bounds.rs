//! The ranges Chime accepts for names, durations, instants and counts from
//! outside (docs/API.md, "Ranges").
//!
//! Every value a client sends is checked against these before anything is
//! stored, so the arithmetic the scheduler does later (a deadline is a start
//! plus a timeout, a retry is a failure plus a delay) always fits. The bounds
//! are generous for real jobs and keep every computed instant far inside the
//! range of the store's milliseconds and of `chrono`.

use crate::duration::{format_duration, format_time};
use chrono::{DateTime, Utc};
use std::time::Duration;

const DAY: u64 = 24 * 3600;

/// The earliest TIME accepted: the Unix epoch.
pub const MIN_TIME: DateTime<Utc> = DateTime::UNIX_EPOCH;
/// The first TIME no longer accepted, 2100-01-01T00:00:00Z, in milliseconds:
/// cron expressions cover the years 1970–2099 (as Quartz's do), and so does
/// every other instant a client may write.
pub const END_OF_TIME_MS: i64 = 4_102_444_800_000;

/// The longest `timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * DAY);
/// The longest `retry.initial` and `retry.max`.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30 * DAY);
/// The longest `misfire_threshold`.
pub const MAX_MISFIRE_THRESHOLD: Duration = Duration::from_secs(30 * DAY);
/// The longest period of an `every` schedule.
pub const MAX_EVERY: Duration = Duration::from_secs(3650 * DAY);
/// The longest `within` of a fan-in (`after`) schedule: as long as the
/// longest `every` period, the other window a schedule may span.
pub const MAX_WITHIN: Duration = Duration::from_secs(3650 * DAY);
/// The largest `count` of an `every` schedule.
pub const MAX_COUNT: u64 = 1_000_000_000_000;

/// Why `t` is refused, or `None` when it is inside `[MIN_TIME, 2100-01-01)`.
pub fn check_time(t: DateTime<Utc>) -> Option<String> {
    let ms = t.timestamp_millis();
    (!(0..END_OF_TIME_MS).contains(&ms)).then(|| {
        format!(
            "{} is out of range; times from 1970-01-01T00:00:00Z to before 2100-01-01T00:00:00Z are accepted",
            format_time(t)
        )
    })
}

/// Why `d` is refused, or `None` when it is at most `max`.
pub fn check_at_most(d: Duration, max: Duration) -> Option<String> {
    (d > max).then(|| {
        format!(
            "{} is too long; at most {} is accepted",
            format_duration(d),
            format_duration(max)
        )
    })
}

/// The longest id and handler name.
pub const MAX_ID_LEN: usize = 128;
/// The longest group name.
pub const MAX_GROUP_LEN: usize = 64;
/// The most jobs `on_success` may name.
pub const MAX_ON_SUCCESS: usize = 16;
/// The most attempts a retry policy may ask for.
pub const MAX_ATTEMPTS: u32 = 100;

/// Checks a group name: a name that is also a valid subject token sequence
/// (`chime.fire.<group>.<band>`), so no dot at either end and no two in a row.
pub fn check_group(name: &str) -> Result<(), String> {
    check_name(name, MAX_GROUP_LEN)?;
    if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        return Err(
            "must not start or end with '.' or hold '..' (groups are parts of NATS subjects)"
                .into(),
        );
    }
    Ok(())
}

/// Checks an id or group name: `len` 1..=max of `A-Z a-z 0-9 . _ -`.
pub fn check_name(name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() || name.len() > max {
        return Err(format!(
            "must be 1 to {max} characters, found {}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("{c:?} is not allowed; use only A-Z a-z 0-9 . _ -"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::parse_time_str;

    #[test]
    fn the_end_of_time_is_2100() {
        let end = DateTime::from_timestamp_millis(END_OF_TIME_MS).unwrap();
        assert_eq!(format_time(end), "2100-01-01T00:00:00.000Z");
    }

    #[test]
    fn times_outside_the_range_are_refused() {
        for ok in [
            "1970-01-01T00:00:00Z",
            "2026-03-29T02:30:00+01:00",
            "2099-12-31T23:59:59.999Z",
        ] {
            assert_eq!(check_time(parse_time_str(ok).unwrap()), None, "{ok}");
        }
        for bad in [
            "1969-12-31T23:59:59.999Z",
            "2100-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
        ] {
            let message = check_time(parse_time_str(bad).unwrap()).expect(bad);
            assert!(message.contains("out of range"), "{message}");
        }
    }

    #[test]
    fn durations_above_the_bound_are_refused_with_the_bound() {
        assert_eq!(check_at_most(MAX_TIMEOUT, MAX_TIMEOUT), None);
        let message = check_at_most(MAX_TIMEOUT + Duration::from_millis(1), MAX_TIMEOUT).unwrap();
        assert!(message.contains("at most 30days"), "{message}");
    }
}
