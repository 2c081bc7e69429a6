//! What a dashboard and a "has not succeeded in 25 h" alert read: the
//! per-job freshness gauges are the same on every replica (one that just
//! started included), follow each finish and delete within the refresh
//! interval, and stop at `--job-metrics-limit`; a known group's counters
//! start at zero. Real NATS, real PostgreSQL and SQLite, real replicas and
//! a real worker.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::{Firing, FiringState};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::*;
use chime_worker::{FiringContext, HandlerError, Worker, WorkerHandle};
use serde_json::json;
use std::time::Duration;

/// How often the replicas of these tests read every job's ends.
const REFRESH: Duration = Duration::from_secs(2);

fn config(nats: &NatsServer, database_url: &str) -> SchedulerConfig {
    let mut config = SchedulerConfig::new(nats.url(), database_url);
    config.job_metrics.interval = REFRESH;
    config
}

/// The value of `name{labels}` on a metrics page, whatever the order of
/// its labels; None if there is no such series.
fn value_of(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The ends `replica` exports for `job` of group `default`.
fn ends(replica: &Replica, job: &str) -> (Option<f64>, Option<f64>) {
    let text = replica.metrics.render();
    let labels = [("job", job), ("group", "default")];
    (
        value_of(&text, "chime_job_last_success_timestamp_seconds", &labels),
        value_of(&text, "chime_job_last_failure_timestamp_seconds", &labels),
    )
}

/// A worker of group `default` whose `ok` handler succeeds and `fail` fails.
async fn worker(nats: &NatsServer) -> WorkerHandle {
    Worker::builder()
        .nats(nats.connect().await)
        .group("default")
        .threads(4)
        .handler_fn("ok", |_ctx: FiringContext| async move { Ok(None) })
        .handler_fn("fail", |_ctx: FiringContext| async move {
            Err(HandlerError::new("it went wrong"))
        })
        .build()
        .expect("worker config")
        .start()
        .await
        .expect("worker starts")
}

/// Triggers `job` and returns its firing once it ended in `state`.
async fn run(client: &Client, job: &str, state: FiringState) -> Firing {
    let id = client.trigger_job(job, None).await.expect("trigger");
    until_ok(Duration::from_secs(20), "the firing to end", || async {
        let firings = client
            .list_firings(&ListFiringsRequest {
                job_id: Some(job.into()),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("{e:?}"))?
            .firings;
        match firings.into_iter().find(|f| f.id.to_string() == id) {
            Some(f) if f.state == state => Ok(f),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// A firing's end as the gauges export it: Unix seconds, with milliseconds.
fn seconds(firing: &Firing) -> f64 {
    firing.finished_at.expect("finished").timestamp_millis() as f64 / 1000.0
}

/// Waits until every replica exports `expected` for `job`.
async fn all_export(replicas: &[&Replica], job: &str, expected: (Option<f64>, Option<f64>)) {
    until_ok(
        REFRESH * 5,
        "every replica to export the job's ends",
        || async {
            let seen: Vec<_> = replicas.iter().map(|r| ends(r, job)).collect();
            if seen.iter().all(|s| *s == expected) {
                Ok(())
            } else {
                Err(format!(
                    "{job}: expected {expected:?}, replicas show {seen:?}"
                ))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_exports_each_job_s_newest_ends_and_drops_a_deleted_job() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let first = Replica::start(config(&nats, db.url()))
        .await
        .expect("first replica");
    let second = Replica::start(config(&nats, db.url()))
        .await
        .expect("second replica");
    let _worker = worker(&nats).await;
    let client = Client::new(nats.connect().await);
    for (id, handler) in [("nightly", "ok"), ("flaky", "fail")] {
        client
            .put_job(&json!({"id": id, "handler": handler,
                "schedule": {"at": "2099-01-01T00:00:00Z"}}))
            .await
            .expect("put");
    }
    assert_eq!(
        ends(&first, "nightly"),
        (None, None),
        "no end yet, no series"
    );

    let succeeded = run(&client, "nightly", FiringState::Succeeded).await;
    let failed = run(&client, "flaky", FiringState::Failed).await;
    all_export(
        &[&first, &second],
        "nightly",
        (Some(seconds(&succeeded)), None),
    )
    .await;
    all_export(&[&first, &second], "flaky", (None, Some(seconds(&failed)))).await;

    // A replica that just started knows them before its first refresh.
    let third = Replica::start(config(&nats, db.url()))
        .await
        .expect("third replica");
    assert_eq!(ends(&third, "nightly"), (Some(seconds(&succeeded)), None));
    assert_eq!(ends(&third, "flaky"), (None, Some(seconds(&failed))));

    // A newer success replaces the older one everywhere.
    let again = run(&client, "nightly", FiringState::Succeeded).await;
    assert!(seconds(&again) > seconds(&succeeded));
    all_export(
        &[&first, &second, &third],
        "nightly",
        (Some(seconds(&again)), None),
    )
    .await;

    // Past the limit: the first jobs by id keep their series, the others
    // are counted as dropped.
    let mut limited = config(&nats, db.url());
    limited.job_metrics.limit = 1;
    let capped = Replica::start(limited).await.expect("capped replica");
    assert_eq!(ends(&capped, "flaky"), (None, Some(seconds(&failed))));
    assert_eq!(ends(&capped, "nightly"), (None, None));
    let text = capped.metrics.render();
    assert_eq!(value_of(&text, "chime_job_metrics_dropped", &[]), Some(1.0));
    assert_eq!(
        value_of(&first.metrics.render(), "chime_job_metrics_dropped", &[]),
        Some(0.0)
    );

    // A deleted job's series disappear from every replica.
    client.delete_job("flaky").await.expect("delete");
    all_export(&[&first, &second, &third, &capped], "flaky", (None, None)).await;
    all_export(
        &[&first, &second, &third],
        "nightly",
        (Some(seconds(&again)), None),
    )
    .await;
    until_ok(
        REFRESH * 5,
        "the capped replica to show nightly",
        || async {
            match ends(&capped, "nightly") {
                (Some(_), None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    for replica in [first, second, third, capped] {
        replica.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_group_s_counters_start_at_zero_on_every_replica() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(config(&nats, &db.url()))
        .await
        .expect("replica");
    let client = Client::new(nats.connect().await);
    let zero_series: [(&str, &[(&str, &str)]); 6] = [
        ("chime_firings_late_total", &[("group", "reports")]),
        (
            "chime_firings_missed_total",
            &[("group", "reports"), ("cause", "misfire")],
        ),
        (
            "chime_firings_missed_total",
            &[("group", "reports"), ("cause", "calendar")],
        ),
        (
            "chime_firings_held_total",
            &[("group", "reports"), ("limit", "job")],
        ),
        ("chime_firings_published_total", &[("group", "reports")]),
        (
            "chime_firings_requeued_total",
            &[("group", "reports"), ("cause", "vanished")],
        ),
    ];
    let text = replica.metrics.render();
    assert_eq!(
        value_of(&text, "chime_firings_late_total", &[("group", "reports")]),
        None,
        "an unknown group has no series"
    );
    let mut passes = replica.signals.consumers.subscribe();
    client
        .put_job(&json!({"id": "weekly", "group": "reports", "handler": "ok",
            "schedule": {"cron": "0 0 6 * * MON"}}))
        .await
        .expect("put");
    passes
        .wait_for(
            Duration::from_secs(10),
            "a consumers pass that knows group reports",
            |pass| matches!(pass, chime_runtime::service::Pass::Done(o) if o.ensured.iter().any(|g| g == "reports")),
        )
        .await;
    let text = replica.metrics.render();
    for (name, labels) in zero_series {
        assert_eq!(
            value_of(&text, name, labels),
            Some(0.0),
            "{name}{labels:?}\n{text}"
        );
    }
    replica.shutdown().await;

    // A replica that starts knows the group from the store at once.
    let restarted = Replica::start(config(&nats, &db.url()))
        .await
        .expect("restarted replica");
    let text = restarted.metrics.render();
    for (name, labels) in zero_series {
        assert_eq!(value_of(&text, name, labels), Some(0.0), "{name}{labels:?}");
    }
    restarted.shutdown().await;
}
