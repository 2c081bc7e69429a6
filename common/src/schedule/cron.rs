//! Cron expressions: the text of `schedule.cron` compiled into bit masks.
//!
//! # Which crate, and why the engine is our own
//!
//! The workspace offered two crates. `cron` 0.15 knows `*`, numbers, ranges,
//! lists, steps and names only: it has no `L`, `W` or `#` (its specifier type
//! has no variant for them), requires the seconds field and numbers days of
//! the week 1-7 always, so it cannot express the contract. `croner` 3.0.1
//! knows most of the syntax (`Seconds`/`Year` parser options,
//! `alternative_weekdays` for Quartz numbering, `L`, `W`, `#`), but checked
//! against the contract it is wrong in ways a wrapper cannot patch from
//! outside:
//!
//! - Daylight saving: it treats a job as fixed-time only when second, minute
//!   *and* hour are single values, so `30 2,14 * * *` in Europe/Berlin skips
//!   02:30 on the spring-forward day instead of firing at 03:00; and a
//!   `*`-hour job such as `*/20 * * * *` fires only in the first of the two
//!   repeated hours at fall-back. The contract (Vixie cron) decides by the
//!   hour field alone, and a real-time job fires in both hours.
//! - Quartz parsing: `*/2` in day-of-week fails ("Position 0 is less than the
//!   input offset 1"); `LW` and `L-3` are rejected; `L` alone in day-of-week
//!   (Quartz: Saturday) never matches; wrap-around ranges (`FRI-MON`, hours
//!   `22-2`) are rejected; names are replaced textually in the whole
//!   expression, so `0 0 * MON *` is accepted as January.
//! - Search: its own iterator skips firings (`0-1 * * * * *` yields :00:01,
//!   :01:00, :02:00, missing :01:01), though `find_next_occurrence` gets that
//!   case right.
//! - Errors say "Number out of bounds." without the field or the value; ours
//!   must name both.
//! - Cost: a parse allocates a dozen strings and seven vectors, and the search
//!   steps second by second around gaps; the scheduler compiles a schedule for
//!   every due job of every time slice.
//!
//! A parser that can say "minute field \"61\": 61 is out of range 0-59" has
//! already understood every token, so it might as well produce the bit masks
//! itself; feeding the text to croner afterwards would only add its cost and
//! its bugs. So this file parses into plain masks ([`CronExpr`] in `masks.rs`:
//! `Copy`, no heap), `calendar.rs` searches them and `zone.rs` applies the
//! daylight-saving rule. croner stays a dev-dependency: the property tests use its matcher as
//! an independent oracle on the syntax where it agrees with the contract.
//!
//! # Dialects
//!
//! - 5 fields `minute hour day-of-month month day-of-week`: Vixie cron.
//!   Day-of-week 0-7, 0 and 7 both Sunday. When both day fields are
//!   restricted, a day matching either fires; "restricted" means, as in
//!   crontab(5), that the field does not start with `*` (so `*/2` counts as
//!   unrestricted, exactly as Vixie cron behaves).
//! - 6 fields (seconds first) or 7 (year last, 1970-2099): Quartz
//!   CronExpression. Day-of-week 1-7 = SUN-SAT; ranges may wrap around
//!   (`FRI-MON`, `22-2`); restricting both day fields is an error.
//! - Both: names (`JAN`, `MON`), ranges, lists, steps (`a/s` means `a-max/s`),
//!   `?` (same as `*`, day fields only), `L` (last day of month, `L-3` three
//!   days before it; in day-of-week alone: Saturday), `5L`/`FRIL` (last
//!   Friday, or Thursday in Quartz numbering), `15W` (the weekday nearest the
//!   15th, not leaving the month), `LW` (last weekday), `6#3` (third of the
//!   month), and the macros `@yearly @annually @monthly @weekly @daily
//!   @midnight @hourly` (5-field meaning).
//!
//! Deliberate leniencies and choices, so the API never surprises:
//! - Quartz requires `?` in one day field; we also accept `*` there (the
//!   contract's own example is `0 30 2 * * *`), and `?` in both.
//! - Quartz refuses lists mixing `L`, `W` or `#` with other values ("not
//!   implemented"); their meaning is unambiguous, so we accept them.
//! - `29W`-`31W` in a month without that day: no firing that month, like a
//!   plain `31`.
//! - `a/s` means `a-max/s` in both dialects, as in Quartz.
//! - An expression that no date can ever satisfy (`0 0 30 2 *`) is rejected.
//! - An out-of-range message also says how the fields were read ("5 fields
//!   are read as minute hour ..."), for whoever counted seconds first.

