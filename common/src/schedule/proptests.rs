//! Property tests of the cron engine against an independent reading.
//!
//! The oracle is croner's matcher (a separate implementation of the same
//! syntax) applied to local wall-clock times, with the daylight-saving rule
//! written out directly from the contract's words. Expressions are generated
//! from the part of the syntax where croner agrees with the contract (see
//! `cron.rs` for where it does not), in zones with and without transitions,
//! starting near transitions half of the time. For each case:
//!
//! - results are strictly increasing and strictly after the start;
//! - every result fires by the oracle;
//! - nothing between two consecutive results fires by the oracle (every
//!   candidate instant checked in short windows, a sample in long ones);
//! - asking again from instants between two results gives the later one;
//! - in UTC the results equal croner's own next occurrences.

use super::*;
use chrono::{LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone};
use croner::parser::{CronParser, Seconds, Year};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::OnceLock;

const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Asia/Tokyo",
    "America/Santiago",
    "Pacific/Chatham",
];

/// Offset changes of each zone in 2024-2031, found by probing: the engine
/// under test must not be the one to tell us where they are.
fn transitions(zone: &str) -> &'static [DateTime<Utc>] {
    static ALL: OnceLock<HashMap<&'static str, Vec<DateTime<Utc>>>> = OnceLock::new();
    ALL.get_or_init(|| {
        ZONES
            .iter()
            .map(|name| {
                let tz: Tz = name.parse().unwrap();
                let offset = |t: i64| {
                    tz.offset_from_utc_datetime(
                        &DateTime::from_timestamp(t, 0).unwrap().naive_utc(),
                    )
                    .fix()
                };
                let mut found = Vec::new();
                let start = Utc
                    .with_ymd_and_hms(2024, 1, 1, 0, 0, 0)
                    .unwrap()
                    .timestamp();
                let mut t = start;
                while t < start + 8 * 366 * 86400 {
                    let next = t + 86400;
                    if offset(t) != offset(next) {
                        let (mut lo, mut hi) = (t, next);
                        while hi - lo > 1 {
                            let mid = (lo + hi) / 2;
                            if offset(mid) == offset(lo) {
                                lo = mid
                            } else {
                                hi = mid
                            }
                        }
                        found.push(DateTime::from_timestamp(hi, 0).unwrap());
                    }
                    t = next;
                }
                (*name, found)
            })
            .collect()
    })
    .get(zone)
    .map(Vec::as_slice)
    .unwrap_or(&[])
}

fn num(lo: u32, hi: u32) -> BoxedStrategy<String> {
    (lo..=hi).prop_map(|n| n.to_string()).boxed()
}

