//! The `dst` policy in every combination (`gap` shift | skip × `repeat`
//! first | both) across real transitions: New York and Berlin, Lord Howe
//! (a 30-minute shift), Santiago (southern hemisphere, changing at midnight)
//! and Whitehorse (daylight saving until 2020, none since). Expected instants
//! are worked out by hand from the zones' offsets, written beside each row.

use super::*;
use crate::duration::{format_time, parse_time_str};
use serde_json::json;

/// One transition: the instants under each value of the part of the policy
/// that matters; the other part must change nothing.
struct Row {
    tz: &'static str,
    cron: &'static str,
    from: &'static str,
    /// Under `gap: shift` (or `repeat: first`), then `skip` (or `both`).
    expected: [&'static [&'static str]; 2],
}

/// The first `n` instants after `from` under `gap`/`repeat`, each followed
/// by its mark, if any.
fn fire(row: &Row, gap: &str, repeat: &str, n: usize) -> Vec<String> {
    let spec = ScheduleSpec::from_json(&json!({"cron": row.cron, "tz": row.tz}), "schedule")
        .expect("valid schedule");
    let dst = DstPolicy::from_json(&json!({"gap": gap, "repeat": repeat}), "dst").expect("policy");
    let from = parse_time_str(row.from).expect("time");
    let options = ScheduleOptions {
        dst: Some(dst),
        ..ScheduleOptions::default()
    };
    let schedule = Schedule::compile_with(&spec, from, &options).expect("compiles");
    schedule
        .iter_marked(from)
        .take(n)
        .map(|(t, mark)| match mark {
            Some(m) => format!("{} {}", format_time(t), m.as_str()),
            None => format_time(t),
        })
        .collect()
}

const GAPS: &[Row] = &[
    // 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 02:30 does not exist.
    Row {
        tz: "America/New_York",
        cron: "30 2 * * *",
        from: "2026-03-07T12:00:00Z",
        expected: [
            &[
                "2026-03-08T07:00:00.000Z shifted",
                "2026-03-09T06:30:00.000Z",
            ],
            &["2026-03-09T06:30:00.000Z", "2026-03-10T06:30:00.000Z"],
        ],
    },
    // Real-time hours: 02:00 and 02:30 shift onto 03:00 EDT, one firing.
    Row {
        tz: "America/New_York",
        cron: "*/30 * * * *",
        from: "2026-03-08T06:15:00Z",
        expected: [
            &[
                "2026-03-08T06:30:00.000Z",
                "2026-03-08T07:00:00.000Z shifted",
                "2026-03-08T07:30:00.000Z",
            ],
            &[
                "2026-03-08T06:30:00.000Z",
                "2026-03-08T07:00:00.000Z",
                "2026-03-08T07:30:00.000Z",
            ],
        ],
    },
    // 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
    Row {
        tz: "Europe/Berlin",
        cron: "30 2 * * *",
        from: "2026-03-28T12:00:00Z",
        expected: [
            &[
                "2026-03-29T01:00:00.000Z shifted",
                "2026-03-30T00:30:00.000Z",
            ],
            &["2026-03-30T00:30:00.000Z", "2026-03-31T00:30:00.000Z"],
        ],
    },
    // 2026-10-04 02:00 +10:30 -> 02:30 +11 (2026-10-03T15:30Z): 02:15 is
    // inside the half-hour gap.
    Row {
        tz: "Australia/Lord_Howe",
        cron: "15 2 * * *",
        from: "2026-10-02T12:00:00Z",
        expected: [
            &[
                "2026-10-02T15:45:00.000Z",
                "2026-10-03T15:30:00.000Z shifted",
                "2026-10-04T15:15:00.000Z",
            ],
            &["2026-10-02T15:45:00.000Z", "2026-10-04T15:15:00.000Z"],
        ],
    },
    // 2026-09-06 00:00 -04 -> 01:00 -03 (04:00Z): midnight to one does not exist.
    Row {
        tz: "America/Santiago",
        cron: "30 0 * * *",
        from: "2026-09-04T12:00:00Z",
        expected: [
            &[
                "2026-09-05T04:30:00.000Z",
                "2026-09-06T04:00:00.000Z shifted",
                "2026-09-07T03:30:00.000Z",
            ],
            &["2026-09-05T04:30:00.000Z", "2026-09-07T03:30:00.000Z"],
        ],
    },
    // 2019-03-10 02:00 PST -> 03:00 PDT (10:00Z), the rules before 2020.
    Row {
        tz: "America/Whitehorse",
        cron: "30 2 * * *",
        from: "2019-03-09T12:00:00Z",
        expected: [
            &[
                "2019-03-10T10:00:00.000Z shifted",
                "2019-03-11T09:30:00.000Z",
            ],
            &["2019-03-11T09:30:00.000Z", "2019-03-12T09:30:00.000Z"],
        ],
    },
    // Since 2020 Yukon keeps -07 all year: 2021-03-14 has no gap at all.
    Row {
        tz: "America/Whitehorse",
        cron: "30 2 * * *",
        from: "2021-03-13T12:00:00Z",
        expected: [
            &["2021-03-14T09:30:00.000Z", "2021-03-15T09:30:00.000Z"],
            &["2021-03-14T09:30:00.000Z", "2021-03-15T09:30:00.000Z"],
        ],
    },
];

