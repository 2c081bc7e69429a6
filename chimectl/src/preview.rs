//! `chimectl preview`: the next firing times of a schedule, computed locally.
//!
//! The flags are turned into the same `schedule` JSON a JobSpec carries and go
//! through `ScheduleSpec::from_json` and `Schedule::compile`, so the CLI accepts
//! and refuses exactly what the API does, with the same messages.

use crate::Failure;
use anyhow::Context;
use chime_common::duration::{format_time, parse_time_str};
use chime_common::schedule::{Schedule, ScheduleSpec};
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::{json, Map, Value};
use std::io::Write;

#[derive(Debug, Args)]
pub struct PreviewArgs {
    /// Cron expression: 5 fields (Unix), 6 (seconds first) or 7 (with year, Quartz), or @daily etc.
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,

    /// IANA time zone of the cron expression [default: UTC].
    #[arg(long, value_name = "TZ")]
    tz: Option<String>,

    /// Fixed rate such as 30s, "1h 30m" or 250ms (a bare number is milliseconds); anchored at --from.
    #[arg(long, value_name = "D")]
    every: Option<String>,

    /// Show instants strictly after this RFC 3339 time [default: now].
    #[arg(long, value_name = "TIME")]
    from: Option<String>,

    /// How many instants to show.
    #[arg(short = 'n', value_name = "N", default_value_t = 10)]
    n: usize,
}

/// Prints the next `n` instants, one per line, or `{"times": [...]}` with `--json`.
pub fn run(args: &PreviewArgs, json_output: bool) -> Result<(), Failure> {
    let from = match &args.from {
        Some(text) => parse_time_str(text).map_err(|e| usage("--from", &e))?,
        None => Utc::now(),
    };
    let times = preview(args, from)?;
    let mut out = std::io::stdout().lock();
    if json_output {
        writeln!(out, "{}", json!({ "times": times })).context("writing to stdout")?;
    } else {
        for t in &times {
            writeln!(out, "{t}").context("writing to stdout")?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(())
}

/// The formatted instants, or the usage error naming the flag at fault.
fn preview(args: &PreviewArgs, from: DateTime<Utc>) -> Result<Vec<String>, Failure> {
    if args.n == 0 {
        return Err(usage("-n", "must be at least 1"));
    }
    let mut schedule = Map::new();
    match (&args.cron, &args.every) {
        (Some(cron), None) => {
            schedule.insert("cron".into(), Value::String(cron.clone()));
            if let Some(tz) = &args.tz {
                schedule.insert("tz".into(), Value::String(tz.clone()));
            }
        }
        (None, Some(every)) => {
            if args.tz.is_some() {
                return Err(usage("--tz", "only applies to --cron"));
            }
            // A bare number is milliseconds, as in the JSON contract.
            let value = match every.trim().parse::<u64>() {
                Ok(ms) => Value::from(ms),
                Err(_) => Value::String(every.clone()),
            };
            schedule.insert("every".into(), value);
        }
        (Some(_), Some(_)) => {
            return Err(usage("--cron", "give either --cron or --every, not both"));
        }
        (None, None) => {
            return Err(Failure::Usage(
                "preview needs --cron EXPR [--tz TZ] or --every D".to_string(),
            ));
        }
    }
    let spec = ScheduleSpec::from_json(&Value::Object(schedule), "schedule").map_err(|errors| {
        let message = errors
            .iter()
            .map(|e| format!("invalid {}: {}", flag(&e.field), e.message))
            .collect::<Vec<_>>()
            .join("; ");
        Failure::Usage(message)
    })?;
    // `--every` without a start fires one period after the job is put: here, --from.
    let compiled = Schedule::compile(&spec, from)
        .map_err(|e| Failure::Usage(format!("invalid {}: {}", flag(&e.field), e.message)))?;
    Ok(compiled
        .iter_after(from)
        .take(args.n)
        .map(format_time)
        .collect())
}

fn usage(flag: &str, message: &str) -> Failure {
    Failure::Usage(format!("invalid {flag}: {message}"))
}

/// The command-line flag behind a schedule field.
fn flag(field: &str) -> &str {
    match field {
        "schedule.cron" => "--cron",
        "schedule.tz" => "--tz",
        "schedule.every" => "--every",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cron: Option<&str>, tz: Option<&str>, every: Option<&str>, n: usize) -> PreviewArgs {
        PreviewArgs {
            cron: cron.map(str::to_string),
            tz: tz.map(str::to_string),
            every: every.map(str::to_string),
            from: None,
            n,
        }
    }

    fn from() -> DateTime<Utc> {
        parse_time_str("2026-03-28T00:00:00Z").unwrap()
    }

    fn usage_message(r: Result<Vec<String>, Failure>) -> String {
        match r {
            Err(Failure::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn berlin_example_from_the_contract() {
        let got = preview(
            &args(Some("0 30 2 * * *"), Some("Europe/Berlin"), None, 3),
            from(),
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "2026-03-28T01:30:00.000Z",
                "2026-03-29T01:00:00.000Z",
                "2026-03-30T00:30:00.000Z"
            ]
        );
    }

    #[test]
    fn every_is_anchored_at_from_and_bare_numbers_are_milliseconds() {
        let got = preview(&args(None, None, Some("1500"), 2), from()).unwrap();
        assert_eq!(
            got,
            ["2026-03-28T00:00:01.500Z", "2026-03-28T00:00:03.000Z"]
        );
    }

    #[test]
    fn bad_input_names_the_flag() {
        assert!(
            usage_message(preview(&args(Some("61 * * * *"), None, None, 1), from()))
                .starts_with("invalid --cron: minute")
        );
        assert!(usage_message(preview(
            &args(Some("@daily"), Some("Mars/Base"), None, 1),
            from()
        ))
        .starts_with("invalid --tz:"));
        assert!(
            usage_message(preview(&args(None, None, Some("soon"), 1), from()))
                .starts_with("invalid --every:")
        );
        assert!(
            usage_message(preview(&args(None, None, Some("0s"), 1), from()))
                .starts_with("invalid --every:")
        );
        assert!(
            usage_message(preview(&args(None, Some("UTC"), Some("1s"), 1), from()))
                .starts_with("invalid --tz:")
        );
        assert!(
            usage_message(preview(&args(Some("@daily"), None, Some("1s"), 1), from()))
                .contains("not both")
        );
        assert!(usage_message(preview(&args(None, None, None, 1), from())).contains("--cron"));
        assert!(
            usage_message(preview(&args(Some("@daily"), None, None, 0), from()))
                .starts_with("invalid -n")
        );
    }
}
