//! The web console in a real browser: headless Chromium driven through
//! ChromeDriver (Debian's `chromium` and `chromium-driver`, installed by
//! README's test command) over the real `chime-scheduler` and `chime-worker`
//! binaries, NATS and SQLite. It logs in, creates a job with a bad cron and
//! sees the error at the field, fixes it and sees the preview, triggers it
//! and watches the firing succeed without a reload, pauses it until a
//! relative time and backfills a relative range, edits an http payload
//! field by field and sees a refused URL at its field and the put's
//! warnings, sees a firing held by a limit, reads a long output whole on
//! the firing's page, sorts the jobs by last success, sees the worker,
//! checks the labels and the phone width, and logs out.
//!
//! Each page is photographed into a temporary folder, or into
//! `docs/console/` with `CHIME_UPDATE_SCREENSHOTS=1` (docs/console.md shows
//! those pictures).

use chime_tests::{
    free_port, init_tracing, start_worker, Binary, ChimeProcess, NatsServer, SqliteDatabase,
};
use chrono::{NaiveDateTime, Utc};
use fantoccini::{Client, ClientBuilder, Locator};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PASSWORD: &str = "console test password";
const WAIT: Duration = Duration::from_secs(20);

/// A ChromeDriver process in a process group of its own, killed on drop
/// with the Chromium it started (a failed test must not leave a browser
/// running).
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn program(name: &str, path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "{name} is not installed at {}: run ./deploy/local/test.sh (README's test command), \
         which installs Debian's chromium and chromium-driver",
        path.display()
    );
    path
}

async fn start_driver() -> Driver {
    let port = free_port();
    let child = Command::new(program("chromedriver", "/usr/bin/chromedriver"))
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    chime_tests::eventually(WAIT, "chromedriver listens", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    Driver { child, url }
}

async fn browser(driver: &Driver) -> Client {
    // The driver speaks plain HTTP, but fantoccini's client is built with
    // TLS support, which needs a provider chosen.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chromium = program("chromium", "/usr/bin/chromium");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900", "--lang=en-GB"]
        }),
    );
    ClientBuilder::rustls()
        .expect("TLS roots")
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a browser session")
}

