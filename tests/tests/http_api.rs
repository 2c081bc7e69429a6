//! The HTTP API (`--http-addr`) against a real replica, real NATS and both
//! stores: every route answers as its NATS verb does, each role is refused
//! what it may not do (401/403), bad input is refused with the NATS API's
//! error object, sessions and CSRF hold, mutating requests are audited, and
//! the OpenAPI document lists every route and validates.

use chime_common::api::Verb;
use chime_scheduler::intake::web::host::AllowedHosts;
use chime_scheduler::intake::web::users::{hash_password, Users};
use chime_scheduler::intake::web::WebConfig;
use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{backend_tests, free_port, init_tracing, NatsServer, TestDatabase};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::net::SocketAddr;

const PASSWORD: &str = "correct horse battery staple";

/// A replica serving HTTP with one user per role (`viewer`, `operator`,
/// `admin`, all with [`PASSWORD`]).
struct Server {
    base: String,
    http: reqwest::Client,
    nats: NatsServer,
    replica: Replica,
    /// The `--http-open` token.
    open_token: String,
}

fn users() -> Users {
    let hash = hash_password(PASSWORD).expect("hash");
    Users::parse(&format!(
        "viewer:viewer:{hash}\noperator:operator:{hash}\nadmin:admin:{hash}\n"
    ))
    .expect("users")
}

async fn start(db: &TestDatabase, open: bool) -> Server {
    start_with(db, open, |_| {}).await
}

/// [`start`], with HTTP settings changed by `configure`.
async fn start_with(
    db: &TestDatabase,
    open: bool,
    configure: impl FnOnce(&mut WebConfig),
) -> Server {
    init_tracing();
    let nats = NatsServer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut web = WebConfig::new(addr);
    web.open = open;
    if !open {
        web.users = users();
    }
    configure(&mut web);
    let open_token = web.open_token.expose().to_string();
    let mut config = SchedulerConfig::new(nats.url(), db.url());
    config.web = Some(web);
    let replica = Replica::start(config).await.expect("replica starts");
    let bound = replica.http_addr.expect("serves HTTP");
    Server {
        base: format!("http://{bound}"),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        nats,
        replica,
        open_token,
    }
}

/// A reply: status, headers and the JSON body (`null` when empty).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Server {
    async fn send(
        &self,
        method: Method,
        path: &str,
        user: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Answer {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(user) = user {
            request = request.basic_auth(user, Some(PASSWORD));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_vec());
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("a body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {bytes:?}"))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn call(&self, method: Method, path: &str, user: &str, body: Option<Value>) -> Answer {
        let bytes = body.map(|b| serde_json::to_vec(&b).unwrap());
        self.send(method, path, Some(user), &[], bytes.as_deref())
            .await
    }

    /// The NATS API's reply to `verb` with `body`.
    async fn nats_call(&self, verb: &str, body: &Value) -> Value {
        let client = async_nats::connect(self.nats.url()).await.unwrap();
        let reply = client
            .request(
                format!("chime.api.v1.{verb}"),
                serde_json::to_vec(body).unwrap().into(),
            )
            .await
            .expect("a NATS reply");
        serde_json::from_slice(&reply.payload).unwrap()
    }
}

fn spec(id: &str) -> Value {
    json!({
        "id": id,
        "group": "reports",
        "schedule": {"cron": "0 30 2 * * *", "tz": "Europe/Berlin"},
        "handler": "shell",
        "payload": {"argv": ["/bin/true"]}
    })
}

fn error_code(answer: &Answer) -> &str {
    answer.body["error"]["code"].as_str().unwrap_or("")
}

