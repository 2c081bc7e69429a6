//! The built-in `shell` and `http` handlers, run by a worker against a real
//! nats-server (and, for `http`, a tiny local HTTP server).

use chime_common::duration::format_time;
use chime_common::protocol::Outcome;
use chime_tests::eventually;
use chime_tests::worker_env::*;
use chime_worker::handlers::shell::SHELL_DISABLED;
use chime_worker::handlers::{HttpHandler, ShellHandler};
use chime_worker::WorkerHandle;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn shell_worker(env: &Env, group: &str, allowed: bool) -> WorkerHandle {
    env.worker(group, 2)
        .await
        .handler("shell", ShellHandler::new(allowed))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_handler_is_refused_without_allow_shell() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let worker = shell_worker(&env, "noshell", false).await;
    let marker = tempfile::tempdir().unwrap();
    let touched = marker.path().join("touched");
    let id = env
        .publish(
            &TestFiring::new("noshell", "touch", "shell")
                .payload(json!({"argv": ["touch", touched]})),
        )
        .await;
    env.ring("noshell").await;
    let e = events.of(&id, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Failed);
    assert_eq!(e.error.as_deref(), Some(SHELL_DISABLED));
    assert!(SHELL_DISABLED.contains("--allow-shell"));
    assert!(!touched.exists(), "nothing ran");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_handler_runs_argv_with_chime_env() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let worker = shell_worker(&env, "shell", true).await;
    let dir = tempfile::tempdir().unwrap();
    let firing = TestFiring::new("shell", "env-job", "shell").payload(json!({
        "argv": ["sh", "-c", "echo \"$CHIME_FIRING_ID|$CHIME_SCHEDULED_AT|$CHIME_ATTEMPT|$CHIME_JOB_ID|$GREETING|$(pwd)\"; echo oops >&2"],
        "env": {"GREETING": "hello; no shell here: $HOME"},
        "cwd": dir.path(),
    }));
    let id = env.publish(&firing).await;
    // argv is not interpreted by a shell: these characters are one argument.
    let literal = env
        .publish(
            &TestFiring::new("shell", "literal", "shell")
                .payload(json!({"argv": ["echo", "a;b", "$HOME", "*"]})),
        )
        .await;
    let failing = env
        .publish(
            &TestFiring::new("shell", "failing", "shell")
                .payload(json!({"argv": ["sh", "-c", "echo before; exit 7"]})),
        )
        .await;
    let bad = env
        .publish(&TestFiring::new("shell", "bad", "shell").payload(json!({"argv": "not a list"})))
        .await;
    env.ring("shell").await;

    let e = events.of(&id, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Succeeded, "{e:?}");
    let stdout_line = format!(
        "{}|{}|1|env-job|hello; no shell here: $HOME|{}",
        firing.id(),
        format_time(firing.scheduled_at()),
        dir.path().canonicalize().unwrap().display()
    );
    // stdout and stderr are two pipes: their lines interleave in either order.
    let output = e.output.as_deref().unwrap_or("");
    let mut lines: Vec<&str> = output.lines().collect();
    lines.sort_unstable();
    let mut expected = vec![stdout_line.as_str(), "oops"];
    expected.sort_unstable();
    assert_eq!(lines, expected, "{output:?}");
    assert!(output.ends_with('\n'));

    let e = events.of(&literal, Duration::from_secs(10)).await;
    assert_eq!(e.output.as_deref(), Some("a;b $HOME *\n"));
    let e = events.of(&failing, Duration::from_secs(10)).await;
    assert_eq!(
        (e.outcome, e.error.as_deref()),
        (Outcome::Failed, Some("sh exited with status 7"))
    );
    assert_eq!(e.output.as_deref(), Some("before\n"));
    let e = events.of(&bad, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Failed);
    assert!(
        e.error.as_deref().unwrap().starts_with("bad shell payload"),
        "{e:?}"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_handler_keeps_the_last_64_kib_of_output() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let worker = shell_worker(&env, "chatty", true).await;
    // 20 000 lines "line N" (about 200 KB), then "the end".
    let id = env
        .publish(&TestFiring::new("chatty", "chatty", "shell").payload(json!({
            "argv": ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo \"line $i\"; i=$((i+1)); done; echo 'the end'"]
        })))
        .await;
    env.ring("chatty").await;
    let e = events.of(&id, Duration::from_secs(30)).await;
    let output = e.output.unwrap();
    assert_eq!(output.len(), 64 * 1024);
    assert!(output.ends_with("line 19999\nthe end\n"));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_output_with_nul_and_invalid_utf8_is_reported_clean() {
    let env = Env::start().await;
    let _responder = env.responder().await;
    let mut events = env.events().await;
    let worker = shell_worker(&env, "binary", true).await;
    // A NUL, a byte that is never UTF-8, a tab; then a failure whose error is the exit status.
    let id = env
        .publish(
            &TestFiring::new("binary", "binary", "shell").payload(json!({
                "argv": ["sh", "-c", "printf 'a\\000b\\377c\\td\\n'; exit 3"]
            })),
        )
        .await;
    env.ring("binary").await;
    let e = events.of(&id, Duration::from_secs(30)).await;
    assert_eq!(e.outcome, Outcome::Failed);
    assert_eq!(e.output.as_deref(), Some("a\u{FFFD}b\u{FFFD}c\td\n"));
    assert_eq!(e.error.as_deref(), Some("sh exited with status 3"));
    worker.shutdown().await;
}

/// The state letter of a process (`Z` for a zombie), or `None` once it is gone.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_handler_timeout_kills_the_process_group() {
    let env = Env::start().await;
    let responder = env.responder().await;
    responder.set_run_for(Duration::from_secs(1));
    let mut events = env.events().await;
    let worker = shell_worker(&env, "slowshell", true).await;
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let script = format!(
        "sleep 30 & echo $! > {}; echo started; sleep 30",
        pid_file.display()
    );
    let id = env
        .publish(
            &TestFiring::new("slowshell", "sleeper", "shell")
                .payload(json!({"argv": ["sh", "-c", script]})),
        )
        .await;
    env.ring("slowshell").await;
    let e = events.of(&id, Duration::from_secs(15)).await;
    assert_eq!(e.outcome, Outcome::TimedOut, "{e:?}");
    assert_eq!(
        e.output.as_deref(),
        Some("started\n"),
        "output up to the kill is kept"
    );
    let ran = (e.finished_at - e.started_at).to_std().unwrap();
    assert!(
        ran < Duration::from_secs(5),
        "killed at the deadline, not after 30 s: {ran:?}"
    );

    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the background sleep is killed",
        || async { matches!(process_state(grandchild), None | Some('Z')) },
    )
    .await;
    worker.shutdown().await;
}