use super::calendar::SEARCH_YEARS;
use super::masks::{CronExpr, DayCombine, Days, Years, FIRST_YEAR, LAST_YEAR};
use super::seed::Seed;
use chrono::{NaiveDate, NaiveDateTime};

/// Which rules the fields follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// 5 fields, Vixie cron.
    Unix,
    /// 6 or 7 fields, Quartz CronExpression.
    Quartz,
}

/// What one field accepts.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// Names for `min + i` (`JAN` = 1) or, for day-of-week, see `name_value`.
    names: &'static [&'static str],
    /// Ranges may run past `max` and wrap to `min` (Quartz, not years).
    wraps: bool,
    /// Appended to out-of-range messages.
    hint: &'static str,
    /// The number `H` draws from in this field; `None` without a job id.
    hash: Option<u64>,
    /// What a bare `H` picks from: the whole range, except days of the month
    /// (1-28, as Jenkins, so every month has it) and 5-field weekdays (0-6:
    /// Sunday once).
    hash_range: (u32, u32),
}

/// The message of an `H` without a job id to draw from; `Schedule::compile_with`
/// turns it into an error naming `id`.
pub(crate) const H_NEEDS_ID: &str =
    "H picks a value from the job's id, and there is none: give the job's \"id\"";

const MONTH_NAMES: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const MACROS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

fn fields(dialect: Dialect, seed: Option<Seed>) -> [Field; 7] {
    let quartz = dialect == Dialect::Quartz;
    let plain = |name: &'static str, min, max| Field {
        name,
        min,
        max,
        names: &[],
        wraps: quartz,
        hint: "",
        hash: seed.map(|s| s.draw(name.as_bytes())),
        hash_range: (min, max),
    };
    [
        plain("second", 0, 59),
        plain("minute", 0, 59),
        plain("hour", 0, 23),
        Field {
            hash_range: (1, 28),
            ..plain("day-of-month", 1, 31)
        },
        Field {
            names: MONTH_NAMES,
            ..plain("month", 1, 12)
        },
        if quartz {
            Field {
                names: DAY_NAMES,
                hint: " (6- and 7-field expressions number days 1-7 from SUN; \
                       0-7 with 0 = SUN is the 5-field numbering)",
                ..plain("day-of-week", 1, 7)
            }
        } else {
            Field {
                names: DAY_NAMES,
                hint: " (0 and 7 are SUN)",
                hash_range: (0, 6),
                ..plain("day-of-week", 0, 7)
            }
        },
        Field {
            wraps: false,
            hash: None,
            ..plain("year", FIRST_YEAR as u32, LAST_YEAR as u32)
        },
    ]
}

/// Values of one field, as bits relative to the field's minimum.
#[derive(Clone, Copy, Default)]
struct Bits([u64; 3]);

impl Bits {
    fn set(&mut self, i: u32) {
        self.0[(i / 64) as usize] |= 1 << (i % 64);
    }
    fn get(&self, i: u32) -> bool {
        self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    fn low(&self) -> u64 {
        self.0[0]
    }
}

impl CronExpr {
    /// Parses and validates a cron expression without `H`; on failure, one
    /// message per bad field, each naming the field and the offending value.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Result<CronExpr, Vec<String>> {
        CronExpr::parse_seeded(text, None)
    }