backend_tests! {
    /// Each route gives the same JSON as its NATS verb.
    async fn every_route_answers_as_its_nats_verb(db: TestDatabase) {
        let server = start(&db, false).await;
        let put = server
            .call(Method::PUT, "/api/v1/jobs/nightly", "admin", Some(spec("nightly")))
            .await;
        assert_eq!(put.status, StatusCode::OK, "{}", put.body);
        assert_eq!(put.body["job"]["version"], 1);

        let pairs: Vec<(Method, &str, Option<Value>, &str, Value)> = vec![
            (Method::GET, "/api/v1/jobs/nightly", None, "jobs.get", json!({"id": "nightly"})),
            (Method::GET, "/api/v1/jobs?group=reports&limit=5", None, "jobs.list",
                json!({"group": "reports", "limit": 5})),
            (Method::POST, "/api/v1/preview",
                Some(json!({"schedule": {"every": "30s"}, "from": "2026-01-01T00:00:00Z", "count": 3})),
                "jobs.preview",
                json!({"schedule": {"every": "30s"}, "from": "2026-01-01T00:00:00Z", "count": 3})),
            (Method::GET, "/api/v1/firings?job_id=nightly", None, "firings.list",
                json!({"job_id": "nightly"})),
            (Method::GET, "/api/v1/workers", None, "workers.list", json!({})),
            (Method::GET, "/api/v1/alerts?limit=10", None, "alerts.list", json!({"limit": 10})),
            (Method::GET, "/api/v1/jobs?selector=team%3Ddata", None, "jobs.list",
                json!({"selector": "team=data"})),
            (Method::PUT, "/api/v1/calendars/holidays", Some(json!({"dates": ["2030-12-25"]})),
                "calendars.get", json!({"id": "holidays"})),
            (Method::GET, "/api/v1/calendars", None, "calendars.list", json!({})),
            (Method::PUT, "/api/v1/groups/reports", Some(json!({"max_concurrent": 5})),
                "groups.get", json!({"name": "reports"})),
            (Method::GET, "/api/v1/groups", None, "groups.list", json!({})),
            (Method::GET, "/api/v1/jobs/absent", None, "jobs.get", json!({"id": "absent"})),
            (Method::POST, "/api/v1/verbs/jobs.get", Some(json!({"id": "nightly"})), "jobs.get",
                json!({"id": "nightly"})),
        ];
        for (method, path, body, verb, nats_body) in pairs {
            let http = server.call(method, path, "admin", body).await;
            let nats = server.nats_call(verb, &nats_body).await;
            assert_eq!(http.body, nats, "{path} and {verb} differ");
        }

        // Changes: pause, resume, trigger over HTTP; each is what NATS shows after.
        let paused = server
            .call(Method::POST, "/api/v1/jobs/nightly/pause", "operator", None)
            .await;
        assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
        assert_eq!(paused.body["job"]["state"], "paused");
        let resumed = server
            .call(Method::POST, "/api/v1/jobs/nightly/resume", "operator", None)
            .await;
        assert_eq!(resumed.body["job"]["state"], "active");
        // An operator runs the job as defined; what runs is the admin's to change.
        let override_payload = json!({"argv": ["/bin/echo", "now"]});
        let refused = server
            .call(Method::POST, "/api/v1/jobs/nightly/trigger", "operator",
                Some(json!({"payload": override_payload})))
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
        let listed = server.nats_call("firings.list", &json!({"job_id": "nightly"})).await;
        assert_eq!(listed["firings"], json!([]), "the refused trigger staged nothing");
        let audit = server.call(Method::GET, "/api/v1/audit", "viewer", None).await;
        assert!(
            audit.body["entries"].as_array().unwrap().iter().any(|e| e["actor"] == "operator"
                && e["verb"] == "jobs.trigger"
                && e["outcome"] == "permission_denied"),
            "the refusal is audited: {}",
            audit.body
        );
        let triggered = server
            .call(Method::POST, "/api/v1/jobs/nightly/trigger", "operator", None)
            .await;
        assert_eq!(triggered.status, StatusCode::OK, "{}", triggered.body);
        let overridden = server
            .call(Method::POST, "/api/v1/jobs/nightly/trigger", "admin",
                Some(json!({"payload": override_payload})))
            .await;
        assert_eq!(overridden.status, StatusCode::OK, "{}", overridden.body);
        let listed = server.nats_call("firings.list", &json!({"job_id": "nightly"})).await;
        for reply in [&triggered, &overridden] {
            let firing_id = reply.body["firing_id"].as_str().expect("a firing id");
            assert!(
                listed["firings"].as_array().unwrap().iter().any(|f| f["id"] == firing_id),
                "{listed}"
            );
        }
        // One firing by its id (`#` escaped in the path), as NATS gives it.
        let firing_id = triggered.body["firing_id"].as_str().expect("a firing id");
        let path = format!("/api/v1/firings/{}", firing_id.replace('#', "%23"));
        let one = server.call(Method::GET, &path, "viewer", None).await;
        assert_eq!(one.status, StatusCode::OK, "{}", one.body);
        assert_eq!(one.body["firing"]["id"], firing_id, "{}", one.body);
        let nats = server.nats_call("firings.get", &json!({"id": firing_id})).await;
        assert_eq!(one.body, nats, "GET {path} and firings.get differ");
        // The trail names the override by its digest, not its content.
        let audit = server
            .call(Method::GET, "/api/v1/audit?target=nightly", "viewer", None)
            .await;
        let digest = chime_common::protocol::payload_sha256(
            &serde_json::to_vec(&override_payload).unwrap(),
        );
        let entries = audit.body["entries"].as_array().unwrap();
        let override_entry = entries
            .iter()
            .find(|e| e["verb"] == "jobs.trigger" && e["actor"] == "admin")
            .unwrap_or_else(|| panic!("no audited override: {}", audit.body));
        assert_eq!(
            override_entry["message"],
            format!("payload override sha256:{digest}"),
            "{}",
            audit.body
        );
        assert!(!audit.body.to_string().contains("/bin/echo"), "{}", audit.body);
        let deleted = server
            .call(Method::DELETE, "/api/v1/jobs/nightly", "admin", None)
            .await;
        assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
        let gone = server.nats_call("jobs.get", &json!({"id": "nightly"})).await;
        assert_eq!(gone["error"]["code"], "not_found");
        server.replica.shutdown().await;
    }

    /// W3C Trace Context over HTTP: a trigger takes the standard
    /// `traceparent` request header as its `traceparent` field (a field in
    /// the body wins), on its job route and on the verb route alike, and
    /// its run's message keeps that trace id; a malformed header is refused
    /// naming `traceparent` and triggers nothing.
    async fn a_trigger_takes_the_traceparent_header(db: TestDatabase) {
        let server = start(&db, false).await;
        let put = server
            .call(Method::PUT, "/api/v1/jobs/traced", "admin", Some(spec("traced")))
            .await;
        assert_eq!(put.status, StatusCode::OK, "{}", put.body);
        let trigger = |headers: Vec<(&'static str, &'static str)>, body: Option<&'static [u8]>| {
            let server = &server;
            async move {
                server
                    .send(Method::POST, "/api/v1/jobs/traced/trigger", Some("operator"), &headers, body)
                    .await
            }
        };
        for bad in ["00-zz", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"] {
            let refused = trigger(vec![("traceparent", bad)], None).await;
            assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}: {}", refused.body);
            assert_eq!(refused.body["error"]["field"], "traceparent", "{}", refused.body);
        }
        let listed = server.nats_call("firings.list", &json!({"job_id": "traced"})).await;
        assert_eq!(listed["firings"], json!([]), "the refused triggers staged nothing");

        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let in_body = "00-11111111111111111111111111111111-2222222222222222-01";
        let by_header = trigger(vec![("traceparent", header)], None).await;
        let body_wins = trigger(
            vec![("traceparent", header)],
            Some(&br#"{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}"#[..]),
        )
        .await;
        let by_verb = server
            .send(Method::POST, "/api/v1/verbs/jobs.trigger", Some("operator"),
                &[("traceparent", header)], Some(&br#"{"id": "traced"}"#[..]))
            .await;
        let mut expected = std::collections::HashMap::new();
        for (answer, trace) in [(&by_header, header), (&body_wins, in_body), (&by_verb, header)] {
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            let id = answer.body["firing_id"].as_str().expect("a firing id").to_string();
            expected.insert(id, trace[3..35].to_string());
        }
        let js = async_nats::jetstream::new(server.nats.connect().await);
        chime_tests::until_ok(std::time::Duration::from_secs(10), "the three runs' messages", || {
            let js = js.clone();
            let expected = expected.clone();
            async move {
                let published = chime_tests::read_fire_stream(&js, "CHIME_FIRE").await;
                let traces: std::collections::HashMap<String, String> = published
                    .iter()
                    .map(|p| {
                        let tp = p.traceparent.clone().unwrap_or_default();
                        (p.firing_id.clone(), tp.get(3..35).unwrap_or("").to_string())
                    })
                    .collect();
                if expected.iter().all(|(id, trace)| traces.get(id) == Some(trace)) {
                    Ok(())
                } else {
                    Err(format!("{published:?}"))
                }
            }
        })
        .await;
        server.replica.shutdown().await;
    }

    /// Mutating requests over HTTP and NATS land in the audit trail with
    /// who, what and the version before and after; refused ones too.
    async fn changes_are_audited(db: TestDatabase) {
        let server = start(&db, false).await;
        server.call(Method::PUT, "/api/v1/jobs/a", "admin", Some(spec("a"))).await;
        server.call(Method::PUT, "/api/v1/jobs/a", "admin", Some(spec("a"))).await;
        server.call(Method::POST, "/api/v1/jobs/a/pause", "operator", None).await;
        let mut bad = spec("a");
        bad["schedule"] = json!({"cron": "not cron"});
        let refused = server.call(Method::PUT, "/api/v1/jobs/a", "admin", Some(bad)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        server.nats_call("jobs.resume", &json!({"id": "a"})).await;
        server.call(Method::GET, "/api/v1/jobs/a", "viewer", None).await;

        let audit = server.call(Method::GET, "/api/v1/audit?target=a", "viewer", None).await;
        assert_eq!(audit.status, StatusCode::OK, "{}", audit.body);
        let rows: Vec<(String, String, String, Value, Value, String)> = audit.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (
                e["actor"].as_str().unwrap().to_string(),
                e["via"].as_str().unwrap().to_string(),
                e["verb"].as_str().unwrap().to_string(),
                e["before_version"].clone(),
                e["after_version"].clone(),
                e["outcome"].as_str().unwrap().to_string(),
            ))
            .collect();
        let expected = vec![
            ("nats", "nats", "jobs.resume", json!(3), json!(4), "ok"),
            ("admin", "http", "jobs.put", json!(3), json!(3), "invalid_argument"),
            ("operator", "http", "jobs.pause", json!(2), json!(3), "ok"),
            ("admin", "http", "jobs.put", json!(1), json!(2), "ok"),
            ("admin", "http", "jobs.put", Value::Null, json!(1), "ok"),
        ];
        let expected: Vec<_> = expected
            .into_iter()
            .map(|(a, v, verb, b, af, o)| (a.to_string(), v.to_string(), verb.to_string(), b, af, o.to_string()))
            .collect();
        assert_eq!(rows, expected, "{}", audit.body);
        server.replica.shutdown().await;
    }

    /// Console sessions: login sets an HttpOnly cookie, a mutating request
    /// needs the session's CSRF token and this server's origin, logout ends
    /// the session.
    async fn sessions_need_csrf_and_end_at_logout(db: TestDatabase) {
        let server = start(&db, false).await;
        let login_body = serde_json::to_vec(&json!({"user": "admin", "password": PASSWORD})).unwrap();
        let login = server
            .send(Method::POST, "/api/v1/session", None, &[], Some(&login_body))
            .await;
        assert_eq!(login.status, StatusCode::OK, "{}", login.body);
        let cookie = login.headers["set-cookie"].to_str().unwrap().to_string();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
        let pair = cookie.split(';').next().unwrap().to_string();
        let csrf = login.body["csrf"].as_str().unwrap().to_string();
        assert_eq!(login.body["role"], "admin");

        let me = server.send(Method::GET, "/api/v1/session", None, &[("cookie", &pair)], None).await;
        assert_eq!(me.body["user"], "admin");
        assert_eq!(me.body["csrf"], csrf.as_str());

        let body = serde_json::to_vec(&spec("s")).unwrap();
        let no_token = server
            .send(Method::PUT, "/api/v1/jobs/s", None, &[("cookie", &pair)], Some(&body))
            .await;
        assert_eq!(no_token.status, StatusCode::FORBIDDEN, "{}", no_token.body);
        let wrong = server
            .send(Method::PUT, "/api/v1/jobs/s", None,
                &[("cookie", &pair), ("x-chime-csrf", "guess")], Some(&body))
            .await;
        assert_eq!(wrong.status, StatusCode::FORBIDDEN);
        let host = server.base.trim_start_matches("http://").to_string();
        let foreign = server
            .send(Method::PUT, "/api/v1/jobs/s", None,
                &[("cookie", &pair), ("x-chime-csrf", &csrf), ("origin", "https://evil.example")],
                Some(&body))
            .await;
        assert_eq!(foreign.status, StatusCode::FORBIDDEN);
        let same_origin = format!("http://{host}");
        let ok = server
            .send(Method::PUT, "/api/v1/jobs/s", None,
                &[("cookie", &pair), ("x-chime-csrf", &csrf), ("origin", &same_origin)],
                Some(&body))
            .await;
        assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
        assert!(db_has_job(&server, "s").await);

        let out = server
            .send(Method::DELETE, "/api/v1/session", None, &[("cookie", &pair), ("x-chime-csrf", &csrf)], None)
            .await;
        assert_eq!(out.status, StatusCode::NO_CONTENT);
        let after = server.send(Method::GET, "/api/v1/jobs", None, &[("cookie", &pair)], None).await;
        assert_eq!(after.status, StatusCode::UNAUTHORIZED);
        server.replica.shutdown().await;
    }
}

async fn db_has_job(server: &Server, id: &str) -> bool {
    server.nats_call("jobs.get", &json!({"id": id})).await["job"]["id"] == id
}

/// Without credentials: 401 (with a Basic challenge unless the console
/// asked); with a role too low: 403; nothing changes either way.
#[tokio::test]
async fn each_role_is_refused_what_it_may_not_do() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, false).await;
    server
        .call(Method::PUT, "/api/v1/jobs/j", "admin", Some(spec("j")))
        .await;

    let anonymous = server
        .send(Method::GET, "/api/v1/jobs", None, &[], None)
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&anonymous), "unauthenticated");
    assert!(anonymous.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic"));
    let console = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            None,
            &[("x-chime-console", "1")],
            None,
        )
        .await;
    assert_eq!(console.status, StatusCode::UNAUTHORIZED);
    assert!(!console.headers.contains_key("www-authenticate"));
    let mut wrong = HeaderValue::from_static("Basic YWRtaW46bm9wZQ==");
    wrong.set_sensitive(true);
    let bad_password = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            None,
            &[("authorization", wrong.to_str().unwrap())],
            None,
        )
        .await;
    assert_eq!(bad_password.status, StatusCode::UNAUTHORIZED);
    let unknown = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            None,
            &[("authorization", "Basic bm9ib2R5Onh4")],
            None,
        )
        .await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    let not_basic = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            None,
            &[("authorization", "Bearer x")],
            None,
        )
        .await;
    assert_eq!(not_basic.status, StatusCode::UNAUTHORIZED);

    let day_ago = chrono::Utc::now() - chrono::Duration::days(1);
    let range = json!({
        "from": chime_tests::rfc3339((day_ago - chrono::Duration::days(1)).timestamp_millis()),
        "to": chime_tests::rfc3339(day_ago.timestamp_millis()),
    });
    // (route, method, body, the lowest role allowed)
    let routes: Vec<(Method, &str, Option<Value>, &str)> = vec![
        (
            Method::POST,
            "/api/v1/jobs/j/backfill",
            Some(range),
            "operator",
        ),
        (
            Method::POST,
            "/api/v1/verbs/jobs.pause",
            Some(json!({"group": "reports"})),
            "operator",
        ),
        (Method::GET, "/api/v1/jobs", None, "viewer"),
        (Method::GET, "/api/v1/jobs/j", None, "viewer"),
        (Method::GET, "/api/v1/firings", None, "viewer"),
        (Method::GET, "/api/v1/workers", None, "viewer"),
        (Method::GET, "/api/v1/alerts", None, "viewer"),
        (Method::GET, "/api/v1/audit", None, "viewer"),
        (Method::GET, "/api/v1/overview", None, "viewer"),
        (
            Method::POST,
            "/api/v1/preview",
            Some(json!({"schedule": {"every": "1m"}})),
            "viewer",
        ),
        (Method::POST, "/api/v1/jobs/j/pause", None, "operator"),
        (Method::POST, "/api/v1/jobs/j/resume", None, "operator"),
        (Method::POST, "/api/v1/jobs/j/trigger", None, "operator"),
        (
            Method::POST,
            "/api/v1/verbs/jobs.pause",
            Some(json!({"id": "j"})),
            "operator",
        ),
        (Method::PUT, "/api/v1/jobs/j", Some(spec("j")), "admin"),
        (
            Method::POST,
            "/api/v1/verbs/jobs.put",
            Some(spec("j")),
            "admin",
        ),
        (Method::GET, "/api/v1/calendars", None, "viewer"),
        (
            Method::PUT,
            "/api/v1/calendars/c",
            Some(json!({"dates": ["2030-01-01"]})),
            "admin",
        ),
        (Method::GET, "/api/v1/calendars/c", None, "viewer"),
        (Method::DELETE, "/api/v1/calendars/c", None, "admin"),
        (Method::GET, "/api/v1/groups", None, "viewer"),
        (Method::GET, "/api/v1/groups/g", None, "viewer"),
        (
            Method::PUT,
            "/api/v1/groups/g",
            Some(json!({"max_per_second": 100})),
            "admin",
        ),
        (Method::DELETE, "/api/v1/jobs/j", None, "admin"),
    ];
    let order = ["viewer", "operator", "admin"];
    for (method, path, body, lowest) in routes {
        let needed = order.iter().position(|r| *r == lowest).unwrap();
        for (rank, role) in order.iter().enumerate() {
            let before = server.nats_call("jobs.get", &json!({"id": "j"})).await;
            let answer = server.call(method.clone(), path, role, body.clone()).await;
            if rank < needed {
                assert_eq!(
                    answer.status,
                    StatusCode::FORBIDDEN,
                    "{role} {method} {path}"
                );
                assert_eq!(error_code(&answer), "permission_denied");
                let after = server.nats_call("jobs.get", &json!({"id": "j"})).await;
                assert_eq!(before, after, "{role} {method} {path} changed the job");
            } else {
                assert!(
                    answer.status.is_success(),
                    "{role} {method} {path}: {}",
                    answer.body
                );
            }
        }
    }
    server.replica.shutdown().await;
}

