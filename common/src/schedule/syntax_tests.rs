//! Table tests: one row per syntax element, with instants checked by hand
//! against the 2026 calendar and what crontab(5) and Quartz's CronExpression
//! documentation say the element means.
//!
//! January 2026 starts on a Thursday, February and March on a Sunday, April on
//! a Wednesday, May on a Friday; 2028 is a leap year.

use super::*;
use crate::duration::{format_time, parse_time_str};

/// Expression, first instant strictly after which to look (UTC), expected firings.
type Row<'a> = (&'a str, &'a str, &'a [&'a str]);

fn check(rows: &[Row<'_>]) {
    for (expr, from, expected) in rows {
        let spec = ScheduleSpec::Cron {
            cron: expr.to_string(),
            tz: "UTC".to_string(),
        };
        let schedule = Schedule::compile(&spec, Utc::now())
            .unwrap_or_else(|e| panic!("{expr:?} should compile: {e}"));
        let got: Vec<String> = schedule
            .iter_after(parse_time_str(from).unwrap())
            .take(expected.len())
            .map(format_time)
            .collect();
        let want: Vec<String> = expected
            .iter()
            .map(|d| {
                if d.len() == 16 {
                    format!("{d}:00.000Z")
                } else {
                    d.to_string()
                }
            })
            .collect();
        assert_eq!(got, want, "{expr:?} from {from}");
    }
}

#[test]
fn five_field_basics_ranges_lists_and_steps() {
    check(&[
        (
            "30 2 * * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T02:30", "2026-01-02T02:30"],
        ),
        (
            "0 9-11 * * *",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-01T09:00",
                "2026-01-01T10:00",
                "2026-01-01T11:00",
                "2026-01-02T09:00",
            ],
        ),
        (
            "0,30 8 * * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T08:00", "2026-01-01T08:30", "2026-01-02T08:00"],
        ),
        (
            "*/20 * * * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T00:20", "2026-01-01T00:40", "2026-01-01T01:00"],
        ),
        (
            "5/20 * * * *",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-01T00:05",
                "2026-01-01T00:25",
                "2026-01-01T00:45",
                "2026-01-01T01:05",
            ],
        ),
        (
            "10-40/15 * * * *",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-01T00:10",
                "2026-01-01T00:25",
                "2026-01-01T00:40",
                "2026-01-01T01:10",
            ],
        ),
        (
            "0 0 1,15 * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-15T00:00", "2026-02-01T00:00", "2026-02-15T00:00"],
        ),
        (
            "0 0 1 */4 *",
            "2026-01-01T00:00:00Z",
            &["2026-05-01T00:00", "2026-09-01T00:00", "2027-01-01T00:00"],
        ),
        // Every minute: strictly after, to the next whole minute.
        (
            "* * * * *",
            "2026-01-01T00:00:30.500Z",
            &["2026-01-01T00:01", "2026-01-01T00:02"],
        ),
    ]);
}

#[test]
fn five_field_day_fields_follow_the_vixie_or_rule() {
    check(&[
        // Both restricted: the 13th OR any Friday. April 2026: Fridays 3, 10, 17, 24; the 13th is a Monday.
        (
            "0 0 13 * 5",
            "2026-04-01T00:00:00Z",
            &[
                "2026-04-03T00:00",
                "2026-04-10T00:00",
                "2026-04-13T00:00",
                "2026-04-17T00:00",
                "2026-04-24T00:00",
                "2026-05-01T00:00",
            ],
        ),
        // `*/2` starts with `*`, so it counts as unrestricted: odd days AND Fridays.
        (
            "0 0 */2 * 5",
            "2026-04-01T00:00:00Z",
            &[
                "2026-04-03T00:00",
                "2026-04-17T00:00",
                "2026-05-01T00:00",
                "2026-05-15T00:00",
            ],
        ),
        // One restricted: only that one.
        (
            "0 0 13 * *",
            "2026-04-01T00:00:00Z",
            &["2026-04-13T00:00", "2026-05-13T00:00"],
        ),
        (
            "0 0 * * 5",
            "2026-04-01T00:00:00Z",
            &["2026-04-03T00:00", "2026-04-10T00:00"],
        ),
        (
            "0 0 ? * 1",
            "2026-04-01T00:00:00Z",
            &["2026-04-06T00:00", "2026-04-13T00:00"],
        ),
    ]);
}

#[test]
fn five_field_sunday_is_0_and_7() {
    for expr in ["0 12 * * 0", "0 12 * * 7", "0 12 * * SUN", "0 12 * * sun"] {
        check(&[(
            expr,
            "2026-01-01T00:00:00Z",
            &["2026-01-04T12:00", "2026-01-11T12:00"],
        )]);
    }
    // A range ending in 7 includes Sunday: Saturday and Sunday.
    check(&[(
        "0 12 * * 6-7",
        "2026-01-01T00:00:00Z",
        &["2026-01-03T12:00", "2026-01-04T12:00", "2026-01-10T12:00"],
    )]);
}