    /// [`CronExpr::parse`] where `H` draws from `seed` (the job's); without
    /// one, an `H` is refused with [`H_NEEDS_ID`].
    pub(crate) fn parse_seeded(text: &str, seed: Option<Seed>) -> Result<CronExpr, Vec<String>> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(vec![
                "the expression is empty; write e.g. \"0 30 2 * * *\" or \"@daily\"".to_string(),
            ]);
        }
        let expanded = if trimmed.starts_with('@') {
            let lower = trimmed.to_ascii_lowercase();
            match MACROS.iter().find(|(name, _)| *name == lower) {
                Some((_, fields)) => *fields,
                None => {
                    let known: Vec<&str> = MACROS.iter().map(|(n, _)| *n).collect();
                    return Err(vec![format!(
                        "unknown macro {trimmed:?}; accepted: {}",
                        known.join(" ")
                    )]);
                }
            }
        } else {
            trimmed
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let count = parts.len();
        let (dialect, parts) = match count {
            5 => (Dialect::Unix, {
                let mut p = vec!["0"];
                p.extend_from_slice(&parts);
                p.push("*");
                p
            }),
            6 => (Dialect::Quartz, {
                let mut p = parts.clone();
                p.push("*");
                p
            }),
            7 => (Dialect::Quartz, parts.clone()),
            n => {
                return Err(vec![format!(
                    "found {n} field{} in {trimmed:?}; expected 5 (minute hour day-of-month \
                     month day-of-week), 6 (second minute hour day-of-month month day-of-week, \
                     Quartz) or 7 (the same plus year), or a macro such as @daily",
                    if n == 1 { "" } else { "s" }
                )]);
            }
        };
        let specs = fields(dialect, seed);
        let mut errors = Vec::new();
        let plain = |i: usize, errors: &mut Vec<String>| {
            parse_plain(&specs[i], parts[i]).unwrap_or_else(|e| {
                errors.push(e);
                Bits([!0; 3])
            })
        };
        let seconds = plain(0, &mut errors).low() & ((1 << 60) - 1);
        let minutes = plain(1, &mut errors).low() & ((1 << 60) - 1);
        let hours = plain(2, &mut errors).low() as u32 & ((1 << 24) - 1);
        let months = (plain(4, &mut errors).low() as u16 & 0xfff) << 1;
        let years = if parts[6] == "*" {
            Years::Any
        } else {
            Years::In(plain(6, &mut errors).0)
        };
        let days = parse_days(
            dialect,
            &specs[3],
            parts[3],
            &specs[5],
            parts[5],
            &mut errors,
        );
        if let Some(e) = errors.iter_mut().find(|e| *e == BOTH_RESTRICTED) {
            // Show both ways out, written in full.
            let with = |i: usize| {
                let mut p: Vec<&str> = parts[..count].to_vec();
                p[i] = "?";
                p.join(" ")
            };
            *e = format!(
                "day-of-month {:?} and day-of-week {:?} are both restricted, which 6- and \
                 7-field (Quartz) expressions do not allow: write ? in one of them, \
                 e.g. {:?} or {:?}",
                parts[3],
                parts[5],
                with(5),
                with(3)
            );
        }
        if !errors.is_empty() {
            // A value out of range often means the fields were counted in the
            // other dialect (seconds first or not): say how they were read.
            let layout = match count {
                5 => "5 fields are read as minute hour day-of-month month day-of-week",
                6 => "6 fields are read as second minute hour day-of-month month day-of-week",
                _ => "7 fields are read as second minute hour day-of-month month day-of-week year",
            };
            for e in errors.iter_mut().filter(|e| e.contains("out of range")) {
                e.push_str(&format!("; {layout}"));
            }
            return Err(errors);
        }
        let expr = CronExpr {
            seconds,
            minutes,
            hours,
            days: days.expect("day fields parsed when no error was recorded"),
            months,
            years,
            fixed_hours: !parts[2].contains(['*', '/']),
        };
        expr.check_satisfiable(trimmed)?;
        Ok(expr)
    }

    /// Refuses expressions no date can match, such as the 30th of February:
    /// they would be accepted and then silently never fire.
    fn check_satisfiable(&self, text: &str) -> Result<(), Vec<String>> {
        let start = NaiveDate::from_ymd_opt(FIRST_YEAR, 1, 1)
            .expect("1970-01-01 is a date")
            .and_hms_opt(0, 0, 0)
            .expect("midnight is a time");
        let last_year = FIRST_YEAR + SEARCH_YEARS;
        match self.next_naive_from(start, last_year) {
            Some(_) => Ok(()),
            None => Err(vec![format!(
                "{text:?} never fires: no date satisfies its day-of-month, month, day-of-week \
                 and year fields together"
            )]),
        }
    }

    /// The earliest matching local time at or after `from` (used by tests and
    /// by the satisfiability check).
    pub(crate) fn next_naive_from(
        &self,
        from: NaiveDateTime,
        last_year: i32,
    ) -> Option<NaiveDateTime> {
        self.next_naive_after(from - chrono::TimeDelta::seconds(1), last_year)
    }
}

/// `{field} field "{text}": {problem}` — every message names the field and
/// quotes what was written.
fn problem(field: &Field, text: &str, what: impl std::fmt::Display) -> String {
    format!("{} field {text:?}: {what}", field.name)
}