/// Bad input gets the NATS API's error object and status 400 (or 404 for
/// an unknown verb), changes nothing and never breaks the server.
#[tokio::test]
async fn bad_input_is_refused_with_the_api_error() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, false).await;
    let cases: Vec<(Method, &str, &[u8], StatusCode, &str)> = vec![
        (
            Method::PUT,
            "/api/v1/jobs/x",
            b"{not json",
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            Method::PUT,
            "/api/v1/jobs/x",
            b"[1, 2]",
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            Method::PUT,
            "/api/v1/jobs/x",
            br#"{"id": "y", "schedule": {"every": "1m"}, "handler": "h"}"#,
            StatusCode::BAD_REQUEST,
            "id",
        ),
        (
            Method::PUT,
            "/api/v1/jobs/x",
            br#"{"schedule": {"cron": "61 * * * *"}, "handler": "h"}"#,
            StatusCode::BAD_REQUEST,
            "schedule.cron",
        ),
        (
            Method::PUT,
            "/api/v1/jobs/bad%20id",
            br#"{"schedule": {"every": "1m"}, "handler": "h"}"#,
            StatusCode::BAD_REQUEST,
            "id",
        ),
        (
            Method::GET,
            "/api/v1/jobs?limit=ten",
            b"",
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            Method::GET,
            "/api/v1/jobs?limit=0",
            b"",
            StatusCode::BAD_REQUEST,
            "limit",
        ),
        (
            Method::GET,
            "/api/v1/jobs?colour=red",
            b"",
            StatusCode::BAD_REQUEST,
            "colour",
        ),
        (
            Method::GET,
            "/api/v1/jobs?state=asleep",
            b"",
            StatusCode::BAD_REQUEST,
            "state",
        ),
        (
            Method::GET,
            "/api/v1/firings?after=nonsense",
            b"",
            StatusCode::BAD_REQUEST,
            "after",
        ),
        (
            Method::POST,
            "/api/v1/preview",
            br#"{"schedule": {"every": "0s"}}"#,
            StatusCode::BAD_REQUEST,
            "schedule.every",
        ),
        (
            Method::POST,
            "/api/v1/jobs/x/trigger",
            b"{",
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            Method::POST,
            "/api/v1/verbs/jobs.frobnicate",
            b"{}",
            StatusCode::NOT_FOUND,
            "",
        ),
        (
            Method::POST,
            "/api/v1/jobs/x/explode",
            b"{}",
            StatusCode::NOT_FOUND,
            "",
        ),
        (
            Method::GET,
            "/api/v1/jobs/nothing-here",
            b"",
            StatusCode::NOT_FOUND,
            "",
        ),
    ];
    for (method, path, body, status, field) in cases {
        let answer = server
            .send(method.clone(), path, Some("admin"), &[], Some(body))
            .await;
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        let error = &answer.body["error"];
        let code = if status == StatusCode::NOT_FOUND {
            "not_found"
        } else {
            "invalid_argument"
        };
        assert_eq!(error["code"], code, "{method} {path}: {}", answer.body);
        assert!(!error["message"].as_str().unwrap_or("").is_empty());
        if !field.is_empty() {
            assert_eq!(error["field"], field, "{method} {path}: {}", answer.body);
        }
    }
    let oversized = vec![b' '; 200 * 1024];
    let answer = server
        .send(
            Method::PUT,
            "/api/v1/jobs/x",
            Some("admin"),
            &[],
            Some(&oversized),
        )
        .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&answer), "invalid_argument", "{}", answer.body);
    let jobs = server
        .call(Method::GET, "/api/v1/jobs", "admin", None)
        .await;
    assert_eq!(jobs.body["jobs"], json!([]), "nothing was created");
    server.replica.shutdown().await;
}

