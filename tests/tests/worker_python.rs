//! The Python worker SDK (`sdk/python`, on nats-py), run as its conformance
//! worker (`python3 -m chime_worker.conformance`), runs a firing end to end
//! against a real nats-server: pull, start request, ack, run (a shard told
//! which it is), finished event, heartbeat under `<group>.<worker id>`
//! listing the firings it runs, a run stopped by its shutdown reported
//! interrupted, clean exit.

use chime_common::protocol::{Interruption, Outcome, WorkerInfo};
use chime_tests::eventually;
use chime_tests::worker_env::*;
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// `PYTHONPATH` with the SDK's sources first, so the test runs this checkout's SDK.
fn python_path() -> OsString {
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk/python/src");
    let mut paths = vec![sdk];
    if let Some(existing) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&existing));
    }
    std::env::join_paths(paths).expect("paths without the separator")
}

fn require_nats_py() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import nats"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "this test needs python3 with nats-py: `pip install nats-py` (./deploy/local/test.sh installs it)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_worker_runs_a_firing_end_to_end() {
    require_nats_py();
    let env = Env::start().await;
    env.create_group_consumers("py").await;
    let responder = env.responder().await;
    let mut events = env.events().await;

    let mut child = Command::new("python3")
        .args(["-m", "chime_worker.conformance"])
        .env("PYTHONPATH", python_path())
        .args([
            "--nats-url",
            &env.nats.url(),
            "--group",
            "py",
            "--worker-id",
            "py-worker-1",
            "--drain-grace",
            "0.5",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if line.starts_with("conformance worker ready ") {
                return line;
            }
        }
        panic!("the python conformance worker exited before it was ready");
    })
    .await
    .expect("the python worker gets ready within 20 s");
    assert_eq!(ready, "conformance worker ready py-worker-1");

    // Registered in the heartbeat bucket, under its group.
    let kv = env.topology.workers().await.unwrap();
    let key = "py.py-worker-1";
    let beat = || async {
        kv.get(key)
            .await
            .unwrap()
            .map(|bytes| serde_json::from_slice::<WorkerInfo>(&bytes).unwrap())
    };
    let info = beat().await.expect("heartbeat key");
    assert_eq!(
        (info.group.as_str(), info.threads, info.in_flight),
        ("py", 2, 0)
    );
    assert_eq!(info.running, Some(vec![]), "it runs nothing yet");

    let firing = TestFiring::new("py", "from-rust", "echo")
        .payload(json!({"hello": "world", "n": [1, 2, 3]}));
    let id = env.publish(&firing).await;
    env.ring("py").await;

    let event = events.of(&id, Duration::from_secs(20)).await;
    assert_eq!(event.worker_id, "py-worker-1");
    assert_eq!(event.outcome, Outcome::Succeeded, "{event:?}");
    let echoed: serde_json::Value =
        serde_json::from_str(event.output.as_deref().expect("output")).unwrap();
    assert_eq!(echoed, firing.payload);
    assert!(event.started_at <= event.finished_at);
    assert_eq!(
        responder
            .owners
            .lock()
            .unwrap()
            .get(&id)
            .map(String::as_str),
        Some("py-worker-1")
    );

    // A shard of a sharded job's instant: the handler is told which one.
    let sharded = TestFiring::new("py", "sharded", "shard").shard(3, 8);
    let sharded_id = env.publish(&sharded).await;
    assert_eq!(
        sharded_id.to_string(),
        format!("sharded@{}.3#1", sharded.scheduled_ms)
    );
    env.ring("py").await;
    let event = events.of(&sharded_id, Duration::from_secs(20)).await;
    assert_eq!(event.outcome, Outcome::Succeeded, "{event:?}");
    assert_eq!(event.output.as_deref(), Some("3/8"));

    // A long run is listed in its heartbeats while it runs.
    let long = TestFiring::new("py", "long", "sleep").payload(json!({"seconds": 20}));
    let long_id = env.publish(&long).await;
    env.ring("py").await;
    eventually(Duration::from_secs(10), "the long run listed", || async {
        beat()
            .await
            .and_then(|info| info.running)
            .is_some_and(|running| running.contains(&long_id))
    })
    .await;

    // SIGTERM: the run outlives the drain grace, is stopped and reported
    // failed, interrupted by the shutdown; the worker exits cleanly and
    // deregisters.
    let pid = child.id().expect("running") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let event = events.of(&long_id, Duration::from_secs(20)).await;
    assert_eq!(event.outcome, Outcome::Failed, "{event:?}");
    assert_eq!(event.interrupted, Some(Interruption::Shutdown), "{event:?}");
    assert_eq!(event.error.as_deref(), Some("worker shutting down"));
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the python worker exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(beat().await.is_none(), "heartbeat key deleted");
    // Acked: nothing left in the work queue.
    let mut stream = env.jetstream.get_stream("CHIME_FIRE").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 0);
}
