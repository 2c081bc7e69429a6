//! `chimectl` as a newcomer uses it, against a real scheduler (and worker
//! where a job must run): `diff`'s exit status, times given as `now` and
//! offsets, a job shown whole, a firing's output, alerts and the audit
//! trail, backfills (and their dry runs) and retries marked in the history, and a system
//! crontab imported and run as cron would run it.

use chime_common::client::Client;
use chime_common::duration::{format_time, parse_time_str};
use chime_common::FiringId;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{
    eventually, init_tracing, start_scheduler, start_worker, Binary, NatsServer, SqliteDatabase,
};
use chrono::{DateTime, Duration as Span, Utc};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

use chime_tests::chimectl_json as chimectl;

/// `chimectl ARGS` without `--json`: exit status, stdout, stderr.
async fn chimectl_text(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = Binary::Ctl.command();
    command.args(["--nats-url", url]).args(args);
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .expect("chimectl runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn replica(nats: &NatsServer, db: &SqliteDatabase) -> Replica {
    Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts")
}

fn write_jobs(dir: &Path, priorities: &[(&str, u8)]) {
    let jobs: Vec<Value> = priorities
        .iter()
        .map(|(id, priority)| {
            json!({"id": id, "schedule": {"every": "1h"}, "handler": "shell",
                   "payload": {"argv": ["/bin/true"]}, "priority": priority,
                   "labels": {"owner": "fleet"}})
        })
        .collect();
    std::fs::write(dir.join("jobs.json"), serde_json::to_string(&jobs).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_exits_zero_one_or_two_and_prunes_by_selector() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db).await;
    let url = nats.url();
    let files = tempfile::tempdir().unwrap();
    let dir = files.path().to_str().unwrap();
    write_jobs(files.path(), &[("a", 5), ("b", 5)]);
    let (code, _, err) = chimectl(&url, &["apply", "-f", dir]).await;
    assert_eq!(code, Some(0), "{err}");

    let (code, same, err) = chimectl(&url, &["diff", "-f", dir]).await;
    assert_eq!(code, Some(0), "nothing would change: {same} {err}");
    let (code, text, _) = chimectl_text(&url, &["diff", "-f", dir]).await;
    assert_eq!(code, Some(0), "{text}");

    write_jobs(files.path(), &[("a", 7), ("b", 5)]);
    let (code, changed, err) = chimectl(&url, &["diff", "-f", dir]).await;
    assert_eq!(code, Some(1), "something would change: {changed} {err}");
    assert_eq!(changed["changed"], json!(["a"]), "{changed}");
    assert!(err.is_empty(), "a difference is not an error: {err}");

    // Deletions show only with --prune and the selector of the jobs the files own.
    write_jobs(files.path(), &[("a", 5)]);
    let (code, plain, _) = chimectl(&url, &["diff", "-f", dir]).await;
    assert_eq!((code, &plain["deleted"]), (Some(0), &json!([])), "{plain}");
    let (code, pruned, err) =
        chimectl(&url, &["diff", "-f", dir, "--prune", "-l", "owner=fleet"]).await;
    assert_eq!(code, Some(1), "{pruned} {err}");
    assert_eq!(pruned["deleted"], json!(["b"]), "{pruned}");
    assert!(
        Client::new(nats.connect().await).get_job("b").await.is_ok(),
        "diff deletes nothing"
    );

    // A missing selector is named; bad input and failures exit 2 for diff.
    for command in ["diff", "apply"] {
        let (code, _, err) = chimectl(&url, &[command, "-f", dir, "--prune"]).await;
        assert_eq!(code, Some(2), "{command}: {err}");
        assert!(
            err.contains("--prune needs -l SELECTOR"),
            "{command}: {err}"
        );
    }
    std::fs::write(files.path().join("bad.yaml"), "id: [").unwrap();
    let (code, _, err) = chimectl(&url, &["diff", "-f", dir]).await;
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = chimectl("nats://127.0.0.1:1", &["diff", "-f", dir]).await;
    assert_eq!(
        code,
        Some(2),
        "an unreachable server is an error, not a difference: {err}"
    );
    replica.shutdown().await;
}

/// The instant of a firing id.
fn instant(id: &Value) -> DateTime<Utc> {
    let id: FiringId = id.as_str().expect("an id").parse().expect("a firing id");
    DateTime::from_timestamp_millis(id.scheduled_ms).expect("an instant")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_time_flag_takes_now_and_offsets_from_now() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db).await;
    let url = nats.url();
    let client = Client::new(nats.connect().await);
    client
        .put_job(
            &json!({"id": "half-hourly", "schedule": {"cron": "*/30 * * * *"},
                          "handler": "shell", "payload": {"argv": ["/bin/true"]}}),
        )
        .await
        .expect("put");

    // Two hours of a half-hourly job: four instants, all in the last two hours.
    let before = Utc::now();
    let (code, reply, err) = chimectl(
        &url,
        &["backfill", "half-hourly", "--from", "-2h", "--to", "now"],
    )
    .await;
    let after = Utc::now();
    assert_eq!(code, Some(0), "{err}");
    let ids = reply["firing_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"));
    assert_eq!(ids.len(), 4, "{reply}");
    for id in ids {
        let at = instant(id);
        assert!(
            at >= before - Span::hours(2) && at < after,
            "{at} outside the last two hours"
        );
    }

    // history --since keeps the firings scheduled since then, the backfill marked.
    let (code, recent, err) = chimectl(&url, &["history", "half-hourly", "--since", "-1h"]).await;
    assert_eq!(code, Some(0), "{err}");
    let recent = recent["firings"].as_array().cloned().unwrap_or_default();
    assert_eq!(recent.len(), 2, "{recent:?}");
    let (_, text, _) = chimectl_text(&url, &["history", "half-hourly", "--since", "-1h"]).await;
    assert_eq!(text.matches(" backfill ").count(), 2, "{text}");
    assert!(text.starts_with("FIRING ID "), "{text}");

    // pause --for and --until +D end the pause that long from now.
    let (code, paused, err) = chimectl(&url, &["pause", "half-hourly", "--for", "2h"]).await;
    assert_eq!(code, Some(0), "{err}");
    let until = parse_time_str(paused["job"]["paused_until"].as_str().expect("until")).unwrap();
    assert!(
        (until - (Utc::now() + Span::hours(2))).num_seconds().abs() < 60,
        "{until}"
    );
    let (code, paused, err) = chimectl(&url, &["pause", "half-hourly", "--until", "+30m"]).await;
    assert_eq!(code, Some(0), "{err}");
    let until = parse_time_str(paused["job"]["paused_until"].as_str().expect("until")).unwrap();
    assert!(
        (until - (Utc::now() + Span::minutes(30)))
            .num_seconds()
            .abs()
            < 60,
        "{until}"
    );
    let (code, _, err) = chimectl(&url, &["pause", "half-hourly", "--until", "-3h"]).await;
    assert_eq!(code, Some(2), "a window that has ended: {err}");
    assert!(err.contains("[until]"), "{err}");

    // list shows when the pause ends, not an instant it will not fire at.
    let (_, listed, _) = chimectl_text(&url, &["list"]).await;
    let line = listed
        .lines()
        .find(|l| l.starts_with("half-hourly"))
        .expect("listed");
    assert!(
        line.contains(&format!("resumes {}", format_time(until))),
        "{listed}"
    );

    // preview --from an offset; a time without its sign is refused naming the flag.
    let (code, preview, err) = chimectl(
        &url,
        &["preview", "--cron", "0 0 * * *", "--from", "-1d", "-n", "1"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let first = parse_time_str(preview["times"][0].as_str().expect("a time")).unwrap();
    assert!(
        first <= Utc::now() && first > Utc::now() - Span::days(1),
        "{first}"
    );
    let (code, _, err) = chimectl(
        &url,
        &["backfill", "half-hourly", "--from", "2h", "--to", "now"],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--from") && err.contains("needs its sign"),
        "{err}"
    );
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_backfill_prints_what_it_would_stage_and_stages_nothing() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db).await;
    let url = nats.url();
    let client = Client::new(nats.connect().await);
    // Paused, so the history holds only what a backfill stages; `forbid`,
    // so five of six firings due at once would be skipped.
    client
        .put_job(
            &json!({"id": "careful", "schedule": {"cron": "*/30 * * * *"}, "paused": true,
                    "overlap": "forbid", "handler": "shell", "payload": {"argv": ["/bin/true"]}}),
        )
        .await
        .expect("put");
    // One fixed range, so the dry run and the real backfill cover the same instants.
    let now = Utc::now();
    let (from, to) = (format_time(now - Span::hours(3)), format_time(now));
    let range = ["--from", from.as_str(), "--to", to.as_str()];

    let (code, reply, err) = chimectl(
        &url,
        &[&["backfill", "careful", "--dry-run"][..], &range].concat(),
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reply["dry_run"], json!(true), "{reply}");
    assert_eq!(
        reply["firing_ids"].as_array().map(Vec::len),
        Some(6),
        "{reply}"
    );
    assert_eq!(reply["skipped_by_overlap"], json!(5), "{reply}");

    let (code, text, err) = chimectl_text(
        &url,
        &[&["backfill", "careful", "--dry-run"][..], &range].concat(),
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "six ids and the summary: {text}");
    assert!(
        lines[..6].iter().all(|l| l.starts_with("careful@")),
        "{text}"
    );
    assert_eq!(
        lines[6],
        "dry run: 6 firings would be staged, up to 5 of them skipped by the job's overlap \
         policy; nothing was staged"
    );
    assert!(err.contains("warning: overlap"), "{err}");

    let (_, history, _) = chimectl(&url, &["history", "careful"]).await;
    assert_eq!(history["firings"], json!([]), "a dry run staged: {history}");
    // The same range for real stages exactly the ids the dry run printed.
    let (code, staged, err) =
        chimectl(&url, &[&["backfill", "careful"][..], &range].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(staged["firing_ids"], reply["firing_ids"], "{staged}");
    assert_eq!(staged.get("dry_run"), None, "{staged}");
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_shown_whole_and_a_failing_firing_tells_everything() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let url = nats.url();
    let _scheduler = start_scheduler(&url, &db.url(), "r1").await;
    let _worker = start_worker(&url, "default", 2, "w1").await;
    let client = Client::new(nats.connect().await);
    client
        .put_job(&json!({
            "id": "report", "handler": "shell",
            "schedule": {"cron": "30 2 * * *", "tz": "Europe/Berlin"},
            "payload": {"argv": ["sh", "-c", "echo line one; printf 'two\\tcols\\n'; exit 3"]},
            "retry": {"max_attempts": 2, "initial": "100ms"},
            "labels": {"team": "data"},
        }))
        .await
        .expect("put");

    // get: the whole job, its next instants in its zone and in UTC.
    let (code, text, err) = chimectl_text(&url, &["get", "report", "-n", "3"]).await;
    assert_eq!(code, Some(0), "{err}");
    for expected in [
        "payload",
        "\"argv\": [",
        "max_attempts=2",
        "labels               team=data",
        "next instants (Europe/Berlin, then UTC):",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    let now = format_time(Utc::now());
    let (_, previewed, _) = chimectl(&url, &["preview", "report", "-n", "3", "--from", &now]).await;
    let times = previewed["times"].as_array().expect("times");
    assert_eq!(times.len(), 3, "{previewed}");
    for time in times {
        let time = time.as_str().unwrap();
        let local = parse_time_str(time)
            .unwrap()
            .with_timezone(&chrono_tz::Europe::Berlin);
        let line = format!("  {}  {time}", local.format("%Y-%m-%d %H:%M:%S %Z"));
        assert!(text.contains(&line), "{line:?} in\n{text}");
    }
    let (_, raw, _) = chimectl(&url, &["get", "report"]).await;
    assert_eq!(
        raw["job"]["labels"]["team"], "data",
        "--json is the raw object: {raw}"
    );

    // The firing fails twice; the history marks the retry.
    let firing_id = client.trigger_job("report", None).await.expect("trigger");
    let retry_id = firing_id.replace("#1", "#2");
    eventually(Duration::from_secs(30), "the retry fails", || async {
        client
            .get_firing(&retry_id)
            .await
            .is_ok_and(|f| f.state == chime_common::FiringState::Failed)
    })
    .await;
    let (_, history, _) = chimectl_text(&url, &["history", "report"]).await;
    let retry_line = history
        .lines()
        .find(|l| l.starts_with(&retry_id))
        .expect("the retry listed");
    assert!(retry_line.contains(" retry 1 "), "{history}");

    // logs: the whole output on stdout, the error on stderr.
    let (code, out, err) = chimectl_text(&url, &["logs", &retry_id]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "line one\ntwo\tcols\n");
    assert!(
        err.contains(&format!("{retry_id} ended failed:")) && err.contains('3'),
        "{err}"
    );
    let (code, _, err) = chimectl(&url, &["logs", "report@1#1"]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not_found"), "{err}");

    // alerts: the failure, by kind and job; nothing since a time ahead.
    let (code, alerts, err) = chimectl(
        &url,
        &["alerts", "--kind", "firing_failed", "--job", "report"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(alerts["alerts"][0]["firing_id"], retry_id, "{alerts}");
    let (_, none, _) = chimectl(&url, &["alerts", "--since", "+1h"]).await;
    assert_eq!(none["alerts"], json!([]), "{none}");
    let (_, text, _) = chimectl_text(&url, &["alerts", "--job", "report"]).await;
    assert!(
        text.contains("firing_failed") && text.contains(&retry_id),
        "{text}"
    );
    let (code, _, err) = chimectl(&url, &["alerts", "--kind", "bad"]).await;
    assert_eq!(code, Some(2), "{err}");

    // audit: the trigger, then the put, newest first.
    let (code, trail, err) = chimectl(&url, &["audit", "--target", "report", "--limit", "5"]).await;
    assert_eq!(code, Some(0), "{err}");
    let verbs: Vec<&str> = trail["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["verb"].as_str())
        .collect();
    assert_eq!(verbs, ["jobs.trigger", "jobs.put"], "{trail}");
    let (_, text, _) = chimectl_text(&url, &["audit", "--target", "report"]).await;
    assert!(text.contains("jobs.put") && text.contains("-→1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_crontab_imports_paused_and_its_jobs_run_as_cron_would() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let url = nats.url();
    let _scheduler = start_scheduler(&url, &db.url(), "r1").await;
    let _worker = start_worker(&url, "moved", 2, "w1").await;
    let client = Client::new(nats.connect().await);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crontab");
    std::fs::write(
        &file,
        "SHELL=/bin/bash\nPATH=/opt/chime-test/bin:/usr/bin:/bin\nMAILTO=ops@example.com\n\
         CRON_TZ=Europe/Berlin\n\
         */5 * * * *\tnobody\techo \"path=$PATH shell=$0 pct=\\%\"\n\
         @daily root /usr/bin/env\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();

    let (code, _, err) = chimectl(&url, &["import", "crontab", file, "--apply"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("crontab: line 5: \"nobody\" after the time fields"),
        "{err}"
    );
    assert!(err.contains("crontab: line 6: \"root\""), "{err}");

    let args = [
        "import", "crontab", file, "--system", "--paused", "--group", "moved", "--apply",
    ];
    let (code, report, err) = chimectl(&url, &args).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        report["created"],
        json!(["cron-echo", "cron-env"]),
        "{report}"
    );
    let (_, text, _) = chimectl_text(&url, &args).await;
    assert!(text.contains("unchanged  cron-echo  ("), "{text}");
    assert!(text.contains("crontab: line 5)"), "{text}");
    for (id, user) in [("cron-echo", "nobody"), ("cron-env", "root")] {
        let job = client.get_job(id).await.expect("stored");
        assert!(job.spec.paused, "{id} starts paused");
        assert_eq!(
            job.spec.labels.get("cron-user").map(String::as_str),
            Some(user)
        );
        assert_eq!(job.spec.to_json()["schedule"]["tz"], "Europe/Berlin");
    }

    // Run it once: the shell, PATH and the escaped % are cron's.
    let firing_id = client
        .trigger_job("cron-echo", None)
        .await
        .expect("trigger");
    eventually(Duration::from_secs(30), "the imported job runs", || async {
        client
            .get_firing(&firing_id)
            .await
            .is_ok_and(|f| f.state.is_final())
    })
    .await;
    let (code, out, err) = chimectl_text(&url, &["logs", &firing_id]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out, "path=/opt/chime-test/bin:/usr/bin:/bin shell=/bin/bash pct=%\n",
        "{err}"
    );
}
