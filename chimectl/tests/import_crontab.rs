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
    let imported = crontab::import(CRONTAB, Some("reports")).expect("imports");
    assert_eq!(imported.jobs.len(), LINES.len());
    assert_eq!(
        imported.notes.len(),
        1,
        "MAILTO is noted: {:?}",
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
    let first = crontab::import(CRONTAB, None).expect("imports");
    let again = crontab::import(CRONTAB, None).expect("imports");
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