/// Parses a field without day specials (second, minute, hour, month, year),
/// refusing the day-only characters with a message that says where they belong.
fn parse_plain(field: &Field, text: &str) -> Result<Bits, String> {
    let upper = text.to_ascii_uppercase();
    if upper.contains('?') {
        return Err(problem(
            field,
            text,
            "? is only allowed in day-of-month and day-of-week",
        ));
    }
    // A name such as JUL may contain L: look at the tokens that are not names.
    let misplaced = upper
        .split([',', '-', '/'])
        .filter(|token| !field.names.contains(token))
        .find_map(|token| {
            [
                ('L', "L (last)"),
                ('W', "W (nearest weekday)"),
                ('#', "# (nth weekday)"),
            ]
            .into_iter()
            .find(|(c, _)| token.contains(*c))
        });
    if let Some((_, what)) = misplaced {
        return Err(problem(
            field,
            text,
            format!("{what} is only allowed in the day fields"),
        ));
    }
    let mut bits = Bits::default();
    parse_list(field, text, &upper, &mut bits, |_, _| Ok(false))?;
    Ok(bits)
}

/// Parses a comma-separated list. `special` gets each upper-cased item first
/// and returns `Ok(true)` when it consumed it (day specials).
fn parse_list(
    field: &Field,
    text: &str,
    upper: &str,
    bits: &mut Bits,
    mut special: impl FnMut(&str, &mut Bits) -> Result<bool, String>,
) -> Result<(), String> {
    for item in upper.split(',') {
        if item.is_empty() {
            return Err(problem(field, text, "empty item in the list"));
        }
        if !special(item, bits)? {
            parse_item(field, text, item, bits)?;
        }
    }
    Ok(())
}

/// One list item: `*`, `v`, `a-b`, each optionally `/step`.
fn parse_item(field: &Field, text: &str, item: &str, bits: &mut Bits) -> Result<(), String> {
    let (base, step) = match item.split_once('/') {
        Some((base, step)) => (base, Some(step)),
        None => (item, None),
    };
    let span = field.max - field.min + 1;
    let step = match step {
        None => 1,
        Some(s) => {
            let n = number(s)
                .ok_or_else(|| problem(field, text, format!("the step {s:?} is not a number")))?;
            if n == 0 {
                return Err(problem(field, text, "the step must be at least 1"));
            }
            if n > span {
                return Err(problem(
                    field,
                    text,
                    format!(
                        "the step {n} is larger than the field's range {}-{}",
                        field.min, field.max
                    ),
                ));
            }
            n
        }
    };
    if let Some(range) = base.strip_prefix('H') {
        return parse_hash(field, text, item, range, step, bits);
    }
    let (start, end) = if base == "*" {
        (field.min, field.max)
    } else if base.is_empty() {
        return Err(problem(field, text, "a value is missing before /"));
    } else if let Some((a, b)) = base.split_once('-') {
        (value(field, text, a)?, value(field, text, b)?)
    } else {
        let a = value(field, text, base)?;
        (
            a,
            if step > 1 || item.contains('/') {
                field.max
            } else {
                a
            },
        )
    };
    let end = if start > end {
        if !field.wraps {
            let how = if field.name == "year" {
                String::new()
            } else {
                format!(
                    "; in 5-field expressions write {start}-{},{}-{end}",
                    field.max, field.min
                )
            };
            return Err(problem(
                field,
                text,
                format!("the range {start}-{end} goes backwards{how}"),
            ));
        }
        end + span
    } else {
        end
    };
    let mut v = start;
    while v <= end {
        bits.set((v - field.min) % span);
        v += step;
    }
    Ok(())
}

/// `H`, `H(a-b)`, each optionally `/step` (`range` is what follows the `H`;
/// `step` is 1 without one): Jenkins' hashed values. A bare `H` is one value
/// of the field's hash range, `H/s` every `s`th from an offset below `s`,
/// `H(a-b)` one value of `a-b`.
fn parse_hash(
    field: &Field,
    text: &str,
    item: &str,
    range: &str,
    step: u32,
    bits: &mut Bits,
) -> Result<(), String> {
    let Some(hash) = field.hash else {
        if field.name == "year" {
            return Err(problem(field, text, "H is not allowed in the year field"));
        }
        return Err(H_NEEDS_ID.to_string());
    };
    let (lo, hi) = if range.is_empty() {
        field.hash_range
    } else {
        let malformed = || {
            problem(
                field,
                text,
                format!("{item:?}: write H, H/step, H(a-b) or H(a-b)/step"),
            )
        };
        let inner = range
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(malformed)?;
        let (a, b) = inner.split_once('-').ok_or_else(malformed)?;
        let (a, b) = (value(field, text, a)?, value(field, text, b)?);
        if a > b {
            return Err(problem(
                field,
                text,
                format!("the range {a}-{b} in {item:?} goes backwards"),
            ));
        }
        (a, b)
    };
    let span = hi - lo + 1;
    if item.contains('/') {
        if step > span {
            return Err(problem(
                field,
                text,
                format!("the step {step} is larger than the range {lo}-{hi} of {item:?}"),
            ));
        }
        let mut v = lo + (hash % u64::from(step)) as u32;
        while v <= hi {
            bits.set(v - field.min);
            v += step;
        }
    } else {
        bits.set(lo + (hash % u64::from(span)) as u32 - field.min);
    }
    Ok(())
}

