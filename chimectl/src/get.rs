//! `chimectl get ID`: one job, whole, for a person: every field of its
//! spec (payload, retry, labels, …), its state and when a pause ends, and
//! its next instants in its own zone and in UTC. `--json` prints the job
//! object as the API gives it.

use crate::api::api_failure;
use crate::preview;
use crate::table::{printable, schedule, text};
use crate::Failure;
use anyhow::Context as _;
use chime_common::api::{JobReply, PreviewReply};
use chime_common::client::Client;
use chime_common::duration::parse_time_str;
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::Value;

/// `get` flags.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The job's id.
    id: String,
    /// How many next instants to show.
    #[arg(short = 'n', value_name = "N", default_value_t = 5)]
    n: u32,
}

/// The fields shown first, in this order, each once; the rest follow.
const FIRST: [&str; 5] = ["id", "group", "schedule", "handler", "payload"];

/// Fields shown as part of another line (`state`, `version`), not alone.
const FOLDED: [&str; 8] = [
    "state",
    "paused",
    "paused_until",
    "next_fire_at",
    "version",
    "created_at",
    "updated_at",
    "upstream_missing",
];

/// Prints the job; its next instants are computed as `preview ID` does.
pub async fn run(args: &GetArgs, client: &Client, as_json: bool) -> Result<(), Failure> {
    let job = client.get_job(&args.id).await.map_err(api_failure)?;
    if as_json {
        // Through a JSON value, as every command prints the server's reply.
        let reply = serde_json::to_value(JobReply {
            job,
            warnings: Vec::new(),
        })
        .context("cannot show the job")?;
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    let job = serde_json::to_value(&job).context("cannot show the job")?;
    let now = Utc::now();
    let next = match next_from(&job, now) {
        Some(from) if args.n > 0 => {
            let request = preview::job_request(&job, from, args.n.min(100));
            Some(
                preview::instants(&request, Some(client), now)
                    .await
                    .map_err(|e| match e {
                        Failure::Usage(message) => message,
                        Failure::Other(e) => format!("{e:#}"),
                        Failure::Status(_) => String::new(),
                    }),
            )
        }
        _ => None,
    };
    for line in describe(&job, next.as_ref()) {
        println!("{line}");
    }
    Ok(())
}

/// Where the next instants start: now, or when a pause ends; `None` when
/// the job has no instants (a fan-in, a completed job).
fn next_from(job: &Value, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if job["schedule"].get("after").is_some() || job["state"] == "completed" {
        return None;
    }
    let until = job["paused_until"]
        .as_str()
        .and_then(|t| parse_time_str(t).ok())
        .filter(|until| *until > now);
    Some(until.unwrap_or(now))
}

/// The lines `get` prints.
fn describe(job: &Value, next: Option<&Result<PreviewReply, String>>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut field = |name: &str, value: String| match value.strip_prefix('\n') {
        // A value of many lines (the payload) starts below its name.
        Some(below) => lines.push(format!("{name}\n{below}")),
        None => lines.push(format!("{name:<20} {value}")),
    };
    for name in FIRST {
        match name {
            "schedule" => field(name, schedule(job)),
            "payload" => field(name, payload(&job["payload"])),
            _ => field(name, text(&job[name])),
        }
    }
    field("state", state(job));
    if let Value::Object(fields) = job {
        for (name, value) in fields {
            if !FIRST.contains(&name.as_str()) && !FOLDED.contains(&name.as_str()) {
                field(name, value_text(value));
            }
        }
    }
    field(
        "version",
        format!(
            "{} (created {}, updated {})",
            text(&job["version"]),
            text(&job["created_at"]),
            text(&job["updated_at"])
        ),
    );
    lines.extend(next_lines(job, next));
    lines
}

/// The state, with what a pause or a fan-in waits for.
fn state(job: &Value) -> String {
    let mut state = text(&job["state"]);
    match job["paused_until"].as_str() {
        Some(until) => state.push_str(&format!(" until {} (resumes by itself)", printable(until))),
        None if job["state"] == "paused" => state.push_str(" (until `chimectl resume`)"),
        None => {}
    }
    if let Some(missing) = job["upstream_missing"].as_array().filter(|m| !m.is_empty()) {
        let ids: Vec<String> = missing.iter().map(text).collect();
        state.push_str(&format!("; waits for missing jobs {}", ids.join(", ")));
    }
    state
}

/// A payload as indented JSON on the lines below (a redacted one as its digest).
fn payload(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::Object(fields) if fields.is_empty() => "{}".to_string(),
        other => {
            let pretty = serde_json::to_string_pretty(other).unwrap_or_default();
            let indented: Vec<String> = pretty
                .lines()
                .map(|line| format!("  {}", printable(line)))
                .collect();
            format!("\n{}", indented.join("\n"))
        }
    }
}