/// `*`, numbers, ranges, steps and lists over `lo..=hi`. With `star_step`
/// false, no `*/s` (croner mishandles it in Quartz day-of-week).
fn generic(lo: u32, hi: u32, star_step: bool) -> BoxedStrategy<String> {
    let span = hi - lo;
    let ordered = move |a: u32, b: u32| (a.min(b), a.max(b));
    let mut options = vec![
        Just("*".to_string()).boxed(),
        num(lo, hi),
        num(lo, hi),
        (lo..=hi, lo..=hi)
            .prop_map(move |(a, b)| {
                let (a, b) = ordered(a, b);
                format!("{a}-{b}")
            })
            .boxed(),
        (lo..=hi, 1..=span.max(1))
            .prop_map(|(a, s)| format!("{a}/{s}"))
            .boxed(),
        (lo..=hi, lo..=hi, 1..=(span / 2).max(1))
            .prop_map(move |(a, b, s)| {
                let (a, b) = ordered(a, b);
                format!("{a}-{b}/{s}")
            })
            .boxed(),
        prop::collection::vec(lo..=hi, 2..4)
            .prop_map(|v| v.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .boxed(),
    ];
    if star_step {
        options.push((1..=span.max(1)).prop_map(|s| format!("*/{s}")).boxed());
    }
    proptest::strategy::Union::new(options).boxed()
}

/// Hours around the usual transition times (01:00-03:00) are over-represented.
fn hour() -> BoxedStrategy<String> {
    prop_oneof![
        generic(0, 23, true),
        prop::sample::select(vec![
            "1", "2", "3", "1-3", "2,14", "0-4/2", "*/2", "*", "1,2"
        ])
        .prop_map(str::to_string),
    ]
    .boxed()
}

fn dom() -> BoxedStrategy<String> {
    prop_oneof![
        3 => Just("*".to_string()),
        1 => Just("?".to_string()),
        3 => generic(1, 31, true),
        1 => Just("L".to_string()),
        1 => (1u32..=31).prop_map(|d| format!("{d}W")),
        1 => (1u32..=28).prop_map(|d| format!("{d},L")),
    ]
    .boxed()
}

fn month() -> BoxedStrategy<String> {
    prop_oneof![
        3 => Just("*".to_string()),
        2 => generic(1, 12, true),
        1 => prop::sample::select(vec!["JAN-MAR", "NOV,DEC,MAR", "OCT-DEC", "APR"]).prop_map(str::to_string),
    ]
    .boxed()
}

fn dow(quartz: bool) -> BoxedStrategy<String> {
    // Weekday numbers in the dialect: Sunday is 0 (Unix) or 1 (Quartz).
    let (lo, hi) = if quartz { (1, 7) } else { (0, 7) };
    let day = if quartz { 1u32..=7 } else { 0u32..=6 };
    prop_oneof![
        3 => Just("*".to_string()),
        1 => Just("?".to_string()),
        3 => generic(lo, hi, !quartz),
        1 => prop::sample::select(vec!["MON-FRI", "SUN,WED", "SAT", "TUE-THU"]).prop_map(str::to_string),
        1 => day.clone().prop_map(|d| format!("{d}L")),
        1 => (day, 1u32..=5).prop_map(|(d, n)| format!("{d}#{n}")),
    ]
    .boxed()
}

fn year() -> BoxedStrategy<String> {
    prop_oneof![
        2 => Just("*".to_string()),
        1 => num(2024, 2034),
        1 => (2024u32..=2034, 0u32..=6).prop_map(|(a, n)| format!("{a}-{}", a + n)),
        1 => prop::collection::vec(2024u32..=2034, 2..4)
            .prop_map(|v| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
    ]
    .boxed()
}

/// Adjusts the day fields so both readings agree and the expression is legal.
fn day_fields(quartz: bool, dom: String, dow: String) -> (String, String) {
    let any = |f: &str| f == "*" || f == "?";
    if quartz {
        // Quartz refuses two restricted day fields.
        if !any(&dom) && !any(&dow) {
            return (dom, "?".to_string());
        }
    } else if (dom.starts_with("*/") && !any(&dow)) || (dow.starts_with("*/") && !any(&dom)) {
        // Vixie counts `*/2` as unrestricted (AND); croner only `*` (OR).
        return (dom, "*".to_string());
    }
    (dom, dow)
}

#[derive(Debug, Clone)]
struct Case {
    expr: String,
    quartz: bool,
    zone: &'static str,
    from: DateTime<Utc>,
}

fn expression() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        (minute_field(), hour(), dom(), month(), dow(false)).prop_map(|(mi, h, dm, mo, dw)| {
            let (dm, dw) = day_fields(false, dm, dw);
            (format!("{mi} {h} {dm} {mo} {dw}"), false)
        }),
        (
            second_field(),
            minute_field(),
            hour(),
            dom(),
            month(),
            dow(true),
            prop::option::of(year())
        )
            .prop_map(|(s, mi, h, dm, mo, dw, y)| {
                let (dm, dw) = day_fields(true, dm, dw);
                let y = y.map(|y| format!(" {y}")).unwrap_or_default();
                (format!("{s} {mi} {h} {dm} {mo} {dw}{y}"), true)
            }),
    ]
}

fn minute_field() -> BoxedStrategy<String> {
    prop_oneof![
        generic(0, 59, true),
        Just("0".to_string()),
        Just("30".to_string())
    ]
    .boxed()
}