/// A number or (for months and days) a name, checked against the field's range.
fn value(field: &Field, text: &str, token: &str) -> Result<u32, String> {
    if token.is_empty() {
        return Err(problem(field, text, "a range is missing a value"));
    }
    if let Some(i) = field.names.iter().position(|n| *n == token) {
        // Names map to the field's first value: JAN = 1, SUN = 1 (Quartz) or 0 (Unix).
        return Ok(field.min + i as u32);
    }
    let n = number(token).ok_or_else(|| {
        let kind = match field.name {
            "month" => format!("{token:?} is not a number or a month name (JAN-DEC)"),
            "day-of-week" => format!("{token:?} is not a number or a day name (SUN-SAT)"),
            _ => format!("{token:?} is not a number"),
        };
        problem(field, text, kind)
    })?;
    if n < field.min || n > field.max {
        return Err(problem(
            field,
            text,
            format!(
                "{n} is out of range {}-{}{}",
                field.min, field.max, field.hint
            ),
        ));
    }
    Ok(n)
}

/// Digits only (no sign, no spaces); `None` for anything else or absurd lengths.
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses both day fields and decides how they combine.
fn parse_days(
    dialect: Dialect,
    dom_field: &Field,
    dom_text: &str,
    dow_field: &Field,
    dow_text: &str,
    errors: &mut Vec<String>,
) -> Option<Days> {
    let dom_any = matches!(dom_text, "*" | "?");
    let dow_any = matches!(dow_text, "*" | "?");
    let mut days = Days {
        dom: 0,
        dom_from_last: 0,
        dom_nearest: 0,
        dom_nearest_from_last: 0,
        dow: 0,
        dow_nth: [0; 7],
        dow_last: 0,
        combine: DayCombine::Both,
    };
    let before = errors.len();
    if let Err(e) = parse_dom(dom_field, dom_text, &mut days) {
        errors.push(e);
    }
    if let Err(e) = parse_dow(dialect, dow_field, dow_text, &mut days) {
        errors.push(e);
    }
    if errors.len() > before {
        return None;
    }
    match dialect {
        Dialect::Quartz if !dom_any && !dow_any => {
            errors.push(BOTH_RESTRICTED.to_string());
            return None;
        }
        Dialect::Quartz => {}
        Dialect::Unix => {
            // crontab(5): "If both fields are restricted (i.e., don't start
            // with *), the command will be run when either field matches".
            let unrestricted = |t: &str| t.starts_with('*') || t.starts_with('?');
            if !unrestricted(dom_text) && !unrestricted(dow_text) {
                days.combine = DayCombine::Either;
            }
        }
    }
    Some(days)
}

fn parse_dom(field: &Field, text: &str, days: &mut Days) -> Result<(), String> {
    let upper = text.to_ascii_uppercase();
    if upper == "?" {
        days.dom = ALL_DAYS;
        return Ok(());
    }
    if upper.contains('?') {
        return Err(problem(field, text, "? must stand alone"));
    }
    if upper.contains('#') {
        return Err(problem(
            field,
            text,
            "# (nth weekday) belongs in day-of-week, e.g. 6#3",
        ));
    }
    let mut bits = Bits::default();
    parse_list(field, text, &upper, &mut bits, |item, _| {
        if let Some(rest) = item.strip_prefix('L') {
            // L, LW, L-k, L-kW
            let (offset, nearest) = match rest.strip_suffix('W') {
                Some(r) => (r, true),
                None => (rest, false),
            };
            let k = if offset.is_empty() {
                0
            } else {
                let k = offset.strip_prefix('-').and_then(number).ok_or_else(|| {
                    problem(
                        field,
                        text,
                        format!("{item:?} is not L, LW, L-n or L-nW (n days before the last)"),
                    )
                })?;
                if k > 30 {
                    return Err(problem(
                        field,
                        text,
                        format!("the offset {k} in {item:?} is out of range 0-30"),
                    ));
                }
                k
            };
            if nearest {
                days.dom_nearest_from_last |= 1 << k;
            } else {
                days.dom_from_last |= 1 << k;
            }
            return Ok(true);
        }
        if let Some(day) = item.strip_suffix('W') {
            let d = number(day).ok_or_else(|| {
                problem(
                    field,
                    text,
                    format!("W needs a single day before it, e.g. 15W, not {item:?}"),
                )
            })?;
            if !(1..=31).contains(&d) {
                return Err(problem(field, text, format!("{d} is out of range 1-31")));
            }
            days.dom_nearest |= 1 << d;
            return Ok(true);
        }
        if item.contains(['L', 'W']) {
            return Err(problem(
                field,
                text,
                format!("{item:?}: L and W go as L, LW, L-3, 15W"),
            ));
        }
        Ok(false)
    })?;
    days.dom |= (bits.low() as u32) << 1;
    Ok(())
}