const REPEATS: &[Row] = &[
    // 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 is 05:30Z and 06:30Z.
    Row {
        tz: "America/New_York",
        cron: "30 1 * * *",
        from: "2026-10-31T12:00:00Z",
        expected: [
            &["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"],
            &[
                "2026-11-01T05:30:00.000Z repeated",
                "2026-11-01T06:30:00.000Z repeated",
                "2026-11-02T06:30:00.000Z",
            ],
        ],
    },
    // Real-time hours: the repeated 01:00 and 01:30 fire once or twice.
    Row {
        tz: "America/New_York",
        cron: "*/30 * * * *",
        from: "2026-11-01T04:45:00Z",
        expected: [
            &[
                "2026-11-01T05:00:00.000Z",
                "2026-11-01T05:30:00.000Z",
                "2026-11-01T07:00:00.000Z",
            ],
            &[
                "2026-11-01T05:00:00.000Z repeated",
                "2026-11-01T05:30:00.000Z repeated",
                "2026-11-01T06:00:00.000Z repeated",
                "2026-11-01T06:30:00.000Z repeated",
                "2026-11-01T07:00:00.000Z",
            ],
        ],
    },
    // 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 is 00:30Z and 01:30Z.
    Row {
        tz: "Europe/Berlin",
        cron: "30 2 * * *",
        from: "2026-10-24T12:00:00Z",
        expected: [
            &["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
            &[
                "2026-10-25T00:30:00.000Z repeated",
                "2026-10-25T01:30:00.000Z repeated",
                "2026-10-26T01:30:00.000Z",
            ],
        ],
    },
    // 2026-04-05 02:00 +11 -> 01:30 +10:30: 01:45 is 14:45Z and 15:15Z.
    Row {
        tz: "Australia/Lord_Howe",
        cron: "45 1 * * *",
        from: "2026-04-04T12:00:00Z",
        expected: [
            &["2026-04-04T14:45:00.000Z", "2026-04-05T15:15:00.000Z"],
            &[
                "2026-04-04T14:45:00.000Z repeated",
                "2026-04-04T15:15:00.000Z repeated",
                "2026-04-05T15:15:00.000Z",
            ],
        ],
    },
    // 2026-04-05 00:00 -03 -> 2026-04-04 23:00 -04: 23:30 on the 4th is
    // 02:30Z and 03:30Z on the 5th.
    Row {
        tz: "America/Santiago",
        cron: "30 23 * * *",
        from: "2026-04-04T12:00:00Z",
        expected: [
            &["2026-04-05T02:30:00.000Z", "2026-04-06T03:30:00.000Z"],
            &[
                "2026-04-05T02:30:00.000Z repeated",
                "2026-04-05T03:30:00.000Z repeated",
                "2026-04-06T03:30:00.000Z",
            ],
        ],
    },
    // 2019-11-03 02:00 PDT -> 01:00 PST: 01:30 is 08:30Z and 09:30Z.
    Row {
        tz: "America/Whitehorse",
        cron: "30 1 * * *",
        from: "2019-11-02T12:00:00Z",
        expected: [
            &["2019-11-03T08:30:00.000Z", "2019-11-04T09:30:00.000Z"],
            &[
                "2019-11-03T08:30:00.000Z repeated",
                "2019-11-03T09:30:00.000Z repeated",
                "2019-11-04T09:30:00.000Z",
            ],
        ],
    },
    // No fall-back since 2020: 01:30 on 2021-11-07 happens once.
    Row {
        tz: "America/Whitehorse",
        cron: "30 1 * * *",
        from: "2021-11-06T12:00:00Z",
        expected: [
            &["2021-11-07T08:30:00.000Z", "2021-11-08T08:30:00.000Z"],
            &["2021-11-07T08:30:00.000Z", "2021-11-08T08:30:00.000Z"],
        ],
    },
];

#[test]
fn gaps_shift_or_skip_whatever_the_repeat_policy() {
    for row in GAPS {
        for (i, gap) in ["shift", "skip"].into_iter().enumerate() {
            for repeat in ["first", "both"] {
                assert_eq!(
                    fire(row, gap, repeat, row.expected[i].len()),
                    row.expected[i],
                    "{} {:?} gap {gap} repeat {repeat}",
                    row.tz,
                    row.cron
                );
            }
        }
    }
}

#[test]
fn repeats_fire_once_or_twice_whatever_the_gap_policy() {
    for row in REPEATS {
        for (i, repeat) in ["first", "both"].into_iter().enumerate() {
            for gap in ["shift", "skip"] {
                assert_eq!(
                    fire(row, gap, repeat, row.expected[i].len()),
                    row.expected[i],
                    "{} {:?} gap {gap} repeat {repeat}",
                    row.tz,
                    row.cron
                );
            }
        }
    }
}

#[test]
fn without_a_policy_the_v1_rule_decides_by_the_hour_field() {
    let instants = |cron: &str, from: &str, dst: Option<DstPolicy>| -> Vec<DateTime<Utc>> {
        let spec =
            ScheduleSpec::from_json(&json!({"cron": cron, "tz": "America/New_York"}), "schedule")
                .unwrap();
        let from = parse_time_str(from).unwrap();
        let options = ScheduleOptions {
            dst,
            ..ScheduleOptions::default()
        };
        let s = Schedule::compile_with(&spec, from, &options).unwrap();
        s.iter_after(from).take(6).collect()
    };
    let policy = |gap, repeat| {
        Some(DstPolicy {
            gap: Some(gap),
            repeat: Some(repeat),
        })
    };
    for from in ["2026-03-07T12:00:00Z", "2026-10-31T12:00:00Z"] {
        // Fixed hours: shift and first; `*` hours: skip and both.
        assert_eq!(
            instants("30 1-2 * * *", from, None),
            instants("30 1-2 * * *", from, policy(Gap::Shift, Repeat::First))
        );
        assert_eq!(
            instants("30 * * * *", from, None),
            instants("30 * * * *", from, policy(Gap::Skip, Repeat::Both))
        );
    }
}

#[test]
fn dst_applies_to_cron_schedules_only() {
    let options = ScheduleOptions {
        dst: Some(DstPolicy::default()),
        ..ScheduleOptions::default()
    };
    for schedule in [
        json!({"every": "1h"}),
        json!({"at": "2026-01-01T00:00:00Z"}),
    ] {
        let spec = ScheduleSpec::from_json(&schedule, "schedule").unwrap();
        let e = Schedule::compile_with(&spec, Utc::now(), &options).unwrap_err();
        assert_eq!(e.field, "dst");
    }
}