/// A request as the test server saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: String,
}

/// A one-request-per-connection HTTP/1.1 server: `/ok` answers 200 "hello",
/// `/boom` 500 "broken", `/slow` never answers.
async fn http_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&data).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().to_string())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if body.len() >= length {
                            break (head.to_string(), body.to_string());
                        }
                    }
                };
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                log.lock().unwrap().push(Seen { head, body });
                let (status, text) = match path.as_str() {
                    "/ok" => ("200 OK", "hello"),
                    "/boom" => ("500 Internal Server Error", "broken"),
                    _ => {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    }
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (base, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_handler_2xx_succeeds_and_500_fails() {
    let env = Env::start().await;
    let responder = env.responder().await;
    let mut events = env.events().await;
    let (base, seen) = http_server().await;
    let worker = env
        .worker("web", 2)
        .await
        .handler("http", HttpHandler::allowing_private().unwrap())
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();

    let ok_firing = TestFiring::new("web", "ping", "http").payload(json!({
        "url": format!("{base}/ok"),
        "method": "POST",
        "headers": {"X-Test": "yes"},
        "body": {"hello": "world"},
    }));
    let ok = env.publish(&ok_firing).await;
    let boom = env
        .publish(
            &TestFiring::new("web", "boom", "http").payload(json!({"url": format!("{base}/boom")})),
        )
        .await;
    env.ring("web").await;

    let e = events.of(&ok, Duration::from_secs(10)).await;
    assert_eq!(
        (e.outcome, e.output.as_deref()),
        (Outcome::Succeeded, Some("hello")),
        "{e:?}"
    );
    let e = events.of(&boom, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::Failed);
    assert_eq!(e.error.as_deref(), Some("HTTP 500 Internal Server Error"));
    assert_eq!(e.output.as_deref(), Some("broken"));

    let requests = seen.lock().unwrap().clone();
    let post = requests
        .iter()
        .find(|r| r.head.starts_with("POST /ok "))
        .expect("the POST arrived");
    let head = post.head.to_ascii_lowercase();
    assert!(head.contains("x-test: yes"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(
        head.contains(&format!("chime-firing-id: {}", ok_firing.id()).to_ascii_lowercase()),
        "{head}"
    );
    assert!(head.contains("chime-attempt: 1"), "{head}");
    assert_eq!(post.body, r#"{"hello":"world"}"#);
    assert!(requests.iter().any(|r| r.head.starts_with("GET /boom ")));

    // The deadline is the request's timeout.
    responder.set_run_for(Duration::from_secs(1));
    let slow = env
        .publish(
            &TestFiring::new("web", "slow", "http").payload(json!({"url": format!("{base}/slow")})),
        )
        .await;
    env.ring("web").await;
    let e = events.of(&slow, Duration::from_secs(10)).await;
    assert_eq!(e.outcome, Outcome::TimedOut, "{e:?}");
    worker.shutdown().await;
}