/// A web page that points its own name at 127.0.0.1 (DNS rebinding) makes
/// the browser send that name as `Host` and `Origin`: the open console
/// refuses it before anything else (421) and stores nothing.
const REBOUND: &str = "rebind.example";

/// `--http-open` serves without user accounts, only on loopback, only for
/// `Host` names of loopback, and only to whoever holds the token printed in
/// the console's address: a link that sets it as a cookie, or a Bearer
/// header. Another page or local user without it is refused.
#[tokio::test]
async fn open_mode_answers_only_the_holder_of_its_token_on_loopback_names() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, true).await;
    let token = server.open_token.clone();
    let port = server.base.rsplit(':').next().unwrap().to_string();

    // No token: refused, whatever the route.
    let jobs = server
        .send(Method::GET, "/api/v1/jobs", None, &[], None)
        .await;
    assert_eq!(jobs.status, StatusCode::UNAUTHORIZED, "{}", jobs.body);
    assert!(
        jobs.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token"),
        "{}",
        jobs.body
    );
    let spec = br#"{"schedule":{"every":"1h"},"handler":"noop"}"#;
    let put = server
        .send(Method::PUT, "/api/v1/jobs/rebound", None, &[], Some(spec))
        .await;
    assert_eq!(put.status, StatusCode::UNAUTHORIZED);

    // A rebound host name with a matching Origin, token and all: 421.
    let rebound_host = format!("{REBOUND}:{port}");
    let rebound_origin = format!("http://{REBOUND}:{port}");
    let bearer = format!("Bearer {token}");
    let rebound = server
        .send(
            Method::PUT,
            "/api/v1/jobs/rebound",
            None,
            &[
                ("host", &rebound_host),
                ("origin", &rebound_origin),
                ("authorization", &bearer),
            ],
            Some(spec),
        )
        .await;
    assert_eq!(rebound.status, StatusCode::MISDIRECTED_REQUEST);
    assert_eq!(rebound.body["error"]["field"], "Host", "{}", rebound.body);
    let page = server
        .http
        .get(format!("{}/", server.base))
        .header("host", &rebound_host)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::MISDIRECTED_REQUEST);

    // The token as a Bearer header opens the API under a loopback name.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let put = server
            .send(
                Method::PUT,
                "/api/v1/jobs/mine",
                None,
                &[("host", &host), ("authorization", &bearer)],
                Some(spec),
            )
            .await;
        assert_eq!(put.status, StatusCode::OK, "{host}: {}", put.body);
    }
    let jobs = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            None,
            &[("authorization", &bearer)],
            None,
        )
        .await;
    let ids: Vec<&str> = jobs.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["mine"], "the rebound put stored nothing");

    // The printed link trades its token for a cookie and drops it from the
    // address; the cookie then opens the console's API.
    let link = server
        .http
        .get(format!("{}/?token={token}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(link.status(), StatusCode::SEE_OTHER);
    assert_eq!(link.headers()["location"], "/");
    let cookie = link.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let me = server
        .send(
            Method::GET,
            "/api/v1/session",
            None,
            &[("cookie", &pair)],
            None,
        )
        .await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.body);
    assert_eq!(me.body["open"], true);
    let wrong = server
        .http
        .get(format!("{}/?token=not-the-token", server.base))
        .send()
        .await
        .unwrap();
    assert_ne!(
        wrong.status(),
        StatusCode::SEE_OTHER,
        "a wrong token sets nothing"
    );
    let guessed = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            None,
            &[("cookie", "chime_open=not-the-token")],
            None,
        )
        .await;
    assert_eq!(guessed.status, StatusCode::UNAUTHORIZED);
    server.replica.shutdown().await;

    let mut public = WebConfig::new("0.0.0.0:8080".parse().unwrap());
    public.open = true;
    assert!(public.validate().unwrap_err().contains("loopback"));
    let nobody = WebConfig::new("127.0.0.1:8080".parse().unwrap());
    assert!(nobody.validate().unwrap_err().contains("--http-users"));
}

