//! `chimectl preview` as a user runs it: the built binary, its stdout, its
//! stderr and its exit status. No server is involved.

use std::process::{Command, Output};

fn chimectl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chimectl"))
        .args(args)
        .env_remove("CHIME_NATS_URL")
        .output()
        .expect("the chimectl binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command that must fail on its input: status 2, nothing on stdout,
/// exactly one line on stderr; returns that line.
fn refused(args: &[&str]) -> String {
    let o = chimectl(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    assert!(o.stdout.is_empty(), "{args:?} printed {}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn berlin_spring_forward_example_from_the_contract() {
    let o = chimectl(&[
        "preview",
        "--cron",
        "0 30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-03-28T00:00:00Z",
        "-n",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2026-03-28T01:30:00.000Z\n2026-03-29T01:00:00.000Z  (shifted)\n2026-03-30T00:30:00.000Z\n"
    );
}

#[test]
fn five_field_expression_in_utc_by_default() {
    // Weekdays at 09:00; 2026-01-02 is a Friday.
    let o = chimectl(&[
        "preview",
        "--cron",
        "0 9 * * MON-FRI",
        "--from",
        "2026-01-02T09:00:00Z",
        "-n",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2026-01-05T09:00:00.000Z\n2026-01-06T09:00:00.000Z\n"
    );
}

#[test]
fn every_is_anchored_at_from() {
    let o = chimectl(&[
        "preview",
        "--every",
        "30s",
        "--from",
        "2026-01-01T00:00:00Z",
        "-n",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2026-01-01T00:00:30.000Z\n2026-01-01T00:01:00.000Z\n2026-01-01T00:01:30.000Z\n"
    );
}

#[test]
fn json_output_lists_the_times() {
    let o = chimectl(&[
        "preview",
        "--json",
        "--cron",
        "@daily",
        "--from",
        "2026-01-01T00:00:00Z",
        "-n",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(
        v,
        serde_json::json!({"times": ["2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z"]})
    );
}

#[test]
fn ten_instants_from_now_by_default() {
    let o = chimectl(&["preview", "--cron", "* * * * *"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 10);
    assert!(lines.iter().all(|l| l.ends_with(":00.000Z")), "{lines:?}");
}

#[test]
fn a_bad_cron_names_the_flag_and_the_field() {
    let err = refused(&["preview", "--cron", "61 * * * *"]);
    assert!(
        err.contains("--cron")
            && err.contains("minute")
            && err.contains("61")
            && err.contains("0-59"),
        "{err}"
    );
}

#[test]
fn bad_zones_durations_times_and_counts_are_refused() {
    assert!(refused(&["preview", "--cron", "@daily", "--tz", "Europe/Berln"]).contains("--tz"));
    assert!(refused(&["preview", "--every", "soon"]).contains("--every"));
    assert!(refused(&["preview", "--every", "0s"]).contains("--every"));
    assert!(refused(&["preview", "--cron", "@daily", "--from", "yesterday"]).contains("--from"));
    assert!(refused(&["preview", "--cron", "@daily", "-n", "0"]).contains("-n"));
    assert!(refused(&["preview", "--cron", "@daily", "-n", "many"]).contains("-n"));
}

#[test]
fn exactly_one_of_cron_and_every() {
    assert!(refused(&["preview", "--cron", "@daily", "--every", "1m"]).contains("not both"));
    assert!(refused(&["preview"]).contains("--cron"));
}

/// A 6-field expression with numbered days of the week is read as Quartz
/// numbers them (1 = SUN); the preview prints its instants and says on
/// stderr what the numbers mean here. Day names draw no warning.
#[test]
fn numbered_weekdays_of_six_fields_are_warned_with_the_days_they_mean() {
    let o = chimectl(&[
        "preview",
        "--cron",
        "0 0 2 * * 1",
        "--from",
        "2026-03-02T00:00:00Z",
        "-n",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // 2026-03-08 is a Sunday.
    assert_eq!(stdout(&o), "2026-03-08T02:00:00.000Z\n");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("chimectl: warning: schedule.cron: day-of-week \"1\" is numbered")
            && err.contains("means SUN")
            && err.contains("1 = MON"),
        "{err}"
    );
    let json = chimectl(&[
        "preview",
        "--json",
        "--cron",
        "0 0 2 * * 2-6",
        "--from",
        "2026-03-02T00:00:00Z",
        "-n",
        "1",
    ]);
    assert!(json.status.success(), "{}", stderr(&json));
    let reply: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(reply["warnings"][0]["field"], "schedule.cron", "{reply}");
    assert!(
        reply["warnings"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("MON-FRI")),
        "{reply}"
    );
    for named in ["0 0 2 * * SUN", "0 2 * * 1"] {
        let o = chimectl(&["preview", "--cron", named, "-n", "1"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(o.stderr.is_empty(), "{named}: {}", stderr(&o));
    }
}
