//! Times on the command line: an RFC 3339 instant, `now`, or an offset
//! from now (`-3h`, `+30m`, `in 30m`, `-2d`, `+1h30m`).
//!
//! The web console reads its time fields by the same rules
//! (`scheduler/console/when.js`): a change here is a change there.
//!
//! Every flag that takes a time (`backfill --from/--to`, `pause --until`,
//! `preview --from`, `history --since`, …) parses with [`parse`], so they
//! all read alike and refuse alike. An offset stays an offset until the
//! command resolves it against the one `now` it read at its start, so
//! `--from -1d --to now` is exactly a day.

use chime_common::duration::parse_time_str;
use chrono::{DateTime, Duration, Utc};

/// The largest offset taken: a century, far past any schedule, and small
/// enough that adding it to any instant cannot overflow.
const MAX_OFFSET_DAYS: i64 = 36_525;

/// A time as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// An instant.
    At(DateTime<Utc>),
    /// This long after now (before, when negative); `now` is zero.
    FromNow(Duration),
}

impl When {
    /// The instant, offsets counted from `now`.
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            When::At(t) => t,
            When::FromNow(offset) => now + offset,
        }
    }
}

/// What every time flag says it takes, for its help.
pub const HELP: &str =
    "RFC 3339 (2026-03-28T02:30:00Z), `now`, or an offset from now: -3h, +30m, in 30m, -2d";

/// Reads one time flag's value (a clap value parser).
pub fn parse(text: &str) -> Result<When, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("now") {
        return Ok(When::FromNow(Duration::zero()));
    }
    let in_prefix = text
        .get(..3)
        .filter(|p| p.eq_ignore_ascii_case("in ") || p.eq_ignore_ascii_case("in\t"));
    let (sign, magnitude) = match text.chars().next() {
        _ if in_prefix.is_some() => (1, &text[3..]),
        Some('+') => (1, &text[1..]),
        Some('-') => (-1, &text[1..]),
        _ => {
            return parse_time_str(text).map(When::At).map_err(|_| {
                format!(
                    "{text:?} is not a time: write {HELP} (an offset needs its sign: +30m, -30m)"
                )
            })
        }
    };
    let magnitude = humantime::parse_duration(magnitude.trim()).map_err(|e| {
        format!("{text:?} is not an offset from now ({e}); write e.g. -3h, +30m or -2d")
    })?;
    let offset = Duration::from_std(magnitude)
        .ok()
        .filter(|d| *d <= Duration::days(MAX_OFFSET_DAYS))
        .ok_or_else(|| format!("{text:?} is more than a century from now"))?;
    Ok(When::FromNow(offset * sign))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        parse_time_str("2026-03-28T12:00:00Z").unwrap()
    }

    fn at(text: &str) -> String {
        chime_common::duration::format_time(parse(text).unwrap().at(now()))
    }

    #[test]
    fn offsets_count_from_the_one_now() {
        assert_eq!(at("now"), "2026-03-28T12:00:00.000Z");
        assert_eq!(at("NOW"), "2026-03-28T12:00:00.000Z");
        assert_eq!(at("-3h"), "2026-03-28T09:00:00.000Z");
        assert_eq!(at("+30m"), "2026-03-28T12:30:00.000Z");
        assert_eq!(at("-2d"), "2026-03-26T12:00:00.000Z");
        assert_eq!(at("+1h30m"), "2026-03-28T13:30:00.000Z");
        assert_eq!(at("-1w"), "2026-03-21T12:00:00.000Z");
        assert_eq!(at("+250ms"), "2026-03-28T12:00:00.250Z");
        assert_eq!(at("in 30m"), "2026-03-28T12:30:00.000Z");
        assert_eq!(at("In 2h"), "2026-03-28T14:00:00.000Z");
    }

    #[test]
    fn instants_are_rfc_3339_in_any_offset() {
        assert_eq!(at("2026-01-01T00:00:00Z"), "2026-01-01T00:00:00.000Z");
        assert_eq!(at("2026-01-01T02:00:00+02:00"), "2026-01-01T00:00:00.000Z");
    }

    #[test]
    fn anything_else_is_refused_saying_what_is_taken() {
        for bad in [
            "",
            "yesterday",
            "3h",
            "-",
            "-3x",
            "+soon",
            "in",
            "in -3h",
            "2026-13-01T00:00:00Z",
        ] {
            let error = parse(bad).unwrap_err();
            assert!(
                error.contains("-3h") || error.contains("RFC 3339"),
                "{bad:?}: {error}"
            );
        }
        assert!(parse("3h").unwrap_err().contains("needs its sign"));
        assert!(parse("+200years").unwrap_err().contains("century"));
        assert!(parse("-100years").is_ok());
    }
}