/// With user accounts, `--http-allowed-hosts` names the hosts answered:
/// another name is refused (421) before the credentials are even looked at.
#[tokio::test]
async fn allowed_hosts_are_checked_before_anything_else() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start_with(&db, false, |web| {
        web.allowed_hosts = Some(AllowedHosts::parse("chime.example.com,127.0.0.1").unwrap());
    })
    .await;
    let answered = server
        .send(
            Method::GET,
            "/api/v1/jobs",
            Some("viewer"),
            &[("host", "chime.example.com")],
            None,
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.body);
    for host in [
        "evil.example.com",
        "localhost",
        "chime.example.com.evil.example",
    ] {
        let refused = server
            .send(
                Method::GET,
                "/api/v1/jobs",
                Some("viewer"),
                &[("host", host)],
                None,
            )
            .await;
        assert_eq!(refused.status, StatusCode::MISDIRECTED_REQUEST, "{host}");
        let unauthenticated = server
            .send(Method::GET, "/api/v1/jobs", None, &[("host", host)], None)
            .await;
        assert_eq!(
            unauthenticated.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{host}: the host is checked before the credentials"
        );
    }
    server.replica.shutdown().await;
}

/// A client that never finishes its headers (slowloris) is cut off at the
/// header deadline, and connections beyond the cap wait for a free one
/// instead of each holding the server's memory.
#[tokio::test]
async fn slow_and_surplus_connections_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start_with(&db, false, |web| {
        web.server.max_connections = 1;
        web.server.header_read_timeout = std::time::Duration::from_secs(2);
    })
    .await;
    let addr = server.base.trim_start_matches("http://").to_string();
    // The first connection takes the only slot and trickles half a request.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // The second is queued behind it with a whole request.
    let mut queued = tokio::net::TcpStream::connect(&addr).await.unwrap();
    queued
        .write_all(b"GET /api/v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // While the slow one holds the slot, the queued request is not taken up.
    let mut early = [0u8; 1];
    let waiting = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        queued.read(&mut early),
    )
    .await;
    assert!(
        waiting.is_err(),
        "the queued request was answered beside the slow one"
    );
    let cut_off = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest).await;
    })
    .await;
    assert!(cut_off.is_ok(), "the slow connection was never cut off");
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        queued.read_to_end(&mut answer),
    )
    .await
    .expect("the queued request is answered once the slot frees")
    .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    server.replica.shutdown().await;
}

