//! A typical crontab imports into jobs whose previews are cron's own
//! expansion of its lines, computed here with croner (an independent cron
//! implementation) from the lines as written, not from the import.

use chime_common::schedule::Schedule;
use chimectl::crontab;
use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

const CRONTAB: &str = "\
# The nightly jobs of the reporting box.
MAILTO=ops@example.com
PATH=/usr/local/bin:/usr/bin:/bin
CRON_TZ=Europe/Berlin
30 2 * * * /usr/local/bin/backup --full
*/15 * * * * poll-queue --max 100
0 9-17 * * 1-5 report hourly
0 0 1 jan,jul * /usr/sbin/rotate-logs
5 4 * * sun weekly \\% summary

0 22 * * mon-fri evening
CRON_TZ=America/New_York
15 10,14 * * * twice
0 */6 1-7 * * first-week
CRON_TZ=UTC
@hourly tick
20 3 13 * 5 friday-or-the-13th
";

/// Each schedule line's zone and expression, read off the crontab by hand
/// (`@hourly` is `0 * * * *`), with the command it runs.
const LINES: [(&str, &str, &str); 10] = [
    (
        "Europe/Berlin",
        "30 2 * * *",
        "/usr/local/bin/backup --full",
    ),
    ("Europe/Berlin", "*/15 * * * *", "poll-queue --max 100"),
    ("Europe/Berlin", "0 9-17 * * 1-5", "report hourly"),
    ("Europe/Berlin", "0 0 1 jan,jul *", "/usr/sbin/rotate-logs"),
    ("Europe/Berlin", "5 4 * * sun", "weekly % summary"),
    ("Europe/Berlin", "0 22 * * mon-fri", "evening"),
    ("America/New_York", "15 10,14 * * *", "twice"),
    ("America/New_York", "0 */6 1-7 * *", "first-week"),
    ("UTC", "0 * * * *", "tick"),
    ("UTC", "20 3 13 * 5", "friday-or-the-13th"),
];

/// Instants compared per line.
const N: usize = 60;

fn croner_expansion(tz: &str, expr: &str, from: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let tz: Tz = tz.parse().expect("a zone");
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(expr)
        .unwrap_or_else(|e| panic!("croner refuses {expr:?}: {e}"));
    std::iter::successors(
        cron.find_next_occurrence(&from.with_timezone(&tz), false)
            .ok(),
        |t| cron.find_next_occurrence(t, false).ok(),
    )
    .take(N)
    .map(|t| t.with_timezone(&Utc))
    .collect()
}

#[test]
fn ten_typical_lines_import_into_jobs_that_fire_as_cron_would() {
    let options = crontab::Options {
        group: Some("reports".into()),
        ..crontab::Options::in_zone("UTC")
    };
    let imported = crontab::import(CRONTAB, &options).expect("imports");
    assert_eq!(imported.jobs.len(), LINES.len());
    assert_eq!(
        imported.notes.len(),
        1,
        "MAILTO is noted: {:?}",
        imported.notes
    );
    assert!(
        imported.notes[0].starts_with("line 2: MAILTO"),
        "{:?}",
        imported.notes
    );
    // Summer: no daylight-saving change in the first weeks compared.
    let from = Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).unwrap();
    for (job, (tz, expr, command)) in imported.jobs.iter().zip(LINES) {
        let spec = &job.spec;
        assert_eq!(spec.group, "reports");
        assert_eq!(spec.handler, "shell");
        assert_eq!(
            spec.payload["argv"],
            serde_json::json!(["/bin/sh", "-c", command]),
            "line {}",
            job.line
        );
        assert_eq!(
            spec.payload["env"]["PATH"], "/usr/local/bin:/usr/bin:/bin",
            "environment lines reach the command"
        );
        let ours: Vec<DateTime<Utc>> = Schedule::compile(&spec.schedule, from)
            .expect("compiles")
            .iter_after(from)
            .take(N)
            .collect();
        assert_eq!(
            ours,
            croner_expansion(tz, expr, from),
            "line {}: {tz} {expr}",
            job.line
        );
    }
}

