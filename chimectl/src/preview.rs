//! `chimectl preview`: the next firing times of a schedule, computed locally,
//! or of a stored job (`preview ID`: the job is fetched, then previewed the
//! same way; `get` shows the same instants).
//!
//! The flags are turned into the same `schedule` JSON a JobSpec carries and go
//! through `ScheduleSpec::from_json` and `Schedule::compile`, so the CLI accepts
//! and refuses exactly what the API does, with the same messages. Only
//! calendars (`--exclude`, a job's `exclude`) need the server, which keeps them.

use crate::when::{self, When};
use crate::Failure;
use anyhow::Context;
use chime_common::api::{PreviewReply, PreviewRequest};
use chime_common::client::Client;
use chime_common::preview::Preview;
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::{json, Map, Value};
use std::io::Write;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    chimectl preview --cron '0 30 2 * * *' --tz Europe/Berlin -n 3\n  \
    chimectl preview --every 90m --from now\n  \
    chimectl preview nightly-report --from +1d     # a stored job (asks the server)")]
pub struct PreviewArgs {
    /// A stored job: preview its schedule with its zone, DST rules, jitter
    /// and calendars (asks the server for the job).
    #[arg(value_name = "ID", conflicts_with_all = ["cron", "every", "tz", "id", "dst_gap", "dst_repeat", "jitter", "exclude"])]
    job: Option<String>,

    /// Cron expression: 5 fields (Unix), 6 (seconds first) or 7 (with year, Quartz), or @daily etc.
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,

    /// IANA time zone of the cron expression [default: UTC].
    #[arg(long, value_name = "TZ")]
    tz: Option<String>,

    /// Fixed rate such as 30s, "1h 30m" or 250ms (a bare number is milliseconds); anchored at --from.
    #[arg(long, value_name = "D")]
    every: Option<String>,

    /// Show instants strictly after this time: RFC 3339, `now`, or an
    /// offset such as -3h, +30m, +2d [default: now].
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    from: Option<When>,

    /// How many instants to show.
    #[arg(short = 'n', value_name = "N", default_value_t = 10)]
    n: usize,

    /// The job's id: what H in the cron expression and --jitter draw from.
    #[arg(long, value_name = "ID")]
    id: Option<String>,

    /// A local time inside a spring-forward gap: shift (fire at the gap's end) or skip.
    #[arg(long, value_name = "shift|skip")]
    dst_gap: Option<String>,

    /// A local time repeated at fall-back: first (fire once) or both.
    #[arg(long, value_name = "first|both")]
    dst_repeat: Option<String>,

    /// Move each instant later by a fixed amount below D, drawn from --id and the instant.
    #[arg(long, value_name = "D")]
    jitter: Option<String>,

    /// Mark the instants a calendar excludes (asks the server, which keeps the calendars).
    #[arg(long, value_name = "CALENDAR")]
    exclude: Vec<String>,
}

impl PreviewArgs {
    /// Whether the preview needs the server: only jobs and calendars live there.
    pub fn needs_server(&self) -> bool {
        self.job.is_some() || !self.exclude.is_empty()
    }
}

/// The `jobs.preview` request for a stored job (its JSON, as `jobs.get`
/// gives it): its schedule and time rules, `count` instants after `from`.
pub fn job_request(job: &Value, from: DateTime<Utc>, count: u32) -> PreviewRequest {
    let field = |name: &str| job.get(name).filter(|v| !v.is_null()).cloned();
    PreviewRequest {
        schedule: job["schedule"].clone(),
        from: Some(from),
        count: Some(count),
        id: job["id"].as_str().map(str::to_string),
        dst: field("dst"),
        jitter: field("jitter"),
        exclude: field("exclude").filter(|v| v.as_array().is_some_and(|a| !a.is_empty())),
    }
}

/// The instants of `request`: computed here, or by the server when it
/// names calendars, which only the server has.
pub async fn instants(
    request: &PreviewRequest,
    client: Option<&Client>,
    now: DateTime<Utc>,
) -> Result<PreviewReply, Failure> {
    match client {
        Some(client) if request.exclude.is_some() => {
            client.preview(request).await.map_err(|e| match e.field {
                Some(field) => Failure::Usage(format!("invalid {}: {}", flag(&field), e.message)),
                None => Failure::Other(anyhow::anyhow!("{}", e.message)),
            })
        }
        _ => local(request, now),
    }
}