/// Waits until the JavaScript expression `condition` is true in the page.
async fn until(client: &Client, condition: &str, what: &str) {
    let script = format!("return Boolean({condition});");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(Value::Bool(true)) = client.execute(&script, vec![]).await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let text = client
                .execute("return document.body.innerText;", vec![])
                .await
                .unwrap_or(Value::Null);
            panic!("timed out waiting for {what}; the page says: {text}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn text_of(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap_or_default()
}

async fn type_into(client: &Client, css: &str, text: &str) {
    let field = client.find(Locator::Css(css)).await.expect(css);
    field.clear().await.expect("clear");
    field.send_keys(text).await.expect("type");
}

async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Where the pictures go.
fn screenshot_dir() -> PathBuf {
    if std::env::var("CHIME_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
    }
}

async fn photograph(client: &Client, name: &str) {
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    let png = client.screenshot().await.expect("a screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
}

/// Every input, select and textarea on the page has a label.
async fn all_controls_labelled(client: &Client) {
    let unlabelled = client
        .execute(
            "return [...document.querySelectorAll('input, select, textarea')]
               .filter(e => !e.closest('[hidden]'))
               .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
               .map(e => e.outerHTML);",
            vec![],
        )
        .await
        .expect("a script result");
    assert_eq!(unlabelled, json!([]), "controls without a label");
}

/// An HTTP API call as `ada`; the reply's JSON.
async fn call(base: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
    let mut request = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .basic_auth("ada", Some(PASSWORD));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let text = request.send().await.unwrap().text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// The `textContent` of the first element `css` selects.
async fn content_of(client: &Client, css: &str) -> String {
    let script = format!("return document.querySelector({css:?}).textContent;");
    match client.execute(&script, vec![]).await {
        Ok(Value::String(text)) => text,
        other => panic!("{css}: {other:?}"),
    }
}

/// The instant a time field shows it resolved to: `= dd/mm/yyyy, hh:mm:ss UTC (…)`.
async fn resolved_instant(client: &Client, field: &str) -> chrono::DateTime<Utc> {
    let css = format!("#{field}-resolved");
    until(
        client,
        &format!("document.querySelector('{css}').textContent.startsWith('= ')"),
        "the resolved time",
    )
    .await;
    let text = content_of(client, &css).await;
    let stamp = text
        .strip_prefix("= ")
        .and_then(|t| t.split(" UTC").next())
        .unwrap_or_else(|| panic!("{text}"));
    NaiveDateTime::parse_from_str(stamp, "%d/%m/%Y, %H:%M:%S")
        .unwrap_or_else(|e| panic!("{stamp}: {e}"))
        .and_utc()
}

/// Sets a `<select>` by script, as a user's choice does (an `input` event).
async fn choose(client: &Client, css: &str, value: &str) {
    let script = format!(
        "const s = document.querySelector({css:?}); s.value = {value:?}; \
         s.dispatchEvent(new Event('input', {{bubbles: true}}));"
    );
    client.execute(&script, vec![]).await.unwrap();
}

/// The job form for an http handler: the payload is edited field by field,
/// a refused URL shows at its field with the API's code and field, and a
/// saved job's warnings show on its page.
async fn http_payload_form(client: &Client, base: &str) {
    client.goto(&format!("{base}/#/new")).await.unwrap();
    until(
        client,
        "document.querySelector('#payload-argv')",
        "the shell payload's argv list",
    )
    .await;
    type_into(client, "#field-id", "hook").await;
    type_into(client, "#field-group", "nobody").await;
    type_into(client, "#field-schedule-value", "0 0 3 * * *").await;
    type_into(client, "#field-handler", "http").await;
    until(
        client,
        "document.querySelector('#payload-url')",
        "the http payload's fields",
    )
    .await;
    all_controls_labelled(client).await;
    choose(client, "#payload-method", "POST").await;
    type_into(client, "#payload-url", "example.com/hook").await;
    click(client, "#payload-headers-add").await;
    type_into(client, "#payload-headers .header-name", "X-Api-Key").await;
    type_into(client, "#payload-headers .header-value", "k1").await;
    choose(client, "#payload-body-kind", "JSON").await;
    type_into(client, "#payload-body", r#"{"a": 1}"#).await;
    click(client, "#job-save").await;
    let url_error = "[data-error-for=\"payload.url\"]";
    until(
        client,
        &format!("document.querySelector('{url_error}').textContent.length > 0"),
        "the URL error at its field",
    )
    .await;
    let message = content_of(client, url_error).await;
    assert!(
        message.contains("absolute URL") && message.contains("invalid_argument · payload.url"),
        "the API's message, code and field: {message}"
    );
    photograph(client, "job-form-payload-error").await;
    let refused = call(base, reqwest::Method::GET, "/api/v1/jobs/hook", None).await;
    assert_eq!(refused["error"]["code"], "not_found", "{refused}");

    type_into(client, "#payload-url", "https://example.com/hook").await;
    click(client, "#job-save").await;
    until(
        client,
        "document.querySelector('#job-trigger') && document.querySelector('#flash-warnings')",
        "the saved job with its warnings",
    )
    .await;
    let warnings = content_of(client, "#flash-warnings").await;
    assert!(
        warnings.contains("group: ") && warnings.contains("nobody"),
        "{warnings}"
    );
    photograph(client, "job-put-warnings").await;
    let job = call(base, reqwest::Method::GET, "/api/v1/jobs/hook", None).await;
    assert_eq!(
        job["job"]["payload"],
        json!({"url": "https://example.com/hook", "method": "POST",
               "headers": {"X-Api-Key": "k1"}, "body": {"a": 1}}),
        "{job}"
    );
}

/// A firing held back by the job's `max_concurrent` says so in the history.
async fn held_firing(client: &Client, base: &str) -> Vec<String> {
    let spec = json!({"schedule": {"every": "1h"}, "handler": "shell",
                      "payload": {"argv": ["sleep", "30"]}, "max_concurrent": 1});
    let put = call(base, reqwest::Method::PUT, "/api/v1/jobs/slow", Some(spec)).await;
    assert_eq!(put["job"]["id"], "slow", "{put}");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let t = call(
            base,
            reqwest::Method::POST,
            "/api/v1/jobs/slow/trigger",
            Some(json!({})),
        )
        .await;
        ids.push(t["firing_id"].as_str().expect("a firing id").to_string());
    }
    client.goto(&format!("{base}/#/jobs/slow")).await.unwrap();
    until(
        client,
        "[...document.querySelectorAll('#history .held')].some(s => s.textContent.startsWith('held by job_max_concurrent since '))",
        "the held firing",
    )
    .await;
    photograph(client, "job-held").await;
    ids
}

/// The firing's own page shows the whole output a history cell cuts short.
async fn whole_output(client: &Client, base: &str) {
    let spec = json!({"schedule": {"every": "1h"}, "handler": "shell",
                      "payload": {"argv": ["seq", "1", "3000"]}});
    call(
        base,
        reqwest::Method::PUT,
        "/api/v1/jobs/chatty",
        Some(spec),
    )
    .await;
    call(
        base,
        reqwest::Method::POST,
        "/api/v1/jobs/chatty/trigger",
        Some(json!({})),
    )
    .await;
    client.goto(&format!("{base}/#/jobs/chatty")).await.unwrap();
    until(client,
        "[...document.querySelectorAll('#history tbody .state')].some(s => s.textContent === 'succeeded')",
        "the chatty firing to succeed").await;
    let cell = content_of(client, "#history td.excerpt pre").await;
    assert!(
        cell.len() < 400 && cell.ends_with(" …"),
        "a history cell is an excerpt: {cell}"
    );
    click(client, "#history td.excerpt a").await;
    until(
        client,
        "document.querySelector('#firing-output')",
        "the firing's page",
    )
    .await;
    let output = content_of(client, "#firing-output").await;
    let expected: String = (1..=3000).map(|n| format!("{n}\n")).collect();
    assert_eq!(output.trim_end(), expected.trim_end(), "the whole output");
    let facts = text_of(client, "#firing").await;
    assert!(
        facts.contains("console-worker") && facts.contains("finished"),
        "{facts}"
    );
    photograph(client, "firing").await;
}

/// The jobs list sorted by last success, within the loaded page: jobs that
/// never succeeded first, then the oldest success; a second click reverses.
async fn sort_by_last_success(client: &Client, base: &str) {
    client.goto(&format!("{base}/#/jobs")).await.unwrap();
    until(
        client,
        "document.querySelector('#sort-last-success')",
        "the jobs list",
    )
    .await;
    click(client, "#sort-last-success").await;
    until(
        client,
        "document.querySelector('#sort-note')",
        "the sorted list",
    )
    .await;
    let note = content_of(client, "#sort-note").await;
    assert!(note.contains("within this page"), "{note}");
    let column = "return [...document.querySelectorAll('#jobs tbody tr')].map(r => [r.children[1].textContent, r.querySelector('.last-success').textContent]);";
    let rows: Vec<(String, String)> =
        serde_json::from_value(client.execute(column, vec![]).await.unwrap()).unwrap();
    let ids: Vec<&str> = rows.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        &ids[..2],
        ["hook", "slow"],
        "never succeeded, first: {rows:?}"
    );
    assert!(rows[..2].iter().all(|(_, at)| at == "never"), "{rows:?}");
    let times: Vec<NaiveDateTime> = rows[2..]
        .iter()
        .map(|(_, at)| NaiveDateTime::parse_from_str(at, "%d/%m/%Y, %H:%M:%S").unwrap())
        .collect();
    assert!(
        times.len() == 2 && times.is_sorted(),
        "oldest success next: {rows:?}"
    );
    photograph(client, "jobs").await;
    click(client, "#sort-last-success").await;
    until(
        client,
        "document.querySelector('#sort-note').textContent.includes('newest first')",
        "the reversed sort",
    )
    .await;
    let rows: Vec<(String, String)> =
        serde_json::from_value(client.execute(column, vec![]).await.unwrap()).unwrap();
    assert_ne!(rows[0].1, "never", "the newest success first: {rows:?}");
    assert!(
        rows[2..].iter().all(|(_, at)| at == "never"),
        "never succeeded, last: {rows:?}"
    );
}

async fn start_scheduler(
    nats: &NatsServer,
    db: &SqliteDatabase,
    users: &Path,
    port: u16,
) -> ChimeProcess {
    let mut command = Binary::Scheduler.command();
    command
        .args(["--nats-url", &nats.url(), "--database-url", &db.url()])
        .args(["--metrics-addr", "127.0.0.1:0", "--replica-id", "console"])
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .arg("--http-users")
        .arg(users);
    let mut process = ChimeProcess::spawn(command);
    process
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
        .await;
    process
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_drives_the_console_in_a_real_browser() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let hash = chime_scheduler::intake::web::users::hash_password(PASSWORD).unwrap();
    std::fs::write(&users, format!("ada:admin:{hash}\n")).unwrap();
    let port = free_port();
    let _scheduler = start_scheduler(&nats, &db, &users, port).await;
    let _worker = start_worker(&nats.url(), "default", 2, "console-worker").await;
    let base = format!("http://127.0.0.1:{port}");
    let driver = start_driver().await;
    let client = browser(&driver).await;

    // Nothing is visible without login.
    client.goto(&format!("{base}/#/jobs")).await.unwrap();
    until(
        &client,
        "document.querySelector('#login-user')",
        "the login form",
    )
    .await;
    assert!(client.find(Locator::Css("#jobs")).await.is_err());
    photograph(&client, "login").await;
    // By keyboard alone: the user field has focus, Tab reaches the
    // password, Enter submits.
    client
        .active_element()
        .await
        .expect("a focused element")
        .send_keys("ada\u{E004}wrong\u{E007}")
        .await
        .expect("typing");
    until(
        &client,
        "document.querySelector('#login-error').textContent.includes('wrong')",
        "a refused login",
    )
    .await;
    type_into(&client, "#login-password", &format!("{PASSWORD}\u{E007}")).await;
    until(
        &client,
        "document.querySelector('#jobs')",
        "the jobs page after login",
    )
    .await;

    // Create a job with a bad cron: the error appears at the field.
    client.goto(&format!("{base}/#/new")).await.unwrap();
    until(
        &client,
        "document.querySelector('#job-form')",
        "the job form",
    )
    .await;
    all_controls_labelled(&client).await;
    type_into(&client, "#field-id", "hello").await;
    type_into(&client, "#field-schedule-value", "0 61 * * * *").await;
    type_into(&client, "#field-schedule-tz", "America/New_York").await;
    click(&client, "#job-save").await;
    let cron_error = "document.querySelector('[data-error-for=\"schedule.value\"]').textContent";
    until(
        &client,
        &format!("{cron_error}.length > 0"),
        "the cron error at its field",
    )
    .await;
    let message = text_of(&client, "[data-error-for=\"schedule.value\"]").await;
    assert!(
        message.contains("61"),
        "the error names the bad value: {message}"
    );
    photograph(&client, "job-form-error").await;

    // Fix it: the preview shows the next instants, then save.
    type_into(&client, "#field-schedule-value", "0 30 2 * * *").await;
    until(
        &client,
        "document.querySelectorAll('#schedule-preview #instants tbody tr').length === 5",
        "the preview",
    )
    .await;
    until(
        &client,
        &format!("{cron_error} === ''"),
        "the cron error cleared",
    )
    .await;
    let preview = text_of(&client, "#schedule-preview").await;
    assert!(
        preview.contains("02:30:00"),
        "local times in the job's zone: {preview}"
    );
    photograph(&client, "job-form-preview").await;
    click(&client, "#job-save").await;
    until(
        &client,
        "document.querySelector('#job-trigger')",
        "the job page",
    )
    .await;

    // Trigger: the firing succeeds on the page, without a reload.
    client
        .execute("window.noReload = true;", vec![])
        .await
        .unwrap();
    click(&client, "#job-trigger").await;
    until(&client,
        "[...document.querySelectorAll('#history tbody .state')].some(s => s.textContent === 'succeeded')",
        "the triggered firing to succeed").await;
    let still = client
        .execute("return window.noReload === true;", vec![])
        .await
        .unwrap();
    assert_eq!(still, json!(true), "the page reloaded");
    let history = text_of(&client, "#history").await;
    assert!(
        history.contains("console-worker"),
        "the worker is shown: {history}"
    );
    photograph(&client, "job").await;

    // Pause it for two hours, typed as an offset: the form shows the
    // instant before it is sent.
    type_into(&client, "#pause-until", "2h").await;
    until(
        &client,
        "document.querySelector('#pause-until-resolved').textContent.includes('needs its sign')",
        "the unsigned offset refused",
    )
    .await;
    type_into(&client, "#pause-until", "in 2h").await;
    let shown = resolved_instant(&client, "pause-until").await;
    let expected = Utc::now() + chrono::Duration::hours(2);
    assert!(
        (shown - expected).num_seconds().abs() < 60,
        "{shown} is not two hours from now"
    );
    click(&client, "#job-pause").await;
    until(
        &client,
        "document.querySelector('#job-resume')",
        "the paused job",
    )
    .await;
    let api = reqwest::Client::new()
        .get(format!("{base}/api/v1/jobs/hello"))
        .basic_auth("ada", Some(PASSWORD))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let job: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(job["job"]["state"], "paused", "{api}");
    let until_at = chime_common::duration::parse_time_str(
        job["job"]["paused_until"].as_str().expect("paused until"),
    )
    .unwrap();
    assert!(
        (until_at - shown).num_seconds().abs() < 60,
        "{until_at} is not the {shown} shown"
    );
    until(&client, "document.querySelector('#changes') && document.querySelector('#changes').textContent.includes('jobs.pause')", "the pause among the job's changes").await;

    // Re-run the last two days, typed as offsets: a dry run says what
    // would be staged, then the backfilled firings appear and run.
    type_into(&client, "#backfill-from", "-2d").await;
    type_into(&client, "#backfill-to", "-1m").await;
    let from = resolved_instant(&client, "backfill-from").await;
    assert!(
        (from - (Utc::now() - chrono::Duration::days(2)))
            .num_seconds()
            .abs()
            < 60,
        "{from}"
    );
    resolved_instant(&client, "backfill-to").await;
    click(&client, "#backfill-dry-run").await;
    until(&client, "document.querySelector('#backfill-result').textContent.includes('would be staged; nothing was staged')", "the dry run's answer").await;
    let staged = call(
        &base,
        reqwest::Method::GET,
        "/api/v1/firings?job_id=hello",
        None,
    )
    .await;
    assert!(
        !staged.to_string().contains("\"backfill\":true"),
        "a dry run staged: {staged}"
    );
    photograph(&client, "job-backfill-dry-run").await;
    click(&client, "#backfill-submit").await;
    until(&client,
        "[...document.querySelectorAll('#history tbody tr')].some(r => r.textContent.includes('(backfill)') && r.textContent.includes('succeeded'))",
        "a backfilled firing to succeed").await;

    http_payload_form(&client, &base).await;
    let held = held_firing(&client, &base).await;
    for id in held.iter().rev() {
        let path = format!("/api/v1/firings/{}/cancel", id.replace('#', "%23"));
        call(&base, reqwest::Method::POST, &path, Some(json!({}))).await;
    }
    whole_output(&client, &base).await;
    sort_by_last_success(&client, &base).await;

    // The other pages.
    client.goto(&format!("{base}/#/workers")).await.unwrap();
    until(&client, "document.querySelector('#workers') && document.querySelector('#workers').textContent.includes('console-worker')", "the worker").await;
    photograph(&client, "workers").await;
    client.goto(&format!("{base}/#/jobs")).await.unwrap();
    until(&client, "document.querySelector('#jobs') && document.querySelector('#jobs').textContent.includes('hello')", "the jobs list").await;
    all_controls_labelled(&client).await;
    client.goto(&format!("{base}/#/calendars")).await.unwrap();
    until(
        &client,
        "document.querySelector('#calendar-form')",
        "the calendars page",
    )
    .await;
    all_controls_labelled(&client).await;
    type_into(&client, "#calendar-id", "holidays").await;
    type_into(&client, "#calendar-dates", "2026-12-25 2026-13-01").await;
    click(&client, "#calendar-save").await;
    until(
        &client,
        "document.querySelector('#calendar-error').textContent.includes('dates[1]')",
        "the bad date named",
    )
    .await;
    type_into(&client, "#calendar-dates", "2026-12-25, 2027-01-01").await;
    click(&client, "#calendar-save").await;
    until(&client, "document.querySelector('#calendars') && document.querySelector('#calendars').textContent.includes('2027-01-01')", "the saved calendar").await;
    photograph(&client, "calendars").await;
    client.goto(&format!("{base}/#/groups")).await.unwrap();
    until(
        &client,
        "document.querySelector('#group-form')",
        "the groups page",
    )
    .await;
    all_controls_labelled(&client).await;
    type_into(&client, "#group-name", "reports").await;
    type_into(&client, "#group-max-concurrent", "0").await;
    click(&client, "#group-save").await;
    until(
        &client,
        "document.querySelector('#group-error').textContent.includes('max_concurrent')",
        "the bad limit named",
    )
    .await;
    type_into(&client, "#group-max-concurrent", "4").await;
    type_into(&client, "#group-max-per-second", "20").await;
    click(&client, "#group-save").await;
    until(
        &client,
        "[...document.querySelectorAll('#groups tbody tr')].some(r => r.textContent.startsWith('reports4'))",
        "the group's limits in the list",
    )
    .await;
    photograph(&client, "groups").await;
    client.goto(&format!("{base}/#/audit")).await.unwrap();
    until(&client, "document.querySelector('#audit') && document.querySelector('#audit').textContent.includes('jobs.pause')", "the audit trail").await;
    photograph(&client, "audit").await;
    client.goto(&format!("{base}/#/")).await.unwrap();
    until(&client, "document.querySelector('#card-workers') && document.querySelector('#card-workers').textContent.startsWith('1')", "the overview").await;
    photograph(&client, "overview").await;

    // A phone: nothing wider than the screen.
    client.set_window_size(390, 844).await.unwrap();
    client.goto(&format!("{base}/#/jobs/hello")).await.unwrap();
    until(
        &client,
        "document.querySelector('#history')",
        "the job page on a phone",
    )
    .await;
    let fits = client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        fits,
        json!(true),
        "the job page scrolls sideways on a phone"
    );
    photograph(&client, "job-phone").await;
    client.set_window_size(1280, 900).await.unwrap();

    // Log out: the session ends on the server too.
    click(&client, "#logout").await;
    until(
        &client,
        "document.querySelector('#login-user')",
        "the login form after logout",
    )
    .await;
    let after = client
        .execute(
            "return fetch('/api/v1/jobs', {headers: {'x-chime-console': '1'}}).then(r => r.status);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(after, json!(401));
    client.close().await.unwrap();
}