/// Bits 1-31.
const ALL_DAYS: u32 = !1;

/// Placeholder replaced in `CronExpr::parse`, which has the whole text.
const BOTH_RESTRICTED: &str = "both day fields restricted";

fn parse_dow(dialect: Dialect, field: &Field, text: &str, days: &mut Days) -> Result<(), String> {
    let upper = text.to_ascii_uppercase();
    if upper == "?" {
        days.dow = 0x7f;
        return Ok(());
    }
    if upper.contains('?') {
        return Err(problem(field, text, "? must stand alone"));
    }
    if upper.contains('W') && !upper.contains("WED") {
        return Err(problem(
            field,
            text,
            "W (nearest weekday) belongs in day-of-month, e.g. 15W",
        ));
    }
    // Field values to weekdays counted from Sunday = 0.
    let weekday = |v: u32| match dialect {
        Dialect::Unix => v % 7,
        Dialect::Quartz => v - 1,
    };
    let mut bits = Bits::default();
    parse_list(field, text, &upper, &mut bits, |item, _| {
        if item == "L" {
            // Quartz: "L" alone in day-of-week is "7" or "SAT".
            days.dow |= 1 << 6;
            return Ok(true);
        }
        if let Some((day, nth)) = item.split_once('#') {
            let w = weekday(value(field, text, day)?);
            let n = number(nth).ok_or_else(|| {
                problem(
                    field,
                    text,
                    format!("{item:?}: # needs a day and an occurrence 1-5, e.g. 6#3"),
                )
            })?;
            if !(1..=5).contains(&n) {
                return Err(problem(
                    field,
                    text,
                    format!("the occurrence {n} in {item:?} is out of range 1-5"),
                ));
            }
            days.dow_nth[w as usize] |= 1 << n;
            return Ok(true);
        }
        if let Some(day) = item.strip_suffix('L') {
            if day.contains(['-', '/', '*']) {
                return Err(problem(
                    field,
                    text,
                    format!("L needs a single day before it, e.g. 5L, not {item:?}"),
                ));
            }
            let w = weekday(value(field, text, day)?);
            days.dow_last |= 1 << w;
            return Ok(true);
        }
        if item.contains('L') {
            return Err(problem(
                field,
                text,
                format!("{item:?}: L goes after a day, e.g. 5L, or alone"),
            ));
        }
        Ok(false)
    })?;
    for i in 0..=(field.max - field.min) {
        if bits.get(i) {
            days.dow |= 1 << weekday(field.min + i);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        CronExpr::parse(text).unwrap_err().join("; ")
    }

    #[test]
    fn out_of_range_values_name_the_field_the_value_and_the_range() {
        let e = err("61 * * * *");
        assert!(
            e.contains("minute") && e.contains("61") && e.contains("0-59"),
            "{e}"
        );
        let e = err("0 61 * * * ?");
        assert!(
            e.starts_with("minute") && e.contains("61") && e.contains("0-59"),
            "{e}"
        );
        // In five fields the second one is the hour; the message says how
        // the fields were read, for whoever expected seconds first.
        let e = err("0 61 * * *");
        assert!(
            e.starts_with("hour field \"61\": 61 is out of range 0-23")
                && e.contains("minute hour day-of-month month day-of-week"),
            "{e}"
        );
        let e = err("0 0 24 * * ?");
        assert!(
            e.contains("hour") && e.contains("24") && e.contains("0-23"),
            "{e}"
        );
        let e = err("0 0 0 32 * ?");
        assert!(e.contains("day-of-month") && e.contains("1-31"), "{e}");
        let e = err("0 0 1 13 *");
        assert!(
            e.contains("month") && e.contains("13") && e.contains("1-12"),
            "{e}"
        );
        let e = err("60 0 0 * * ?");
        assert!(e.contains("second") && e.contains("60"), "{e}");
        let e = err("0 0 0 1 1 ? 2100");
        assert!(e.contains("year") && e.contains("1970-2099"), "{e}");
    }

    #[test]
    fn day_of_week_numbering_errors_explain_the_dialect() {
        let e = err("0 0 * * 8");
        assert!(e.contains("day-of-week") && e.contains("0-7"), "{e}");
        let e = err("0 0 0 ? * 0");
        assert!(
            e.contains("day-of-week") && e.contains("1-7") && e.contains("SUN"),
            "{e}"
        );
    }

    #[test]
    fn wrong_field_counts_say_how_many_and_what_is_accepted() {
        let e = err("0 0 * *");
        assert!(
            e.contains("found 4 fields") && e.contains("5") && e.contains("6") && e.contains("7"),
            "{e}"
        );
        let e = err("* * * * * * * *");
        assert!(e.contains("found 8 fields"), "{e}");
        assert!(err("").contains("empty"));
        assert!(err("   ").contains("empty"));
    }

    #[test]
    fn every_bad_field_is_reported() {
        let errors = CronExpr::parse("61 25 * * *").unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("minute") && errors[1].contains("hour"));
    }

    #[test]
    fn malformed_items_are_refused_with_the_reason() {
        for (text, needle) in [
            ("*/0 * * * *", "at least 1"),
            ("*/61 * * * *", "larger than"),
            ("1,,2 * * * *", "empty item"),
            ("a * * * *", "not a number"),
            ("1-2-3 * * * *", "not a number"),
            ("/5 * * * *", "missing before /"),
            ("5-1 * * * *", "goes backwards"),
            ("0 0 * * 5-1", "goes backwards"),
            ("? * * * *", "day-of-month and day-of-week"),
            ("0 L * * *", "day fields"),
            ("0 0 * JUL,5W *", "day fields"),
            ("0 0 * JUL-AUG *", ""),
            ("0 0 * * 1W", "belongs in day-of-month"),
            ("0 0 1#2 * *", "belongs in day-of-week"),
            ("0 0 * * 5#6", "out of range 1-5"),
            ("0 0 * * 5#x", "occurrence"),
            ("0 0 L-31 * *", "out of range 0-30"),
            ("0 0 L-x * *", "L-n"),
            ("0 0 32W * *", "1-31"),
            ("0 0 1-5W * *", "single day"),
            ("0 0 * * 1-5L", "single day"),
            ("0 0 * MON *", "month name"),
            ("0 0 * * JAN", "day name"),
            ("0 0 1? * *", "stand alone"),
            ("@reboot", "unknown macro"),
            ("0 0 0 1 1 ? 2030-2027", "goes backwards"),
            ("0 0 0 1 1 ? *", ""),
        ] {
            match CronExpr::parse(text) {
                Ok(_) if needle.is_empty() => {}
                Ok(_) => panic!("{text:?} should be refused"),
                Err(e) => assert!(
                    !needle.is_empty() && e.join("; ").contains(needle),
                    "{text:?}: {e:?} lacks {needle:?}"
                ),
            }
        }
    }

    #[test]
    fn quartz_refuses_both_day_fields_restricted_and_suggests_question_mark() {
        let e = err("0 0 12 15 * MON");
        assert!(
            e.contains("both restricted")
                && e.contains("\"0 0 12 15 * ?\"")
                && e.contains("\"0 0 12 ? * MON\""),
            "{e}"
        );
        assert!(CronExpr::parse("0 0 12 */2 * 2").is_err());
        // `*` or `?` in either is fine, and `*` in both (the contract's own example).
        for ok in [
            "0 30 2 * * *",
            "0 0 12 15 * ?",
            "0 0 12 ? * MON",
            "0 0 12 ? * ?",
            "0 0 12 * * MON",
        ] {
            assert!(CronExpr::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn expressions_that_never_fire_are_refused() {
        assert!(err("0 0 30 2 *").contains("never fires"));
        assert!(err("0 0 0 31 4,6,9,11 ?").contains("never fires"));
        assert!(err("0 0 0 29 2 ? 2027").contains("never fires"));
        // The 29th of February does come round, and so does a listed future year.
        assert!(CronExpr::parse("0 0 29 2 *").is_ok());
        assert!(CronExpr::parse("0 0 0 29 2 ? 2028").is_ok());
        // With the Unix OR rule, a Monday rescues an impossible day-of-month.
        assert!(CronExpr::parse("0 0 30 2 1").is_ok());
    }

    #[test]
    fn hour_fields_with_star_or_step_follow_real_time() {
        let fixed = |t: &str| CronExpr::parse(t).unwrap().fixed_hours;
        assert!(fixed("0 2 * * *") && fixed("0 1,2 * * *") && fixed("0 1-3 * * *"));
        assert!(fixed("0 0 2 * * *") && fixed("@daily") && fixed("* 2 * * *"));
        assert!(!fixed("0 * * * *") && !fixed("0 */2 * * *") && !fixed("0 0-23/3 * * *"));
        assert!(!fixed("0 2/3 * * *") && !fixed("@hourly"));
    }

    /// The set values of a mask.
    fn values(bits: u64) -> Vec<u32> {
        (0..64).filter(|i| bits & (1 << i) != 0).collect()
    }

    #[test]
    fn h_is_one_value_per_job_within_its_range() {
        let mut minutes = std::collections::BTreeSet::new();
        for i in 0..200 {
            let seed = Seed::of_job(&format!("job-{i}"));
            let e = CronExpr::parse_seeded("H H H * H", Some(seed)).unwrap();
            let m = values(e.minutes);
            assert_eq!(m.len(), 1);
            minutes.insert(m[0]);
            assert_eq!(values(u64::from(e.hours)).len(), 1);
            let dom = values(u64::from(e.days.dom));
            assert!(dom.len() == 1 && (1..=28).contains(&dom[0]), "{dom:?}");
            assert_eq!(values(u64::from(e.days.dow)).len(), 1);
            assert!(e.fixed_hours);
            // The same id, the same values.
            assert_eq!(e, CronExpr::parse_seeded("H H H * H", Some(seed)).unwrap());
        }
        assert!(
            minutes.len() > 50,
            "200 ids share {} minutes",
            minutes.len()
        );
    }

    #[test]
    fn h_steps_and_ranges_follow_jenkins() {
        for i in 0..100 {
            let seed = Some(Seed::of_job(&format!("job-{i}")));
            let e = CronExpr::parse_seeded("H/15 H(0-5) * * *", seed).unwrap();
            let m = values(e.minutes);
            assert_eq!(m.len(), 4, "{m:?}");
            assert!(
                m[0] < 15 && m.windows(2).all(|w| w[1] - w[0] == 15),
                "{m:?}"
            );
            let h = values(u64::from(e.hours));
            assert!(h.len() == 1 && h[0] <= 5, "{h:?}");
            let e = CronExpr::parse_seeded("0 H(20-40)/10 H/6 * * ?", seed).unwrap();
            let m = values(e.minutes);
            assert!(m.len() == 2 || m.len() == 3, "{m:?}");
            assert!(m[0] >= 20 && m[0] < 30 && *m.last().unwrap() <= 40, "{m:?}");
            assert!(!e.fixed_hours, "H/6 is a step: real time");
            assert_eq!(values(u64::from(e.hours)).len(), 4);
        }
    }

    #[test]
    fn h_needs_a_seed_and_well_formed_ranges() {
        assert_eq!(
            CronExpr::parse("H * * * *").unwrap_err(),
            vec![H_NEEDS_ID.to_string()]
        );
        let seed = Some(Seed::ANY);
        for (text, needle) in [
            ("H(5) * * * *", "write H, H/step"),
            ("H(9-3) * * * *", "goes backwards"),
            ("H(0-70) * * * *", "out of range 0-59"),
            ("H(0-9)/20 * * * *", "larger than the range 0-9"),
            ("H/0 * * * *", "at least 1"),
            ("0 0 0 1 1 ? H", "not allowed in the year"),
            ("Hx * * * *", "write H"),
        ] {
            let e = CronExpr::parse_seeded(text, seed).unwrap_err().join("; ");
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn masks_hold_the_values_written() {
        let e = CronExpr::parse("5,10-12 */6 1 JAN-MAR,DEC 7").unwrap();
        assert_eq!(e.seconds, 1);
        assert_eq!(e.minutes, 1 << 5 | 1 << 10 | 1 << 11 | 1 << 12);
        assert_eq!(e.hours, 1 | 1 << 6 | 1 << 12 | 1 << 18);
        assert_eq!(e.months, 1 << 1 | 1 << 2 | 1 << 3 | 1 << 12);
        assert_eq!(e.days.dow, 1, "7 is Sunday");
        assert_eq!(e.days.combine, DayCombine::Either);
        let q = CronExpr::parse("0 0 22-2 ? * FRI-MON 2026,2028").unwrap();
        assert_eq!(q.hours, 1 << 22 | 1 << 23 | 1 | 1 << 1 | 1 << 2);
        assert_eq!(q.days.dow, 1 << 5 | 1 << 6 | 1 | 1 << 1);
        assert!(q.years.contains(2026) && q.years.contains(2028) && !q.years.contains(2027));
        assert_eq!(q.days.combine, DayCombine::Both);
    }
}