/// Prints the next `n` instants, one per line with its marks, or the
/// `jobs.preview` reply with `--json`. With `client`, the server answers.
pub async fn run(
    args: &PreviewArgs,
    client: Option<&Client>,
    json_output: bool,
) -> Result<(), Failure> {
    let now = Utc::now();
    let request = match (&args.job, client) {
        (Some(id), Some(client)) => {
            let job = client.get_job(id).await.map_err(crate::api::api_failure)?;
            let job = serde_json::to_value(&job).context("cannot read the job")?;
            let from = args.from.map_or(now, |from| from.at(now));
            job_request(&job, from, count(args)?)
        }
        _ => request(args, now)?,
    };
    let reply = instants(&request, client, now).await?;
    let mut out = std::io::stdout().lock();
    if json_output {
        writeln!(out, "{}", json!(reply)).context("writing to stdout")?;
    } else {
        crate::api::warn(&reply.warnings);
        for line in lines(&reply) {
            writeln!(out, "{line}").context("writing to stdout")?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(())
}

/// One line per instant, its marks in parentheses.
fn lines(reply: &PreviewReply) -> Vec<String> {
    reply
        .times
        .iter()
        .enumerate()
        .map(|(i, t)| match reply.marks.get(i).cloned().flatten() {
            Some(mark) => format!("{t}  ({})", mark.describe()),
            None => t.clone(),
        })
        .collect()
}

/// The preview computed here, as the server would (without calendars).
fn local(request: &PreviewRequest, now: DateTime<Utc>) -> Result<PreviewReply, Failure> {
    let max = request.count.unwrap_or(1);
    let preview = Preview::compute(request, now, max).map_err(|e| {
        let field = e.field.clone().unwrap_or_default();
        // The API's message starts with its field; the CLI names the flag instead.
        let message = e
            .message
            .strip_prefix(&format!("{field}: "))
            .unwrap_or(&e.message)
            .to_string();
        Failure::Usage(format!("invalid {}: {message}", flag(&field)))
    })?;
    Ok(preview.reply(&[]))
}

/// `-n`, checked.
fn count(args: &PreviewArgs) -> Result<u32, Failure> {
    if args.n == 0 {
        return Err(usage("-n", "must be at least 1"));
    }
    u32::try_from(args.n).map_err(|_| usage("-n", "is too large"))
}

/// The `jobs.preview` request the flags describe, or the usage error naming
/// the flag at fault.
fn request(args: &PreviewArgs, now: DateTime<Utc>) -> Result<PreviewRequest, Failure> {
    let count = count(args)?;
    let from = args.from.map_or(now, |from| from.at(now));
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
            schedule.insert("every".into(), duration(every));
        }
        (Some(_), Some(_)) => {
            return Err(usage("--cron", "give either --cron or --every, not both"));
        }
        (None, None) => {
            return Err(Failure::Usage(
                "preview needs a job ID, --cron EXPR [--tz TZ] or --every D".to_string(),
            ));
        }
    }
    let mut dst = Map::new();
    if let Some(gap) = &args.dst_gap {
        dst.insert("gap".into(), Value::String(gap.clone()));
    }
    if let Some(repeat) = &args.dst_repeat {
        dst.insert("repeat".into(), Value::String(repeat.clone()));
    }
    Ok(PreviewRequest {
        schedule: Value::Object(schedule),
        from: Some(from),
        count: Some(count),
        id: args.id.clone(),
        dst: (!dst.is_empty()).then_some(Value::Object(dst)),
        jitter: args.jitter.as_deref().map(duration),
        exclude: (!args.exclude.is_empty()).then(|| json!(args.exclude)),
    })
}

/// A DURATION flag: a bare number is milliseconds, as in the JSON contract.
fn duration(text: &str) -> Value {
    match text.trim().parse::<u64>() {
        Ok(ms) => Value::from(ms),
        Err(_) => Value::String(text.to_string()),
    }
}

fn usage(flag: &str, message: &str) -> Failure {
    Failure::Usage(format!("invalid {flag}: {message}"))
}

/// The command-line flag behind a request field.
fn flag(field: &str) -> &str {
    match field {
        "schedule.cron" => "--cron",
        "schedule.tz" => "--tz",
        "schedule.every" => "--every",
        "dst.gap" => "--dst-gap",
        "dst.repeat" => "--dst-repeat",
        "jitter" => "--jitter",
        "id" => "--id",
        "from" => "--from",
        "count" => "-n",
        f if f.starts_with("exclude") => "--exclude",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cron: Option<&str>, tz: Option<&str>, every: Option<&str>, n: usize) -> PreviewArgs {
        PreviewArgs {
            job: None,
            cron: cron.map(str::to_string),
            tz: tz.map(str::to_string),
            every: every.map(str::to_string),
            from: None,
            n,
            id: None,
            dst_gap: None,
            dst_repeat: None,
            jitter: None,
            exclude: Vec::new(),
        }
    }

    /// The lines `chimectl preview` prints, computed offline at `now`.
    fn preview(args: &PreviewArgs, now: DateTime<Utc>) -> Result<Vec<String>, Failure> {
        Ok(lines(&local(&request(args, now)?, now)?))
    }

    use chime_common::duration::parse_time_str;

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
                "2026-03-29T01:00:00.000Z  (shifted)",
                "2026-03-30T00:30:00.000Z"
            ]
        );
    }

    #[test]
    fn dst_flags_choose_the_policy_and_marks_show_it() {
        let mut a = args(Some("30 2 * * *"), Some("Europe/Berlin"), None, 3);
        a.dst_gap = Some("skip".into());
        a.dst_repeat = Some("both".into());
        let autumn = parse_time_str("2026-10-24T12:00:00Z").unwrap();
        assert_eq!(
            preview(&a, autumn).unwrap(),
            [
                "2026-10-25T00:30:00.000Z  (repeated)",
                "2026-10-25T01:30:00.000Z  (repeated)",
                "2026-10-26T01:30:00.000Z"
            ]
        );
        assert_eq!(
            preview(&a, from()).unwrap()[1],
            "2026-03-30T00:30:00.000Z",
            "skip: no firing on the 29th"
        );
        a.dst_gap = Some("later".into());
        assert!(usage_message(preview(&a, from())).starts_with("invalid --dst-gap:"));
    }

    #[test]
    fn h_and_jitter_need_an_id() {
        let mut a = args(Some("H H * * *"), None, None, 2);
        assert!(usage_message(preview(&a, from())).starts_with("invalid --id:"));
        a.id = Some("nightly".into());
        let got = preview(&a, from()).unwrap();
        assert_eq!(got, preview(&a, from()).unwrap(), "the same every time");
        let mut j = args(None, None, Some("1h"), 2);
        j.jitter = Some("10m".into());
        assert!(usage_message(preview(&j, from())).starts_with("invalid --id:"));
        j.id = Some("nightly".into());
        assert!(preview(&j, from()).is_ok());
        j.jitter = Some("2h".into());
        assert!(usage_message(preview(&j, from())).starts_with("invalid --jitter:"));
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