/// Wrong passwords are logged and audited, and a source that keeps
/// failing is refused (429 with Retry-After) without a password check, so a
/// flood cannot hold the argon2 slots or guess for ever.
#[tokio::test]
async fn wrong_passwords_are_audited_and_throttled() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start_with(&db, false, |web| {
        web.throttle.per_source = 3;
    })
    .await;
    let guess = |password: &'static str| {
        server
            .http
            .get(format!("{}/api/v1/jobs", server.base))
            .basic_auth("admin", Some(password))
            .send()
    };
    for _ in 0..3 {
        let wrong = guess("hunter2").await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    let throttled = guess("hunter2").await.unwrap();
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(throttled.headers().contains_key("retry-after"));
    let right = guess(PASSWORD).await.unwrap();
    assert_eq!(
        right.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the source is refused before its password is checked"
    );
    // A client cannot pretend to come from elsewhere.
    let spoofed = server
        .http
        .get(format!("{}/api/v1/jobs", server.base))
        .basic_auth("admin", Some("hunter2"))
        .header("x-chime-peer", "198.51.100.7")
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);

    let audit = server.nats_call("audit.list", &json!({"limit": 100})).await;
    let failures: Vec<&Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["verb"] == "session.login")
        .collect();
    assert_eq!(failures.len(), 3, "{audit}");
    assert!(failures.iter().all(|e| e["actor"] == "admin"
        && e["outcome"] == "unauthenticated"
        && e["message"].as_str().unwrap().contains("127.0.0.1")));
    server.replica.shutdown().await;
}