#[test]
fn importing_again_gives_the_same_ids_and_yaml_that_reads_back() {
    let options = crontab::Options::in_zone("UTC");
    let first = crontab::import(CRONTAB, &options).expect("imports");
    let again = crontab::import(CRONTAB, &options).expect("imports");
    assert_eq!(first, again);
    let ids: std::collections::BTreeSet<&str> =
        first.jobs.iter().map(|j| j.spec.id.as_str()).collect();
    assert_eq!(ids.len(), LINES.len(), "ids are distinct");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crontab.yaml");
    std::fs::write(&file, crontab::to_yaml(&first).expect("yaml")).unwrap();
    let read = chimectl::manifests::read(&[file]).expect("apply reads the YAML");
    let specs: Vec<_> = read.into_iter().map(|m| m.spec).collect();
    let imported: Vec<_> = first.jobs.into_iter().map(|j| j.spec).collect();
    assert_eq!(specs, imported);
}

/// The real system crontabs of fixtures/README.md, each with the ids its
/// schedule lines import as.
const FIXTURES: [(&str, &[&str]); 5] = [
    (
        "debian-crontab",
        &[
            "cron-run-parts-cron.hourly",
            "cron-run-parts-cron.daily",
            "cron-run-parts-cron.weekly",
            "cron-run-parts-cron.monthly",
        ],
    ),
    ("cron.d/anacron", &["cron-invoke-rc.d-anacron"]),
    (
        "cron.d/e2scrub_all",
        &["cron-e2scrub_all_cron", "cron-e2scrub_all"],
    ),
    ("cron.d/php", &["cron-sessionclean"]),
    ("cron.d/sysstat", &["cron-debian-sa1", "cron-debian-sa1-2"]),
];

fn fixture(name: &str) -> (std::path::PathBuf, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (path, text)
}

/// One schedule line of a system crontab, read here by hand: its number,
/// five time fields, user, command, and the PATH line above it.
struct SystemLine {
    line: usize,
    fields: String,
    user: String,
    command: String,
    path: Option<String>,
}

fn system_lines(text: &str) -> Vec<SystemLine> {
    let mut path = None;
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some(value) = first.strip_prefix("PATH=") {
            path = Some(value.to_string());
            continue;
        }
        if first.contains('=') {
            continue;
        }
        // The command is what follows the sixth whitespace-separated word.
        let mut rest = line;
        let mut words = Vec::new();
        for _ in 0..6 {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).expect("six words");
            words.push(&rest[..end]);
            rest = &rest[end..];
        }
        lines.push(SystemLine {
            line: i + 1,
            fields: words[..5].join(" "),
            user: words[5].to_string(),
            command: rest.trim().to_string(),
            path: path.clone(),
        });
    }
    lines
}

#[test]
fn debian_system_crontabs_import_with_system_as_cron_runs_them() {
    let options = crontab::Options {
        system: true,
        ..crontab::Options::in_zone("Europe/Berlin")
    };
    // Winter and summer both: the zone is the job's, not UTC.
    let froms = [
        Utc.with_ymd_and_hms(2026, 1, 10, 0, 0, 0).unwrap(),
        Utc.with_ymd_and_hms(2026, 3, 20, 0, 0, 0).unwrap(),
    ];
    for (name, ids) in FIXTURES {
        let (_, text) = fixture(name);
        let imported = crontab::import(&text, &options).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let got: Vec<&str> = imported.jobs.iter().map(|j| j.spec.id.as_str()).collect();
        assert_eq!(got, ids, "{name}");
        let lines = system_lines(&text);
        assert_eq!(lines.len(), imported.jobs.len(), "{name}: one job per line");
        for (job, line) in imported.jobs.iter().zip(&lines) {
            let spec = &job.spec;
            assert_eq!(job.line, line.line, "{name}");
            assert_eq!(
                spec.labels.get("cron-user"),
                Some(&line.user),
                "{name}:{}",
                line.line
            );
            assert_eq!(
                spec.labels.get("imported-from").map(String::as_str),
                Some("crontab")
            );
            assert_eq!(
                spec.payload["argv"],
                serde_json::json!(["/bin/sh", "-c", line.command]),
                "{name}:{}",
                line.line
            );
            assert_eq!(
                spec.payload["env"]["PATH"].as_str(),
                line.path.as_deref(),
                "{name}:{}: PATH reaches the command",
                line.line
            );
            for from in froms {
                let ours: Vec<DateTime<Utc>> = Schedule::compile(&spec.schedule, from)
                    .expect("compiles")
                    .iter_after(from)
                    .take(N)
                    .collect();
                assert_eq!(
                    ours,
                    croner_expansion("Europe/Berlin", &line.fields, from),
                    "{name}:{}: {}",
                    line.line,
                    line.fields
                );
            }
        }
        if text.contains("PATH=") {
            assert!(
                imported.notes.iter().all(|n| !n.contains("PATH")),
                "{name}: {:?}",
                imported.notes
            );
        }
    }
}