fn second_field() -> BoxedStrategy<String> {
    // Mostly sparse: every-second expressions make windows too dense to scan.
    prop_oneof![
        3 => Just("0".to_string()),
        1 => generic(0, 59, true),
    ]
    .boxed()
}

fn case() -> impl Strategy<Value = Case> {
    (
        expression(),
        0..ZONES.len(),
        any::<bool>(),
        any::<prop::sample::Index>(),
        prop_oneof![-4 * 3600i64..4 * 3600, -30 * 3600i64..30 * 3600],
        0i64..(7 * 366 * 86400),
        prop_oneof![3 => Just(0i64), 1 => 1i64..1000],
    )
        .prop_map(
            |((expr, quartz), z, near, pick, around, anywhere, millis)| {
                let zone = ZONES[z];
                let list = transitions(zone);
                let base = if near && !list.is_empty() {
                    list[pick.index(list.len())] + TimeDelta::seconds(around)
                } else {
                    Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap()
                        + TimeDelta::seconds(anywhere)
                };
                Case {
                    expr,
                    quartz,
                    zone,
                    from: base + TimeDelta::milliseconds(millis),
                }
            },
        )
}

fn oracle(c: &Case) -> croner::Cron {
    let parser = if c.quartz {
        CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Optional)
            .alternative_weekdays(true)
            .build()
    } else {
        CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
    };
    parser
        .parse(&c.expr)
        .unwrap_or_else(|e| panic!("croner refuses {:?}: {e}", c.expr))
}

/// Whether the wall-clock time matches, by croner.
fn matches(oracle: &croner::Cron, wall: NaiveDateTime) -> bool {
    oracle
        .is_time_matching(&Utc.from_utc_datetime(&wall))
        .unwrap_or(false)
}

/// The contract's daylight-saving rule, written out directly.
fn fires(oracle: &croner::Cron, tz: Tz, fixed: bool, step: i64, i: DateTime<Utc>) -> bool {
    let local = i.with_timezone(&tz);
    let wall = local.naive_local();
    if matches(oracle, wall) {
        // Fixed hours: a repeated time fires at its first occurrence only.
        return !fixed
            || match tz.from_local_datetime(&wall) {
                LocalResult::Ambiguous(first, _) => first == local,
                _ => true,
            };
    }
    if !fixed {
        return false;
    }
    // Fixed hours: the first instant after a gap fires for matches inside it.
    let offset_at = |t: DateTime<Utc>| {
        tz.offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc() as i64
    };
    let before = offset_at(i - TimeDelta::seconds(1));
    let after = offset_at(i);
    if after <= before {
        return false;
    }
    let start = i.naive_utc() + TimeDelta::seconds(before);
    let end = i.naive_utc() + TimeDelta::seconds(after);
    let mut g = start;
    while g < end {
        if matches(oracle, g) {
            return true;
        }
        g += TimeDelta::seconds(step);
    }
    false
}

/// Candidate instants strictly inside `(a, b)`: every one when few, else a spread sample.
fn between(a: DateTime<Utc>, b: DateTime<Utc>, step: i64, limit: i64) -> Vec<DateTime<Utc>> {
    let first = (a.timestamp().div_euclid(step) + 1) * step;
    let last = (b.timestamp() - 1).div_euclid(step) * step;
    if last < first {
        return Vec::new();
    }
    let n = (last - first) / step + 1;
    let stride = if n <= limit { 1 } else { n / limit + 1 };
    // An odd offset keeps the sample from lining up with the expression's own period.
    let mut out = Vec::new();
    let mut k = if stride == 1 { 0 } else { stride / 3 };
    while k < n {
        out.push(DateTime::from_timestamp(first + k * step, 0).unwrap());
        k += stride;
    }
    out
}