/// Over HTTP as over NATS: a bad payload of a built-in handler is refused
/// naming its field (400), at put and at a trigger that brings its own,
/// and nothing is stored or staged; a valid put carries its warnings.
#[tokio::test]
async fn built_in_payloads_are_checked_and_warnings_returned_over_http() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, false).await;
    for (id, spec, field) in [
        (
            "cmd",
            json!({"schedule": {"every": "1h"}, "handler": "shell", "payload": {"cmd": "report"}}),
            "payload.cmd",
        ),
        (
            "bare",
            json!({"schedule": {"every": "1h"}, "handler": "shell"}),
            "payload.argv",
        ),
        (
            "hook",
            json!({"schedule": {"every": "1h"}, "handler": "http", "payload": {"headers": {"X-A": "b"}}}),
            "payload.url",
        ),
    ] {
        let put = server
            .call(
                Method::PUT,
                &format!("/api/v1/jobs/{id}"),
                "admin",
                Some(spec),
            )
            .await;
        assert_eq!(put.status, StatusCode::BAD_REQUEST, "{id}: {}", put.body);
        assert_eq!(
            put.body["error"]["code"], "invalid_argument",
            "{}",
            put.body
        );
        assert_eq!(put.body["error"]["field"], field, "{id}: {}", put.body);
    }
    let jobs = server
        .call(Method::GET, "/api/v1/jobs", "admin", None)
        .await;
    assert_eq!(jobs.body["jobs"], json!([]), "nothing was stored");

    let put = server
        .call(
            Method::PUT,
            "/api/v1/jobs/weekly",
            "admin",
            Some(
                json!({"schedule": {"cron": "0 0 6 ? * 2-6"}, "handler": "shell",
                "payload": {"argv": ["/bin/true"]}}),
            ),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let cron = put.body["warnings"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["field"] == "schedule.cron"))
        .unwrap_or_else(|| panic!("no schedule.cron warning: {}", put.body));
    assert!(
        cron["message"].as_str().unwrap().contains("MON-FRI"),
        "{cron}"
    );
    let trigger = server
        .call(
            Method::POST,
            "/api/v1/jobs/weekly/trigger",
            "admin",
            Some(json!({"payload": {"argv": []}})),
        )
        .await;
    assert_eq!(trigger.status, StatusCode::BAD_REQUEST, "{}", trigger.body);
    assert_eq!(
        trigger.body["error"]["field"], "payload.argv",
        "{}",
        trigger.body
    );
    let firings = server
        .call(Method::GET, "/api/v1/firings?job_id=weekly", "admin", None)
        .await;
    assert_eq!(firings.body["firings"], json!([]), "nothing was staged");
    server.replica.shutdown().await;
}

/// A viewer reads jobs with each payload replaced by its digest: an http
/// job's headers and a shell job's environment hold credentials. Operators
/// and admins read the whole payload.
#[tokio::test]
async fn viewers_read_payload_digests_not_payloads() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, false).await;
    let payload = json!({"url": "https://api.example.com/hook",
        "headers": {"Authorization": "Bearer s3cret-token"}});
    let spec = json!({"schedule": {"every": "1h"}, "handler": "http", "payload": payload});
    let put = server
        .call(Method::PUT, "/api/v1/jobs/hook", "admin", Some(spec))
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let digest = chime_common::protocol::payload_sha256(&serde_json::to_vec(&payload).unwrap());
    for path in ["/api/v1/jobs/hook", "/api/v1/jobs"] {
        let seen = server.call(Method::GET, path, "viewer", None).await;
        assert_eq!(seen.status, StatusCode::OK);
        let text = seen.body.to_string();
        assert!(!text.contains("s3cret-token"), "{path}: {text}");
        assert!(text.contains(&format!("sha256:{digest}")), "{path}: {text}");
    }
    let operator = server
        .call(Method::GET, "/api/v1/jobs/hook", "operator", None)
        .await;
    assert_eq!(operator.body["job"]["payload"], payload);
    server.replica.shutdown().await;
}

/// The live overview arrives as server-sent events.
#[tokio::test]
async fn the_overview_streams_as_server_sent_events() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, false).await;
    let mut response = server
        .http
        .get(format!("{}/api/v1/events", server.base))
        .basic_auth("viewer", Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), response.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.starts_with("event: overview\n"), "{text}");
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line");
    let overview: Value = serde_json::from_str(data).unwrap();
    assert_eq!(overview["workers_up"], 0);
    assert!(overview["started_per_second"].is_number());
    server.replica.shutdown().await;
}