#[test]
fn debian_system_crontabs_without_system_are_refused_line_by_line() {
    for (name, _) in FIXTURES {
        let (_, text) = fixture(name);
        let errors = crontab::import(&text, &crontab::Options::in_zone("UTC")).unwrap_err();
        let refused: Vec<usize> = errors.iter().map(|e| e.line).collect();
        let expected: Vec<usize> = system_lines(&text).iter().map(|l| l.line).collect();
        assert_eq!(refused, expected, "{name}: {errors:?}");
        for error in &errors {
            let text = error.to_string();
            assert!(
                text.starts_with(&format!(
                    "line {}: \"root\" after the time fields",
                    error.line
                )) && text.contains("--system"),
                "{name}: {text}"
            );
        }
    }
}

/// This machine's own /etc/crontab, when it has one, imports with --system.
#[test]
fn the_machines_crontab_imports_with_system() {
    let Ok(text) = std::fs::read_to_string("/etc/crontab") else {
        eprintln!("no /etc/crontab here; nothing to read");
        return;
    };
    let options = crontab::Options {
        system: true,
        ..crontab::Options::in_zone("UTC")
    };
    let imported = crontab::import(&text, &options).expect("/etc/crontab imports with --system");
    assert_eq!(imported.jobs.len(), system_lines(&text).len());
    assert!(
        crontab::import(&text, &crontab::Options::in_zone("UTC")).is_err()
            || imported.jobs.is_empty()
    );
}

fn chimectl(args: &[&str], tz: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_chimectl"))
        .args(args)
        .env("TZ", tz)
        .env_remove("CHIME_NATS_URL")
        .output()
        .expect("chimectl runs")
}

#[test]
fn the_command_refuses_naming_lines_and_imports_with_the_flags() {
    let (path, _) = fixture("debian-crontab");
    let path = path.to_str().unwrap();
    let refused = chimectl(&["import", "crontab", path], "UTC");
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for line in [18, 19, 20, 21] {
        assert!(
            stderr.contains(&format!(
                "debian-crontab: line {line}: \"root\" after the time fields is a user name"
            )),
            "{stderr}"
        );
    }
    assert!(refused.stdout.is_empty());

    let out = chimectl(
        &[
            "--json",
            "import",
            "crontab",
            path,
            "--system",
            "--tz",
            "America/New_York",
            "--paused",
        ],
        "Europe/Berlin",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("this machine's zone"),
        "--tz given: {stderr}"
    );
    assert!(stderr.contains("cron ran these lines as root"), "{stderr}");
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let jobs = jobs.as_array().expect("a list");
    assert_eq!(jobs.len(), 4);
    for job in jobs {
        assert_eq!(job["paused"], true, "{job}");
        assert_eq!(job["schedule"]["tz"], "America/New_York", "{job}");
        assert_eq!(job["labels"]["cron-user"], "root", "{job}");
    }

    // Without --tz: the machine's zone, said on stderr.
    let out = chimectl(
        &["--json", "import", "crontab", path, "--system"],
        "Asia/Tokyo",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("line 18 and 3 more: no CRON_TZ= above it: runs in Asia/Tokyo, this machine's zone (from the TZ variable)"),
        "{stderr}"
    );
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(jobs[0]["schedule"]["tz"], "Asia/Tokyo");
    assert!(jobs[0].get("paused").is_none(), "{}", jobs[0]);

    let bad = chimectl(
        &["import", "crontab", path, "--system", "--tz", "Mars/Base"],
        "UTC",
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("--tz: \"Mars/Base\" is not an IANA time zone"));
}
