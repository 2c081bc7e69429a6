//! The operations a team runs every week, against a real scheduler: jobs
//! kept as files and applied, diffed, pruned and exported with `chimectl`;
//! a concurrent edit between plan and apply reported as a conflict; a
//! runaway firing cancelled on its worker.

use chime_common::client::Client;
use chime_common::duration::format_time;
use chime_common::{ErrorCode, FiringId, FiringState, JobState};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{
    eventually, init_tracing, start_scheduler, start_worker, Binary, NatsServer, SqliteDatabase,
};
use chimectl::manifests;
use chimectl::plan::{Action, Plan};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

use chime_tests::chimectl_json as chimectl;

/// The ids listed under `key` of an apply or diff report.
fn ids(report: &Value, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = report[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {report}"))
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    ids
}

/// Job `i` of the fleet: ten files of five jobs each, YAML lists, nested
/// in a sub-directory every other file.
fn write_fleet(dir: &Path, priority_of: impl Fn(usize) -> u8) {
    for file in 0..10 {
        let jobs: Vec<Value> = (0..5)
            .map(|k| {
                let i = file * 5 + k;
                let team = ["data", "web"][i % 2];
                json!({
                    "id": format!("job-{i:02}"),
                    "group": "fleet",
                    "schedule": {"cron": format!("{} 3 * * *", i % 60), "tz": "Europe/Berlin"},
                    "handler": "shell",
                    "payload": {"argv": ["/bin/echo", format!("{i}")]},
                    "priority": priority_of(i),
                    "labels": {"owner": "fleet", "team": team},
                })
            })
            .collect();
        let sub = if file % 2 == 0 {
            dir.to_path_buf()
        } else {
            dir.join("more")
        };
        std::fs::create_dir_all(&sub).unwrap();
        let text = serde_yaml_ng::to_string(&jobs).unwrap();
        std::fs::write(sub.join(format!("fleet-{file}.yaml")), text).unwrap();
    }
}

async fn replica(nats: &NatsServer, db: &SqliteDatabase) -> Replica {
    Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_reports_and_stores_exactly_what_changed() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db).await;
    let client = Client::new(nats.connect().await);
    let url = nats.url();
    let files = tempfile::tempdir().unwrap();
    let dir = files.path().to_str().unwrap().to_string();

    // A job the files do not own, which prune must leave alone.
    client
        .put_job(
            &json!({"id": "hand-made", "schedule": {"every": "1h"}, "handler": "h",
                         "labels": {"owner": "someone-else"}}),
        )
        .await
        .expect("put");

    write_fleet(files.path(), |_| 5);
    let (code, first, err) = chimectl(&url, &["apply", "-f", &dir]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ids(&first, "created").len(), 50, "{first}");
    assert!(ids(&first, "changed").is_empty() && ids(&first, "deleted").is_empty());

    let (code, again, err) = chimectl(&url, &["apply", "-f", &dir]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        ids(&again, "unchanged").len(),
        50,
        "a second apply changes nothing: {again}"
    );

    // Change three jobs, remove two from the files.
    write_fleet(
        files.path(),
        |i| if [3, 17, 41].contains(&i) { 9 } else { 5 },
    );
    let last = files.path().join("more").join("fleet-9.yaml");
    let mut jobs: Vec<Value> =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&last).unwrap()).unwrap();
    jobs.retain(|j| j["id"] != "job-47" && j["id"] != "job-48");
    std::fs::write(&last, serde_yaml_ng::to_string(&jobs).unwrap()).unwrap();

    let (code, diff, err) = chimectl(&url, &["diff", "-f", &dir]).await;
    assert_eq!(
        code,
        Some(1),
        "diff exits 1 when something would change: {err}"
    );
    assert_eq!(
        ids(&diff, "changed"),
        ["job-03", "job-17", "job-41"],
        "{diff}"
    );
    assert_eq!(
        diff["fields"]["job-17"],
        json!([{"field": "priority", "from": 5, "to": 9}])
    );
    let (code, dry, _) = chimectl(
        &url,
        &[
            "apply",
            "-f",
            &dir,
            "--dry-run",
            "--prune",
            "-l",
            "owner=fleet",
        ],
    )
    .await;
    assert_eq!(code, Some(0));
    assert_eq!(ids(&dry, "deleted"), ["job-47", "job-48"], "{dry}");
    assert_eq!(
        client.get_job("job-17").await.unwrap().spec.priority,
        5,
        "a dry run changes nothing"
    );
    assert!(
        client.get_job("job-47").await.is_ok(),
        "a dry run deletes nothing"
    );

    let (code, applied, err) =
        chimectl(&url, &["apply", "-f", &dir, "--prune", "-l", "owner=fleet"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        ids(&applied, "changed"),
        ["job-03", "job-17", "job-41"],
        "{applied}"
    );
    assert_eq!(ids(&applied, "deleted"), ["job-47", "job-48"], "{applied}");
    assert_eq!(ids(&applied, "unchanged").len(), 45, "{applied}");
    assert!(ids(&applied, "created").is_empty(), "{applied}");
    for id in ["job-03", "job-17", "job-41"] {
        let job = client.get_job(id).await.unwrap();
        assert_eq!((job.spec.priority, job.version), (9, 2), "{id}");
    }
    assert_eq!(client.get_job("job-04").await.unwrap().version, 1);
    for id in ["job-47", "job-48"] {
        let gone = client.get_job(id).await.unwrap_err();
        assert_eq!(gone.code, ErrorCode::NotFound, "{id}");
    }
    assert!(
        client.get_job("hand-made").await.is_ok(),
        "prune keeps what -l does not match"
    );

    // Export, then apply the export: everything unchanged.
    let exported = tempfile::tempdir().unwrap();
    let out = exported.path().to_str().unwrap();
    let mut command = Binary::Ctl.command();
    command.args([
        "--nats-url",
        &url,
        "export",
        "-l",
        "owner=fleet",
        "--dir",
        out,
    ]);
    let output = tokio::process::Command::from(command)
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(std::fs::read_dir(out).unwrap().count(), 48);
    let text = std::fs::read_to_string(exported.path().join("job-17.yaml")).unwrap();
    for read_only in [
        "version:",
        "state:",
        "created_at:",
        "next_fire_at:",
        "paused:",
    ] {
        assert!(
            !text.contains(read_only),
            "export writes {read_only}: {text}"
        );
    }
    let (code, round, err) = chimectl(&url, &["apply", "-f", out]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ids(&round, "unchanged").len(), 48, "{round}");

    // A paused job stays paused: files that do not say `paused` leave it alone.
    client.pause_job("job-05", None).await.unwrap();
    let (code, paused, _) = chimectl(&url, &["diff", "-f", &dir]).await;
    assert!(ids(&paused, "changed").is_empty(), "{paused}");
    assert_eq!(code, Some(0), "nothing would change: {paused}");

    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_refused_naming_file_job_and_field_and_nothing_changes() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db).await;
    let client = Client::new(nats.connect().await);
    let files = tempfile::tempdir().unwrap();
    std::fs::write(
        files.path().join("good.yaml"),
        "id: good\nschedule: {every: 1m}\nhandler: h\n",
    )
    .unwrap();
    std::fs::write(
        files.path().join("bad.json"),
        r#"[{"id": "bad", "schedule": {"cron": "0 61 * * *"}, "handler": "h", "labels": {"Team": "x"}}]"#,
    )
    .unwrap();
    // A shell job written as a command line: refused by apply itself,
    // before anything is sent, with the field and what to write.
    std::fs::write(
        files.path().join("cmd.yaml"),
        "id: cmdline\nschedule: {every: 1m}\nhandler: shell\npayload: {cmd: report --daily}\nretries: 3\n",
    )
    .unwrap();
    let (code, _, err) = chimectl(
        &nats.url(),
        &["apply", "-f", files.path().to_str().unwrap()],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cmd.yaml: job \"cmdline\": payload.cmd: unknown field"),
        "{err}"
    );
    assert!(
        err.contains("cmd.yaml: job \"cmdline\": payload.argv: is required"),
        "{err}"
    );
    assert!(
        err.contains("cmd.yaml: job \"cmdline\": retries: unknown field; did you mean `retry`?"),
        "{err}"
    );
    assert!(
        err.contains("bad.json: job \"bad\": schedule.cron: "),
        "{err}"
    );
    assert!(
        err.contains("bad.json: job \"bad\": labels.Team: "),
        "{err}"
    );
    let gone = client.get_job("good").await.unwrap_err();
    assert_eq!(
        gone.code,
        ErrorCode::NotFound,
        "nothing is applied when a file is bad"
    );
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_between_plan_and_apply_is_a_conflict_not_overwritten() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = replica(&nats, &db).await;
    let client = Client::new(nats.connect().await);
    let files = tempfile::tempdir().unwrap();
    let job = |id: &str, priority: u8| json!({"id": id, "schedule": {"every": "1h"}, "handler": "h", "priority": priority});
    for id in ["edited", "other"] {
        client.put_job(&job(id, 1)).await.unwrap();
    }
    let file = files.path().join("jobs.json");
    std::fs::write(
        &file,
        serde_json::to_string(&[job("edited", 2), job("other", 2), job("new", 2)]).unwrap(),
    )
    .unwrap();
    let manifests = manifests::read(&[file]).expect("valid files");
    let plan = Plan::make(&client, &manifests, None).await.expect("a plan");
    assert!(matches!(
        plan.steps[0].action,
        Action::Change { version: 1, .. }
    ));

    // Someone else changes one job and creates another after the plan was made.
    client.put_job(&job("edited", 7)).await.unwrap();
    client.put_job(&job("new", 7)).await.unwrap();
    let report = plan.apply(&client).await;
    assert_eq!(report.changed, ["other"]);
    let mut conflicts: Vec<&str> = report.failed.iter().map(|f| f.id.as_str()).collect();
    conflicts.sort();
    assert_eq!(conflicts, ["edited", "new"], "{report:?}");
    for failed in &report.failed {
        assert_eq!(failed.error.code, ErrorCode::Conflict, "{failed:?}");
        assert_eq!(failed.error.field.as_deref(), Some("if_version"));
        assert!(failed
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("jobs.json[0]") || f.ends_with("jobs.json[2]")));
    }
    assert_eq!(
        client.get_job("edited").await.unwrap().spec.priority,
        7,
        "not overwritten"
    );
    assert_eq!(
        client.get_job("new").await.unwrap().spec.priority,
        7,
        "not overwritten"
    );
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_running_shell_firing_within_a_second() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let _scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
    let _worker = start_worker(&nats.url(), "default", 2, "w1").await;
    let client = Client::new(nats.connect().await);
    client
        .put_job(
            &json!({"id": "runaway", "schedule": {"every": "1h"}, "handler": "shell",
                         "payload": {"argv": ["sleep", "60"]}}),
        )
        .await
        .unwrap();
    let firing_id = client.trigger_job("runaway", None).await.unwrap();
    let state_is = |wanted: FiringState| {
        let client = client.clone();
        let id = firing_id.clone();
        move || {
            let client = client.clone();
            let id = id.clone();
            async move {
                let page = client
                    .list_firings(&chime_common::client::ListFiringsRequest {
                        job_id: Some("runaway".into()),
                        ..Default::default()
                    })
                    .await
                    .expect("history");
                page.firings
                    .iter()
                    .any(|f| f.id.to_string() == id && f.state == wanted)
            }
        }
    };
    eventually(
        Duration::from_secs(20),
        "the firing runs",
        state_is(FiringState::Executing),
    )
    .await;

    let (code, reply, err) = chimectl(&nats.url(), &["cancel", &firing_id]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reply["firing"]["id"], json!(firing_id));
    eventually(
        Duration::from_secs(1),
        "the firing ends cancelled within a second",
        state_is(FiringState::Cancelled),
    )
    .await;

    // An ended firing cannot be cancelled again; a staged one never starts.
    let (code, _, err) = chimectl(&nats.url(), &["cancel", &firing_id]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("conflict"), "{err}");
    let (code, _, err) = chimectl(&nats.url(), &["cancel", "runaway@nonsense"]).await;
    assert_eq!(code, Some(2), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_of_ten_days_runs_exactly_the_previewed_instants() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let _scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
    let _worker = start_worker(&nats.url(), "default", 4, "w1").await;
    let client = Client::new(nats.connect().await);
    let job = client
        .put_job(
            &json!({"id": "nightly", "overlap": "allow", "handler": "shell",
                  "schedule": {"cron": "17 */6 * * *", "tz": "Europe/Berlin"},
                  "payload": {"argv": ["/bin/true"]}}),
        )
        .await
        .expect("put");
    let to = chrono::Utc::now() - chrono::Duration::seconds(1);
    let from = to - chrono::Duration::days(10);
    let request = chime_common::api::PreviewRequest {
        schedule: serde_json::to_value(&job.spec.schedule).expect("a schedule"),
        from: Some(from),
        count: Some(1000),
        ..Default::default()
    };
    let previewed: Vec<String> = client
        .preview(&request)
        .await
        .expect("preview")
        .times
        .into_iter()
        .filter(|t| chime_common::duration::parse_time_str(t).expect("a time") < to)
        .collect();
    assert_eq!(
        previewed.len(),
        40,
        "four a day for ten days: {previewed:?}"
    );

    let (code, reply, err) = chimectl(
        &nats.url(),
        &[
            "backfill",
            "nightly",
            "--from",
            &format_time(from),
            "--to",
            &format_time(to),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let ids: Vec<FiringId> = reply["firing_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no firing_ids in {reply}"))
        .iter()
        .map(|id| {
            id.as_str()
                .unwrap_or_default()
                .parse()
                .expect("a firing id")
        })
        .collect();
    let instants: Vec<String> = ids
        .iter()
        .map(|id| format_time(chrono::DateTime::from_timestamp_millis(id.scheduled_ms).unwrap()))
        .collect();
    assert_eq!(instants, previewed);

    let history = || {
        let client = client.clone();
        async move {
            client
                .list_firings(&chime_common::client::ListFiringsRequest {
                    job_id: Some("nightly".into()),
                    limit: Some(1000),
                    ..Default::default()
                })
                .await
                .expect("history")
                .firings
        }
    };
    eventually(
        Duration::from_secs(60),
        "every backfill firing succeeds",
        || async {
            let firings = history().await;
            ids.iter().all(|id| {
                firings
                    .iter()
                    .any(|f| &f.id == id && f.state == FiringState::Succeeded && f.backfill)
            })
        },
    )
    .await;
    assert_eq!(history().await.len(), 40, "nothing but the backfill ran");

    // A range reaching into the future is refused naming `to`.
    let (code, _, err) = chimectl(
        &nats.url(),
        &[
            "backfill",
            "nightly",
            "--from",
            &format_time(from),
            "--to",
            "2999-01-01T00:00:00Z",
        ],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("[to]"), "{err}");
}

/// A backfill of a job whose overlap policy skips firings that find
/// another running says how many it will skip, and a dry run says so
/// before anything is staged; the count is what then happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_of_a_forbid_job_says_how_many_instants_overlap_will_skip() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let _scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
    let _worker = start_worker(&nats.url(), "default", 4, "w1").await;
    let client = Client::new(nats.connect().await);
    client
        .put_job(
            &json!({"id": "hourly", "overlap": "forbid", "handler": "shell",
            "schedule": {"cron": "0 * * * *"}, "payload": {"argv": ["sleep", "5"]}}),
        )
        .await
        .expect("put");
    let to = chrono::Utc::now() - chrono::Duration::seconds(1);
    let from = to - chrono::Duration::hours(6);
    let request = chime_common::api::BackfillRequest {
        id: "hourly".into(),
        from,
        to,
        limit: None,
        dry_run: true,
    };
    let dry = client.backfill_job(&request).await.expect("a dry run");
    assert!(dry.dry_run);
    assert_eq!(dry.firing_ids.len(), 6, "{dry:?}");
    assert_eq!(dry.skipped_by_overlap, 5, "{dry:?}");
    assert_eq!(dry.warnings.len(), 1, "{dry:?}");
    assert_eq!(dry.warnings[0].field, "overlap");
    assert!(
        dry.warnings[0]
            .message
            .contains("up to 5 of them will be recorded skipped"),
        "{dry:?}"
    );
    let history = || {
        let client = client.clone();
        async move {
            client
                .list_firings(&chime_common::client::ListFiringsRequest {
                    job_id: Some("hourly".into()),
                    ..Default::default()
                })
                .await
                .expect("history")
                .firings
        }
    };
    assert!(history().await.is_empty(), "a dry run stages nothing");

    let (code, reply, err) = chimectl(
        &nats.url(),
        &[
            "backfill",
            "hourly",
            "--from",
            &format_time(from),
            "--to",
            &format_time(to),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reply["skipped_by_overlap"], 5, "{reply}");
    assert_eq!(reply["firing_ids"], json!(dry.firing_ids), "{reply}");
    assert!(
        err.contains("chimectl: warning: overlap: overlap \"forbid\" with max_concurrent 1"),
        "{err}"
    );
    eventually(
        Duration::from_secs(60),
        "every backfilled firing ends",
        || async {
            let firings = history().await;
            firings.len() == 6 && firings.iter().all(|f| f.state.is_final())
        },
    )
    .await;
    let skipped = history()
        .await
        .iter()
        .filter(|f| f.state == FiringState::Skipped)
        .count();
    assert_eq!(skipped, 5, "{:?}", history().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_paused_until_a_time_resumes_by_itself() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let _scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
    let client = Client::new(nats.connect().await);
    for (id, group) in [
        ("m1", "maint"),
        ("m2", "maint"),
        ("m3", "maint"),
        ("other", "default"),
    ] {
        client
            .put_job(
                &json!({"id": id, "group": group, "schedule": {"every": "1h"},
                             "handler": "shell", "payload": {"argv": ["/bin/true"]}}),
            )
            .await
            .expect("put");
    }
    let until = chrono::Utc::now() + chrono::Duration::seconds(3);
    let (code, reply, err) = chimectl(
        &nats.url(),
        &["pause", "--group", "maint", "--until", &format_time(until)],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let paused = reply["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"));
    assert_eq!(paused.len(), 3, "{reply}");
    for job in paused {
        assert_eq!(job["state"], json!("paused"), "{job}");
        assert_eq!(job["paused_until"], json!(format_time(until)), "{job}");
    }
    let state_of = |id: &'static str| {
        let client = client.clone();
        async move { client.get_job(id).await.expect("get") }
    };
    eventually(
        Duration::from_secs(10),
        "the window ends by itself",
        || async {
            let mut all = true;
            for id in ["m1", "m2", "m3"] {
                all &= state_of(id).await.state == JobState::Active;
            }
            all
        },
    )
    .await;
    for id in ["m1", "m2", "m3"] {
        let job = state_of(id).await;
        assert_eq!((job.spec.paused, job.paused_until), (false, None), "{id}");
        assert!(
            job.updated_at >= until,
            "{id} resumed before its until: {job:?}"
        );
    }
    assert_eq!(
        state_of("other").await.version,
        1,
        "another group is untouched"
    );

    // A window that has already ended is refused, naming `until`.
    let (code, _, err) = chimectl(
        &nats.url(),
        &["pause", "m1", "--until", "2020-01-01T00:00:00Z"],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("[until]"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_imported_crontab_is_applied_once_and_then_unchanged() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let _scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
    let client = Client::new(nats.connect().await);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crontab");
    std::fs::write(
        &file,
        "CRON_TZ=Europe/Berlin\n30 2 * * * /usr/local/bin/backup\n*/15 9-17 * * mon-fri poll\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let args = ["import", "crontab", file, "--group", "moved", "--apply"];
    let (code, first, err) = chimectl(&nats.url(), &args).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ids(&first, "created").len(), 2, "{first}");
    let (code, again, err) = chimectl(&nats.url(), &args).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ids(&again, "unchanged"), ids(&first, "created"), "{again}");
    for id in ids(&first, "created") {
        let job = client.get_job(&id).await.expect("stored");
        assert_eq!(job.spec.group, "moved");
        assert_eq!(
            job.spec.labels.get("imported-from").map(String::as_str),
            Some("crontab")
        );
    }
    std::fs::write(dir.path().join("crontab"), "@reboot /bin/start\n").unwrap();
    let (code, _, err) = chimectl(&nats.url(), &args).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 1: @reboot"), "{err}");
}