/// The OpenAPI document is generated, lists every route the server has
/// and every verb (through its own route or `/api/v1/verbs/{verb}`), and
/// passes an independent validator (openapi-spec-validator, installed by
/// README's test command).
#[tokio::test]
async fn the_openapi_document_lists_every_route_and_validates() {
    let db = TestDatabase::create(chime_tests::DatabaseKind::Sqlite).await;
    let server = start(&db, false).await;
    let answer = server
        .send(Method::GET, "/api/openapi.json", None, &[], None)
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    let doc = answer.body;
    let paths = doc["paths"].as_object().expect("paths");
    for (path, methods) in [
        ("/api/v1/jobs", &["get"][..]),
        ("/api/v1/jobs/{id}", &["get", "put", "delete"][..]),
        ("/api/v1/jobs/{id}/{action}", &["post"][..]),
        ("/api/v1/preview", &["post"][..]),
        ("/api/v1/firings", &["get"][..]),
        ("/api/v1/firings/{id}", &["get"][..]),
        ("/api/v1/firings/{id}/cancel", &["post"][..]),
        ("/api/v1/workers", &["get"][..]),
        ("/api/v1/alerts", &["get"][..]),
        ("/api/v1/audit", &["get"][..]),
        ("/api/v1/calendars", &["get"][..]),
        ("/api/v1/calendars/{id}", &["get", "put", "delete"][..]),
        ("/api/v1/groups", &["get"][..]),
        ("/api/v1/groups/{name}", &["get", "put"][..]),
        ("/api/v1/verbs/{verb}", &["post"][..]),
        ("/api/v1/session", &["get", "post", "delete"][..]),
        ("/api/v1/overview", &["get"][..]),
        ("/api/v1/events", &["get"][..]),
    ] {
        for method in methods {
            assert!(
                paths.get(path).and_then(|p| p.get(*method)).is_some(),
                "{method} {path} missing"
            );
        }
    }
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for schema in [
        "JobSpec",
        "Job",
        "Firing",
        "ApiError",
        "ListJobsReply",
        "AuditEntry",
    ] {
        assert!(schemas.contains_key(schema), "schema {schema} missing");
    }
    // Every verb is reachable: its own route or the generic one.
    for verb in Verb::ALL {
        let probe = server
            .call(
                Method::POST,
                &format!("/api/v1/verbs/{verb}"),
                "admin",
                Some(json!({})),
            )
            .await;
        assert!(
            probe.status != StatusCode::NOT_FOUND
                || !probe.body["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("no API verb"),
            "{verb} has no HTTP route"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let output = std::process::Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&file)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "openapi-spec-validator refused the document (missing? run ./deploy/local/test.sh, \
         which installs it): {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    server.replica.shutdown().await;
}

/// A worker of group `default` whose `ok` handler succeeds and `fail` fails.
async fn ok_and_fail_worker(server: &Server) -> chime_worker::WorkerHandle {
    use chime_worker::{FiringContext, HandlerError, Worker};
    Worker::builder()
        .nats(server.nats.connect().await)
        .group("default")
        .threads(2)
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

/// Triggers `job` over HTTP and returns its firing once it has ended `state`.
async fn run_to_end(server: &Server, job: &str, state: &str) -> Value {
    let trigger = server
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{job}/trigger"),
            "operator",
            Some(json!({})),
        )
        .await;
    let id = trigger.body["firing_id"]
        .as_str()
        .expect("a firing id")
        .to_string();
    chime_tests::until_ok(
        std::time::Duration::from_secs(20),
        "the firing to end",
        || async {
            let path = format!("/api/v1/firings/{}", id.replace('#', "%23"));
            let firing =
                server.call(Method::GET, &path, "viewer", None).await.body["firing"].clone();
            if firing["state"] == state {
                Ok(firing)
            } else {
                Err(firing.to_string())
            }
        },
    )
    .await
}

/// `last_success_at` of job `id` in each place a job is read: `jobs.get`
/// and `jobs.list`, over HTTP (as a viewer) and over NATS.
async fn last_success_everywhere(server: &Server, id: &str) -> Vec<Value> {
    let listed = |body: &Value| {
        body["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("{id} not listed: {body}"))["last_success_at"]
            .clone()
    };
    let http_get = server
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), "viewer", None)
        .await
        .body;
    let http_list = server
        .call(Method::GET, "/api/v1/jobs", "viewer", None)
        .await
        .body;
    let nats_get = server.nats_call("jobs.get", &json!({"id": id})).await;
    let nats_list = server.nats_call("jobs.list", &json!({})).await;
    vec![
        http_get["job"]["last_success_at"].clone(),
        listed(&http_list),
        nats_get["job"]["last_success_at"].clone(),
        listed(&nats_list),
    ]
}

backend_tests! {
    /// Each job read says when the job last succeeded: its newest succeeded
    /// firing's end, never a failure's, and nothing for a job that has not
    /// succeeded.
    async fn jobs_say_when_they_last_succeeded(db: TestDatabase) {
        let server = start(&db, false).await;
        for (id, handler) in [("fresh", "ok"), ("broken", "fail"), ("idle", "ok")] {
            let spec = json!({"schedule": {"every": "1h"}, "handler": handler, "payload": null});
            let put = server.call(Method::PUT, &format!("/api/v1/jobs/{id}"), "admin", Some(spec)).await;
            assert_eq!(put.status, StatusCode::OK, "{}", put.body);
            assert_eq!(put.body["job"].get("last_success_at"), None, "{}", put.body);
        }
        let _worker = ok_and_fail_worker(&server).await;

        let first = run_to_end(&server, "fresh", "succeeded").await;
        run_to_end(&server, "broken", "failed").await;
        assert_eq!(last_success_everywhere(&server, "fresh").await, vec![first["finished_at"].clone(); 4]);
        assert_eq!(last_success_everywhere(&server, "broken").await, vec![Value::Null; 4]);
        assert_eq!(last_success_everywhere(&server, "idle").await, vec![Value::Null; 4]);

        // A later success moves it on.
        let second = run_to_end(&server, "fresh", "succeeded").await;
        assert_ne!(second["finished_at"], first["finished_at"]);
        assert_eq!(last_success_everywhere(&server, "fresh").await, vec![second["finished_at"].clone(); 4]);
        server.replica.shutdown().await;
    }
}