/// The properties of the module comment, for one case.
fn check(c: &Case) -> Result<(), TestCaseError> {
    // Generated combinations can be impossible (31 in February only).
    let Ok(expr) = CronExpr::parse(&c.expr) else {
        return Err(TestCaseError::reject("never fires"));
    };
    let tz: Tz = c.zone.parse().unwrap();
    let spec = ScheduleSpec::Cron {
        cron: c.expr.clone(),
        tz: c.zone.to_string(),
    };
    let schedule = Schedule::compile(&spec, c.from).unwrap();
    let oracle = oracle(c);
    // The contract's words, applied to the text rather than taken from the parser.
    let hour_field = c
        .expr
        .split_whitespace()
        .nth(if c.quartz { 2 } else { 1 })
        .unwrap();
    let fixed = !hour_field.contains(['*', '/']);
    let step = if c.quartz { 1 } else { 60 };
    let limit = if c.quartz { 3 * 3600 } else { 3 * 1440 };

    let got: Vec<DateTime<Utc>> = schedule.iter_after(c.from).take(10).collect();
    let mut prev = c.from;
    for &t in &got {
        prop_assert!(t > prev, "{} not after {}", t, prev);
        prop_assert!(t.timestamp_subsec_nanos() == 0);
        prop_assert!(
            fires(&oracle, tz, fixed, step, t),
            "{:?} in {}: {} (local {}) does not fire",
            c.expr,
            c.zone,
            t,
            t.with_timezone(&tz)
        );
        for u in between(prev, t, step, limit) {
            prop_assert!(
                !fires(&oracle, tz, fixed, step, u),
                "{:?} in {}: {} (local {}) fires but was skipped between {} and {}",
                c.expr,
                c.zone,
                u,
                u.with_timezone(&tz),
                prev,
                t
            );
        }
        // Asking from anywhere in between gives the same answer.
        let mut probes = between(prev, t, step, 200);
        probes.extend([
            prev + TimeDelta::milliseconds(1),
            t - TimeDelta::milliseconds(1),
        ]);
        for u in probes.into_iter().filter(|u| *u >= c.from && *u < t) {
            prop_assert_eq!(
                schedule.next_after(u),
                Some(t),
                "{:?} in {}: asked again from {}",
                c.expr,
                c.zone,
                u
            );
        }
        prev = t;
    }
    if got.len() < 10 {
        // Exhausted: only a year field can do that within the window.
        prop_assert!(
            matches!(expr.years, super::masks::Years::In(_)),
            "{:?} stopped after {:?}",
            c.expr,
            got
        );
    }
    Ok(())
}

/// Zones with transitions, and the hours around them: New York, Berlin and
/// Lord Howe change at 02:00 (Lord Howe by 30 minutes), Santiago at midnight,
/// Chatham at 02:45 (+12:45/+13:45).
const DST_ZONES: &[&str] = &[
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
];

/// Expressions that fire around transitions: day fields mostly unrestricted,
/// hours fixed or not, near the changes; starts within hours of a transition.
fn dst_case() -> impl Strategy<Value = Case> {
    let hours = prop::sample::select(vec![
        "0",
        "1",
        "2",
        "3",
        "23",
        "1-3",
        "2,3",
        "0-2",
        "22-23,0-1",
        "2,14",
        "*",
        "*/2",
        "1/2",
        "0-4/2",
        "*/3",
    ]);
    let minutes = prop_oneof![
        Just("*".to_string()),
        Just("0".to_string()),
        Just("30".to_string()),
        Just("45".to_string()),
        Just("*/15".to_string()),
        Just("10-50/20".to_string()),
        generic(0, 59, true),
    ];
    let days = prop_oneof![
        6 => Just(("*", "*")),
        1 => Just(("?", "SUN")),
        1 => Just(("L", "?")),
        1 => Just(("*", "0,6")),
    ];
    (
        any::<bool>(),
        minutes,
        hours,
        days,
        0..DST_ZONES.len(),
        any::<prop::sample::Index>(),
        -6 * 3600i64..6 * 3600,
        prop_oneof![3 => Just(0i64), 1 => 1i64..1000],
    )
        .prop_map(
            |(quartz, minute, hour, (dom, dow), z, pick, around, millis)| {
                let zone = DST_ZONES[z];
                let list = transitions(zone);
                let (expr, quartz) = if quartz {
                    let dow = if dow == "SUN" {
                        "1"
                    } else if dow == "0,6" {
                        "1,7"
                    } else {
                        dow
                    };
                    (format!("0 {minute} {hour} {dom} * {dow}"), true)
                } else {
                    (format!("{minute} {hour} {dom} * {dow}"), false)
                };
                Case {
                    expr,
                    quartz,
                    zone,
                    from: list[pick.index(list.len())]
                        + TimeDelta::seconds(around)
                        + TimeDelta::milliseconds(millis),
                }
            },
        )
}