/// A field's value on one line: objects as `key value, …`, lists joined.
fn value_text(value: &Value) -> String {
    match value {
        Value::Object(fields) if fields.is_empty() => "-".to_string(),
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{}={}", printable(k), value_text(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Array(items) if items.is_empty() => "-".to_string(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(", "),
        other => text(other),
    }
}

/// The next instants, each in the job's zone and in UTC, with their marks.
fn next_lines(job: &Value, next: Option<&Result<PreviewReply, String>>) -> Vec<String> {
    let zone: Option<chrono_tz::Tz> = job["schedule"]["cron"]
        .as_str()
        .and(job["schedule"]["tz"].as_str())
        .and_then(|tz| tz.parse().ok());
    let heading = match (job["state"].as_str(), job.get("paused_until")) {
        (Some("paused"), Some(_)) => "next instants once resumed",
        (Some("paused"), None) => "next instants if resumed now",
        _ => "next instants",
    };
    let reply = match next {
        None => return vec![format!("{heading:<20} none")],
        Some(Err(error)) => {
            return vec![format!(
                "{heading:<20} cannot be computed: {}",
                printable(error)
            )]
        }
        Some(Ok(reply)) => reply,
    };
    let mut lines = vec![match zone {
        Some(zone) => format!("{heading} ({zone}, then UTC):"),
        None => format!("{heading} (UTC):"),
    }];
    for (i, time) in reply.times.iter().enumerate() {
        let mark = reply
            .marks
            .get(i)
            .cloned()
            .flatten()
            .map(|m| format!("  ({})", m.describe()))
            .unwrap_or_default();
        let local = zone
            .zip(parse_time_str(time).ok())
            .map(|(zone, t)| {
                format!(
                    "{}  ",
                    t.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z")
                )
            })
            .unwrap_or_default();
        lines.push(format!("  {local}{}{}", printable(time), printable(&mark)));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job() -> Value {
        json!({
            "id": "nightly", "group": "reports", "handler": "shell",
            "schedule": {"cron": "30 2 * * *", "tz": "Europe/Berlin"},
            "payload": {"argv": ["/usr/local/bin/report", "--daily"]},
            "priority": 5, "timeout": "10m",
            "retry": {"max_attempts": 3, "initial": "1s", "max": "5m", "multiplier": 2.0},
            "labels": {"team": "data"}, "exclude": [],
            "state": "paused", "paused": true, "paused_until": "2026-07-01T00:00:00.000Z",
            "next_fire_at": null, "version": 4,
            "created_at": "2026-06-01T00:00:00.000Z", "updated_at": "2026-06-02T00:00:00.000Z",
        })
    }

    #[test]
    fn the_whole_job_is_shown_with_its_pause_and_instants_in_both_zones() {
        let next = PreviewReply {
            times: vec!["2026-07-01T00:30:00.000Z".into()],
            marks: vec![],
            warnings: vec![],
        };
        let text = describe(&job(), Some(&Ok(next))).join("\n");
        for expected in [
            "id                   nightly",
            "schedule             cron 30 2 * * * Europe/Berlin",
            "\"/usr/local/bin/report\",",
            "state                paused until 2026-07-01T00:00:00.000Z (resumes by itself)",
            "retry                initial=1s, max=5m, max_attempts=3, multiplier=2.0",
            "labels               team=data",
            "exclude              -",
            "version              4 (created 2026-06-01T00:00:00.000Z",
            "next instants once resumed (Europe/Berlin, then UTC):",
            "  2026-07-01 02:30:00 CEST  2026-07-01T00:30:00.000Z",
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        assert!(!text.contains("next_fire_at"), "{text}");
    }

    #[test]
    fn instants_start_when_a_pause_ends_and_a_fan_in_has_none() {
        let now = parse_time_str("2026-06-15T00:00:00Z").unwrap();
        assert_eq!(
            next_from(&job(), now),
            parse_time_str("2026-07-01T00:00:00Z").ok()
        );
        let later = parse_time_str("2026-08-01T00:00:00Z").unwrap();
        assert_eq!(next_from(&job(), later), Some(later));
        let fan_in = json!({"schedule": {"after": ["a"]}, "state": "active"});
        assert_eq!(next_from(&fan_in, now), None);
        assert!(describe(&fan_in, None)
            .join("\n")
            .contains(&format!("{:<20} none", "next instants")));
    }
}
