//! Plain-text tables for people; `--json` is for programs.

use serde_json::Value;

/// `text` safe to print on a terminal: control characters (escape
/// sequences, carriage returns, newlines in a cell) are shown escaped
/// (`\u{1b}`) instead of acting on the terminal. A job's output, its error
/// and the server's messages can hold anything a handler printed.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Like [`printable`], for text of many lines: newlines and tabs act,
/// every other control character is shown escaped.
pub fn printable_text(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split('\t')
                .map(printable)
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => printable(s),
        other => printable(&other.to_string()),
    }
}

/// A job's schedule in a few words; a fan-in names the jobs it waits for
/// and those of them that do not exist (`upstream_missing`).
pub(crate) fn schedule(job: &Value) -> String {
    let v = &job["schedule"];
    if let Some(after) = v.get("after") {
        let ids = |list: &Value| {
            list.as_array()
                .map(|ids| ids.iter().map(text).collect::<Vec<_>>().join(","))
                .unwrap_or_else(|| text(list))
        };
        let mut s = format!("after {}", ids(after));
        if let Some(within) = v.get("within") {
            s.push_str(&format!(" within {}", text(within)));
        }
        if let Some(missing) = job.get("upstream_missing") {
            s.push_str(&format!(" (missing: {})", ids(missing)));
        }
        s
    } else if let Some(cron) = v.get("cron") {
        format!("cron {} {}", text(cron), text(&v["tz"]))
    } else if let Some(every) = v.get("every") {
        format!("every {}", text(every))
    } else if let Some(at) = v.get("at") {
        format!("at {}", text(at))
    } else {
        text(v)
    }
}

pub(crate) fn print_rows(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

pub(crate) fn print_next(next: Option<&Value>) {
    if let Some(Value::String(cursor)) = next {
        println!("(more: --after {cursor})");
    }
}

/// What comes next for a job: its next instant, or for a paused job when
/// its pause ends (a paused job fires nothing until it resumes).
pub(crate) fn next_fire(job: &Value) -> String {
    match (job["state"].as_str(), job.get("paused_until")) {
        (Some("paused"), Some(Value::String(until))) => format!("resumes {}", printable(until)),
        (Some("paused"), _) => "- (paused)".to_string(),
        _ => text(&job["next_fire_at"]),
    }
}

/// Jobs, one per line.
pub fn print_jobs(jobs: &[Value], next: Option<&Value>) {
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                text(&j["id"]),
                text(&j["group"]),
                text(&j["state"]),
                schedule(j),
                text(&j["handler"]),
                next_fire(j),
                text(&j["version"]),
            ]
        })
        .collect();
    print_rows(
        &[
            "ID",
            "GROUP",
            "STATE",
            "SCHEDULE",
            "HANDLER",
            "NEXT FIRE",
            "VERSION",
        ],
        rows,
    );
    print_next(next);
}

/// How a firing came to run: from the schedule (or a trigger) or a
/// backfill, and which retry it is (attempt 2 is retry 1).
pub(crate) fn run_kind(firing: &Value) -> String {
    let backfill = firing["backfill"].as_bool().unwrap_or(false);
    let retry = firing["attempt"].as_u64().unwrap_or(1).saturating_sub(1);
    match (backfill, retry) {
        (false, 0) => "-".to_string(),
        (true, 0) => "backfill".to_string(),
        (false, n) => format!("retry {n}"),
        (true, n) => format!("backfill retry {n}"),
    }
}

/// Firings, one attempt per line: its id (what `logs` and `cancel` take),
/// whether it is a backfill or a retry, and the start of its error or the
/// end of its output.
pub fn print_firings(firings: &[Value], next: Option<&Value>) {
    let rows = firings
        .iter()
        .map(|f| {
            let mut detail = text(&f["error"]);
            if detail == "-" && f.get("held_by").is_some() {
                // Why a published firing does not start: a limit holds it.
                detail = format!(
                    "held by {} since {}",
                    text(&f["held_by"]),
                    text(&f["held_since"])
                );
            } else if detail == "-" {
                detail = f["output"]
                    .as_str()
                    .map(|o| printable(o.trim().lines().last().unwrap_or("")))
                    .unwrap_or_default();
            }
            let detail: String = detail.chars().take(60).collect();
            vec![
                text(&f["id"]),
                text(&f["scheduled_at"]),
                text(&f["shard"]),
                run_kind(f),
                text(&f["state"]),
                text(&f["worker"]),
                text(&f["started_at"]),
                text(&f["finished_at"]),
                detail,
            ]
        })
        .collect();
    print_rows(
        &[
            "FIRING ID",
            "SCHEDULED",
            "SHARD",
            "RUN",
            "STATE",
            "WORKER",
            "STARTED",
            "FINISHED",
            "ERROR / OUTPUT",
        ],
        rows,
    );
    print_next(next);
}

/// Workers, one per line.
pub fn print_workers(workers: &[Value]) {
    let rows = workers
        .iter()
        .map(|w| {
            vec![
                text(&w["id"]),
                text(&w["group"]),
                text(&w["threads"]),
                text(&w["in_flight"]),
                text(&w["version"]),
                text(&w["started_at"]),
            ]
        })
        .collect();
    print_rows(
        &["ID", "GROUP", "THREADS", "IN FLIGHT", "VERSION", "STARTED"],
        rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fan_in_schedule_names_its_upstreams_and_the_missing_ones() {
        assert_eq!(
            schedule(&json!({"schedule": {"after": ["a", "b"], "within": "1h"}})),
            "after a,b within 1h"
        );
        assert_eq!(
            schedule(&json!({"schedule": {"after": ["a", "b"]}, "upstream_missing": ["b"]})),
            "after a,b (missing: b)"
        );
        assert_eq!(schedule(&json!({"schedule": {"every": "1m"}})), "every 1m");
    }

    #[test]
    fn backfills_and_retries_are_marked_and_a_pause_replaces_the_next_instant() {
        assert_eq!(run_kind(&json!({"attempt": 1})), "-");
        assert_eq!(
            run_kind(&json!({"attempt": 1, "backfill": true})),
            "backfill"
        );
        assert_eq!(run_kind(&json!({"attempt": 3})), "retry 2");
        assert_eq!(
            run_kind(&json!({"attempt": 2, "backfill": true})),
            "backfill retry 1"
        );
        let next = "2026-01-01T00:00:00.000Z";
        assert_eq!(
            next_fire(&json!({"state": "active", "next_fire_at": next})),
            next
        );
        assert_eq!(
            next_fire(
                &json!({"state": "paused", "next_fire_at": next, "paused_until": "2026-02-01T00:00:00.000Z"})
            ),
            "resumes 2026-02-01T00:00:00.000Z"
        );
        assert_eq!(
            next_fire(&json!({"state": "paused", "next_fire_at": next})),
            "- (paused)"
        );
        assert_eq!(printable_text("a\tb\nc\u{1b}[2J"), "a\tb\nc\\u{1b}[2J");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(
            printable("ok\u{1b}[2J\r\n\u{7}\u{9b}done"),
            "ok\\u{1b}[2J\\r\\n\\u{7}\\u{9b}done"
        );
        assert_eq!(printable("héllo wörld ✓"), "héllo wörld ✓");
    }
}