#[test]
fn quartz_days_of_week_are_1_to_7_from_sunday() {
    check(&[
        (
            "0 0 12 ? * 1",
            "2026-01-01T00:00:00Z",
            &["2026-01-04T12:00", "2026-01-11T12:00"],
        ),
        (
            "0 0 12 ? * 7",
            "2026-01-01T00:00:00Z",
            &["2026-01-03T12:00", "2026-01-10T12:00"],
        ),
        (
            "0 0 12 ? * 2-6",
            "2026-01-02T13:00:00Z",
            &["2026-01-05T12:00", "2026-01-06T12:00"],
        ),
        (
            "0 0 12 ? * MON-FRI",
            "2026-01-02T13:00:00Z",
            &["2026-01-05T12:00", "2026-01-06T12:00"],
        ),
        // Wrap-around range, Quartz only: Friday through Monday.
        (
            "0 0 12 ? * FRI-MON",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-02T12:00",
                "2026-01-03T12:00",
                "2026-01-04T12:00",
                "2026-01-05T12:00",
                "2026-01-09T12:00",
            ],
        ),
        // `L` alone in day-of-week is Saturday.
        (
            "0 0 12 ? * L",
            "2026-01-01T00:00:00Z",
            &["2026-01-03T12:00", "2026-01-10T12:00"],
        ),
        // `*` in both day fields (the contract's example) is every day.
        (
            "0 30 2 * * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-01T02:30", "2026-01-02T02:30"],
        ),
    ]);
}

#[test]
fn quartz_seconds_and_wrapping_hours() {
    check(&[
        (
            "15,45 * * * * ?",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-01T00:00:15.000Z",
                "2026-01-01T00:00:45.000Z",
                "2026-01-01T00:01:15.000Z",
            ],
        ),
        (
            "0/20 * * * * ?",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-01T00:00:20.000Z",
                "2026-01-01T00:00:40.000Z",
                "2026-01-01T00:01:00.000Z",
            ],
        ),
        (
            "0 0 22-2 * * ?",
            "2026-01-01T12:00:00Z",
            &[
                "2026-01-01T22:00",
                "2026-01-01T23:00",
                "2026-01-02T00:00",
                "2026-01-02T01:00",
                "2026-01-02T02:00",
                "2026-01-02T22:00",
            ],
        ),
        (
            "0 0 22-2/2 * * ?",
            "2026-01-01T12:00:00Z",
            &[
                "2026-01-01T22:00",
                "2026-01-02T00:00",
                "2026-01-02T02:00",
                "2026-01-02T22:00",
            ],
        ),
    ]);
}

#[test]
fn month_and_day_names_in_any_case() {
    check(&[
        (
            "0 9 * JAN,MAR MON",
            "2026-01-20T00:00:00Z",
            &["2026-01-26T09:00", "2026-03-02T09:00", "2026-03-09T09:00"],
        ),
        (
            "0 9 * jan,mar mon",
            "2026-01-20T00:00:00Z",
            &["2026-01-26T09:00", "2026-03-02T09:00"],
        ),
        (
            "0 0 9 ? FEB-MAR SAT",
            "2026-01-01T00:00:00Z",
            &["2026-02-07T09:00", "2026-02-14T09:00"],
        ),
        // Wrap-around month range, Quartz only (5-field refuses it, as Vixie cron does).
        (
            "0 0 0 1 NOV-FEB ?",
            "2026-03-01T00:00:00Z",
            &[
                "2026-11-01T00:00",
                "2026-12-01T00:00",
                "2027-01-01T00:00",
                "2027-02-01T00:00",
                "2027-11-01T00:00",
            ],
        ),
    ]);
}

#[test]
fn last_day_of_month() {
    check(&[
        (
            "0 0 L * *",
            "2026-01-15T00:00:00Z",
            &[
                "2026-01-31T00:00",
                "2026-02-28T00:00",
                "2026-03-31T00:00",
                "2026-04-30T00:00",
            ],
        ),
        ("0 0 0 L * ?", "2028-02-01T00:00:00Z", &["2028-02-29T00:00"]),
        (
            "0 0 L-3 * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-28T00:00", "2026-02-25T00:00"],
        ),
    ]);
}