proptest! {
    // Failures are kept beside this file (proptests.regressions), to be checked in.
    #![proptest_config(ProptestConfig {
        cases: 160,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn firings_increase_match_and_skip_nothing(c in case()) {
        check(&c)?;
    }

    #[test]
    fn around_transitions_the_daylight_saving_rule_holds(c in dst_case()) {
        check(&c)?;
    }

    #[test]
    fn in_utc_results_equal_croners(c in case()) {
        prop_assume!(CronExpr::parse(&c.expr).is_ok());
        let from = DateTime::from_timestamp(c.from.timestamp(), 0).unwrap();
        let spec = ScheduleSpec::Cron { cron: c.expr.clone(), tz: "UTC".to_string() };
        let ours: Vec<DateTime<Utc>> = Schedule::compile(&spec, from).unwrap().iter_after(from).take(8).collect();
        // croner's own iterator skips firings ("0-1 * * * * *" yields :00:01,
        // :01:00, :02:00), so step it with find_next_occurrence.
        let cron = oracle(&c);
        let theirs: Vec<DateTime<Utc>> = std::iter::successors(
            cron.find_next_occurrence(&from, false).ok(),
            |t| cron.find_next_occurrence(t, false).ok(),
        )
        .take(8)
        .collect();
        let n = ours.len().min(theirs.len());
        prop_assert_eq!(&ours[..n], &theirs[..n], "{:?}", c.expr);
    }
}

#[test]
fn the_probe_finds_the_transitions_the_tests_rely_on() {
    let berlin = transitions("Europe/Berlin");
    assert!(berlin.contains(&Utc.with_ymd_and_hms(2026, 3, 29, 1, 0, 0).unwrap()));
    assert!(berlin.contains(&Utc.with_ymd_and_hms(2026, 10, 25, 1, 0, 0).unwrap()));
    assert!(transitions("Asia/Tokyo").is_empty());
    assert_eq!(transitions("Australia/Lord_Howe").len(), 16);
}

/// Cases the generators found while the engine was deliberately broken (each
/// DST branch disabled in turn), kept so they run every time.
#[test]
fn cases_that_caught_broken_engines() {
    let cases = [
        ("30 * * * *", "Australia/Lord_Howe", "2025-04-05T14:59:59Z"),
        ("0 * * * *", "America/New_York", "2024-11-03T05:59:59Z"),
        ("0 1-3 * * *", "Australia/Lord_Howe", "2024-10-05T15:29:59Z"),
        ("0 1-3 * * *", "Pacific/Chatham", "2027-04-03T14:00:00Z"),
        ("30 1/2 * * *", "America/New_York", "2024-11-03T06:00:00Z"),
        ("0 1/2 * * *", "America/New_York", "2024-11-03T05:59:59Z"),
        ("* * L * 0-0/1", "UTC", "2024-01-01T00:00:00Z"),
        ("0 0 1 2W * *", "UTC", "2024-01-01T00:00:00Z"),
        ("0 0,0 8/4 * 1,9 4L", "UTC", "2025-01-29T16:00:00Z"),
        ("0-1 * * * * *", "UTC", "2024-01-01T00:00:00Z"),
    ];
    for (expr, zone, from) in cases {
        let c = Case {
            expr: expr.to_string(),
            quartz: expr.split_whitespace().count() > 5,
            zone: ZONES.iter().find(|z| **z == zone).unwrap(),
            from: crate::duration::parse_time_str(from).unwrap(),
        };
        if let Err(e) = check(&c) {
            panic!("{c:?}: {e}");
        }
    }
}