#[test]
fn last_weekday_of_month() {
    // 5L: last Friday in 5-field numbering, last Thursday in Quartz numbering.
    check(&[
        (
            "0 0 * * 5L",
            "2026-01-01T00:00:00Z",
            &["2026-01-30T00:00", "2026-02-27T00:00", "2026-03-27T00:00"],
        ),
        (
            "0 0 * * FRIL",
            "2026-01-01T00:00:00Z",
            &["2026-01-30T00:00"],
        ),
        (
            "0 0 0 ? * 5L",
            "2026-01-01T00:00:00Z",
            &["2026-01-29T00:00", "2026-02-26T00:00", "2026-03-26T00:00"],
        ),
        (
            "0 0 0 ? * FRIL",
            "2026-01-01T00:00:00Z",
            &["2026-01-30T00:00", "2026-02-27T00:00"],
        ),
    ]);
}

#[test]
fn nearest_weekday_w_and_lw() {
    check(&[
        // Jan 15 is a Thursday; Feb 15 and Mar 15 are Sundays (-> Monday 16th).
        (
            "0 0 15W * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-15T00:00", "2026-02-16T00:00", "2026-03-16T00:00"],
        ),
        // Aug 15 2026 is a Saturday (-> Friday 14th).
        (
            "0 0 0 15W * ?",
            "2026-08-01T00:00:00Z",
            &["2026-08-14T00:00"],
        ),
        // Last weekday: Jan 31 and Feb 28 are Saturdays, Mar 31 a Tuesday.
        (
            "0 0 LW * *",
            "2026-01-01T00:00:00Z",
            &["2026-01-30T00:00", "2026-02-27T00:00", "2026-03-31T00:00"],
        ),
        (
            "0 0 0 LW * ?",
            "2026-05-01T00:00:00Z",
            &["2026-05-29T00:00"],
        ),
    ]);
}

#[test]
fn nth_weekday_with_hash() {
    check(&[
        // First Monday: Jan 5, Feb 2, Mar 2.
        (
            "0 0 * * 1#1",
            "2026-01-01T00:00:00Z",
            &["2026-01-05T00:00", "2026-02-02T00:00", "2026-03-02T00:00"],
        ),
        (
            "0 0 0 ? * 2#1",
            "2026-01-01T00:00:00Z",
            &["2026-01-05T00:00", "2026-02-02T00:00"],
        ),
        // Third Friday (Quartz 6): Jan 16, Feb 20, Mar 20.
        (
            "0 0 0 ? * 6#3",
            "2026-01-01T00:00:00Z",
            &["2026-01-16T00:00", "2026-02-20T00:00", "2026-03-20T00:00"],
        ),
        (
            "0 0 * * FRI#3",
            "2026-01-01T00:00:00Z",
            &["2026-01-16T00:00", "2026-02-20T00:00"],
        ),
        // Fifth Thursday: January 2026 has one (the 29th), February not, April does (the 30th).
        (
            "0 0 * * 4#5",
            "2026-01-01T00:00:00Z",
            &["2026-01-29T00:00", "2026-04-30T00:00"],
        ),
    ]);
}

#[test]
fn macros() {
    for (m, next) in [
        ("@yearly", "2027-01-01T00:00"),
        ("@annually", "2027-01-01T00:00"),
        ("@monthly", "2026-02-01T00:00"),
        ("@weekly", "2026-01-04T00:00"),
        ("@daily", "2026-01-02T00:00"),
        ("@midnight", "2026-01-02T00:00"),
        ("@hourly", "2026-01-01T01:00"),
        ("@DAILY", "2026-01-02T00:00"),
    ] {
        check(&[(m, "2026-01-01T00:00:00Z", &[next])]);
    }
}

#[test]
fn seven_field_year() {
    let spec = ScheduleSpec::Cron {
        cron: "0 0 0 1 1 ? 2028,2030".into(),
        tz: "UTC".into(),
    };
    let s = Schedule::compile(&spec, Utc::now()).unwrap();
    let got: Vec<String> = s
        .iter_after(parse_time_str("2026-01-01T00:00:00Z").unwrap())
        .map(format_time)
        .collect();
    assert_eq!(
        got,
        ["2028-01-01T00:00:00.000Z", "2030-01-01T00:00:00.000Z"]
    );
    check(&[
        (
            "0 30 9 ? * MON 2027-2099/50",
            "2026-06-01T00:00:00Z",
            &["2027-01-04T09:30", "2027-01-11T09:30"],
        ),
        (
            "0 0 12 25 DEC ? *",
            "2026-01-01T00:00:00Z",
            &["2026-12-25T12:00", "2027-12-25T12:00"],
        ),
    ]);
}

#[test]
fn leap_day_waits_for_a_leap_year() {
    check(&[(
        "0 0 29 2 *",
        "2026-01-01T00:00:00Z",
        &["2028-02-29T00:00", "2032-02-29T00:00"],
    )]);
    // 2100 is not a leap year: from 2097 the next 29th of February is in 2104.
    check(&[("0 0 29 2 *", "2097-01-01T00:00:00Z", &["2104-02-29T00:00"])]);
}
