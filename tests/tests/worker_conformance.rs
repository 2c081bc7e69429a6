//! The worker protocol's conformance suite: one set of cases that every
//! worker implementation passes against a real nats-server and a real
//! scheduler — the Rust worker library (`worker/examples/conformance.rs`),
//! the Python SDK (`python3 -m chime_worker.conformance`) and the
//! TypeScript SDK (`node sdk/typescript/dist/conformance.js`). Each program
//! takes the same arguments and offers the same handlers (`echo`, `sleep`,
//! `fail`, `shard`, `env`); a case that one of them fails and the protocol
//! page does not settle is a defect in docs/PROTOCOL.md.
//!
//! The SDKs must be installed where the suite finds them:
//! `./deploy/local/test.sh` builds the TypeScript one (`npm ci && npm run
//! build` in `sdk/typescript`) and runs the Python one from `sdk/python/src`
//! with nats-py installed.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::firing::{Firing, FiringState};
use chime_tests::{eventually, until_ok, ChimeProcess, NatsServer, SqliteDatabase};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long a case waits for a firing to reach the state it expects: a
/// retry's backoff, a lost worker's lease and a re-queue fit well inside.
const PATIENCE: Duration = Duration::from_secs(60);

/// A worker implementation under test.
#[derive(Clone, Copy, Debug)]
enum Implementation {
    Rust,
    Python,
    TypeScript,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

impl Implementation {
    /// The command that starts its conformance worker, before arguments.
    fn command(self) -> Command {
        match self {
            Implementation::Rust => Command::new(chime_tests::example_path("conformance")),
            Implementation::Python => {
                let src = repo().join("sdk/python/src");
                assert!(
                    src.is_dir(),
                    "the Python SDK is missing at {}",
                    src.display()
                );
                let path = match std::env::var("PYTHONPATH") {
                    Ok(p) if !p.is_empty() => format!("{}:{p}", src.display()),
                    _ => src.display().to_string(),
                };
                let mut command = Command::new("python3");
                command
                    .args(["-m", "chime_worker.conformance"])
                    .env("PYTHONPATH", path);
                command
            }
            Implementation::TypeScript => {
                let program = repo().join("sdk/typescript/dist/conformance.js");
                assert!(
                    program.is_file(),
                    "the TypeScript SDK is not built: run `npm ci && npm run build` in sdk/typescript ({} is missing)",
                    program.display()
                );
                let mut command = Command::new("node");
                command.arg(program);
                command
            }
        }
    }
}

/// A nats-server, a scheduler on SQLite and a client, for one case.
struct Stage {
    nats: NatsServer,
    _db: SqliteDatabase,
    _scheduler: ChimeProcess,
    client: Client,
    implementation: Implementation,
}

impl Stage {
    async fn new(implementation: Implementation) -> Stage {
        chime_tests::init_tracing();
        let nats = NatsServer::start().await;
        let db = SqliteDatabase::create();
        let scheduler = chime_tests::start_scheduler(&nats.url(), &db.url(), "conformance").await;
        let client = Client::new(nats.connect().await);
        Stage {
            nats,
            _db: db,
            _scheduler: scheduler,
            client,
            implementation,
        }
    }

    /// Starts a conformance worker of `group` as `id` and waits until it pulls.
    async fn worker(&self, group: &str, id: &str, threads: u32, drain_grace: f64) -> ChimeProcess {
        self.worker_with(group, id, threads, drain_grace, &[]).await
    }

    /// [`Stage::worker`] with more arguments.
    async fn worker_with(
        &self,
        group: &str,
        id: &str,
        threads: u32,
        drain_grace: f64,
        more: &[&str],
    ) -> ChimeProcess {
        let mut command = self.implementation.command();
        command.args(more);
        command.args([
            "--nats-url",
            &self.nats.url(),
            "--group",
            group,
            "--worker-id",
            id,
            "--threads",
            &threads.to_string(),
            "--drain-grace",
            &drain_grace.to_string(),
        ]);
        let mut worker = ChimeProcess::spawn(command);
        worker
            .wait_for_log_line(
                &format!("conformance worker ready {id}"),
                Duration::from_secs(30),
            )
            .await;
        worker
    }

    /// Puts a job that fires only when triggered.
    async fn put(&self, spec: Value) {
        let mut spec = spec;
        spec["schedule"] = json!({"at": "2099-01-01T00:00:00Z"});
        self.client.put_job(&spec).await.expect("the job is put");
    }

    async fn trigger(&self, job: &str) -> String {
        self.client.trigger_job(job, None).await.expect("triggered")
    }

    /// Every attempt of `job`, oldest first.
    async fn attempts(&self, job: &str) -> Vec<Firing> {
        let mut firings = chime_tests::firings_of(&self.client, job).await;
        firings.sort_by_key(|f| (f.scheduled_at, f.id.shard, f.attempt));
        firings
    }

    /// [`Stage::attempts`], or why the API did not answer: right after a
    /// NATS outage the scheduler may not have subscribed again yet.
    async fn attempts_if_answered(&self, job: &str) -> Result<Vec<Firing>, String> {
        let request = ListFiringsRequest {
            job_id: Some(job.into()),
            limit: Some(100),
            ..Default::default()
        };
        let mut firings = self
            .client
            .list_firings(&request)
            .await
            .map_err(|e| e.to_string())?
            .firings;
        firings.sort_by_key(|f| (f.scheduled_at, f.id.shard, f.attempt));
        Ok(firings)
    }

    /// Waits until the newest attempt of `job` is final and returns every attempt.
    async fn settled(&self, job: &str, attempts: usize) -> Vec<Firing> {
        until_ok(
            PATIENCE,
            &format!("{attempts} final attempt(s) of {job}"),
            || async {
                let firings = self.attempts(job).await;
                if firings.len() >= attempts && firings.iter().all(|f| f.state.is_final()) {
                    Ok(firings)
                } else {
                    Err(format!("{:?}", states(&firings)))
                }
            },
        )
        .await
    }

    /// Waits until an attempt of `job` succeeded (on `worker`, when named)
    /// and returns every attempt; an API that does not answer yet, as right
    /// after a NATS outage, is waited out.
    async fn succeeded(&self, job: &str, worker: Option<&str>, patience: Duration) -> Vec<Firing> {
        until_ok(
            patience,
            &format!("a succeeded attempt of {job}"),
            || async {
                let firings = self.attempts_if_answered(job).await?;
                let done = firings.iter().any(|f| {
                    f.state == FiringState::Succeeded
                        && worker.is_none_or(|w| f.worker.as_deref() == Some(w))
                });
                if done {
                    Ok(firings)
                } else {
                    Err(format!("{firings:?}"))
                }
            },
        )
        .await
    }

    /// Waits until `firing` is executing on a worker.
    async fn executing(&self, job: &str) -> Firing {
        until_ok(PATIENCE, &format!("{job} executing"), || async {
            let firings = self.attempts(job).await;
            match firings.iter().find(|f| f.state == FiringState::Executing) {
                Some(f) => Ok(f.clone()),
                None => Err(format!("{:?}", states(&firings))),
            }
        })
        .await
    }
}

fn states(firings: &[Firing]) -> Vec<FiringState> {
    firings.iter().map(|f| f.state).collect()
}

/// An echo job runs once on the worker and its output is recorded.
async fn runs_a_firing_and_reports_its_output(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "conf-1", 2, 5.0).await;
    stage
        .put(json!({"id": "hello", "group": "conf", "handler": "echo", "payload": {"text": "hi there"}}))
        .await;
    stage.trigger("hello").await;
    let firings = stage.settled("hello", 1).await;
    assert_eq!(states(&firings), [FiringState::Succeeded], "{firings:?}");
    assert_eq!(firings[0].output.as_deref(), Some("hi there"));
    assert_eq!(firings[0].worker.as_deref(), Some("conf-1"));
    assert!(firings[0].started_at.is_some() && firings[0].finished_at.is_some());
}

/// The handler sees the firing it runs: id, job, attempt and instant.
async fn hands_the_handler_the_firing(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "conf-1", 1, 5.0).await;
    stage
        .put(json!({"id": "who", "group": "conf", "handler": "env"}))
        .await;
    let id = stage.trigger("who").await;
    let firings = stage.settled("who", 1).await;
    let seen: Value = serde_json::from_str(firings[0].output.as_deref().unwrap_or("null"))
        .expect("the env handler's output is JSON");
    assert_eq!(seen["firing_id"], json!(id));
    assert_eq!(seen["job_id"], json!("who"));
    assert_eq!(seen["attempt"], json!(1));
}

/// A failing handler's error is recorded and the retry policy runs it again.
async fn reports_failures_and_runs_retries(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "conf-1", 2, 5.0).await;
    stage
        .put(json!({"id": "flaky", "group": "conf", "handler": "fail",
            "payload": {"message": "disk full"},
            "retry": {"max_attempts": 2, "initial": "1s"}}))
        .await;
    stage.trigger("flaky").await;
    let firings = stage.settled("flaky", 2).await;
    assert_eq!(
        states(&firings),
        [FiringState::Failed, FiringState::Failed],
        "{firings:?}"
    );
    assert!(
        firings
            .iter()
            .all(|f| f.error.as_deref() == Some("disk full")),
        "{firings:?}"
    );
    assert_eq!(
        firings.iter().map(|f| f.attempt).collect::<Vec<_>>(),
        [1, 2]
    );
}

/// A shard sees which shard it is, and every shard runs once.
async fn runs_every_shard_once(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "conf-1", 3, 5.0).await;
    stage
        .put(json!({"id": "split", "group": "conf", "handler": "shard", "shards": 3}))
        .await;
    stage.trigger("split").await;
    let firings = stage.settled("split", 3).await;
    let mut outputs: Vec<_> = firings.iter().filter_map(|f| f.output.clone()).collect();
    outputs.sort();
    assert_eq!(outputs, ["0/3", "1/3", "2/3"], "{firings:?}");
}

/// A broadcast's share is offered to its worker alone (docs/PROTOCOL.md
/// §4, "Offers"): each of two workers runs the shard of its rank by id, once.
async fn takes_the_broadcast_shares_offered_to_it(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _b = stage.worker("conf", "conf-b", 2, 5.0).await;
    let _a = stage.worker("conf", "conf-a", 2, 5.0).await;
    stage
        .put(json!({"id": "all", "group": "conf", "handler": "shard", "broadcast": true}))
        .await;
    // The scheduler reads the heartbeats each second: an instant staged
    // before it saw both workers goes to fewer.
    let instant = until_ok(
        PATIENCE,
        "a broadcast that reaches both workers",
        || async {
            let id: chime_common::FiringId =
                stage.trigger("all").await.parse().expect("a firing id");
            let firings = stage.attempts("all").await;
            let shares = firings
                .iter()
                .filter(|f| f.id.scheduled_ms == id.scheduled_ms)
                .count();
            if shares == 2 {
                Ok(id.scheduled_ms)
            } else {
                Err(format!("{shares} share(s): {firings:?}"))
            }
        },
    )
    .await;
    let shares: Vec<Firing> = until_ok(PATIENCE, "both shares final", || async {
        let firings: Vec<Firing> = stage
            .attempts("all")
            .await
            .into_iter()
            .filter(|f| f.id.scheduled_ms == instant)
            .collect();
        if firings.iter().all(|f| f.state.is_final()) {
            Ok(firings)
        } else {
            Err(format!("{:?}", states(&firings)))
        }
    })
    .await;
    let ran: Vec<(Option<&str>, Option<&str>, Option<&str>)> = shares
        .iter()
        .map(|f| {
            (
                f.worker_id.as_deref(),
                f.worker.as_deref(),
                f.output.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        ran,
        [
            (Some("conf-a"), Some("conf-a"), Some("0/2")),
            (Some("conf-b"), Some("conf-b"), Some("1/2"))
        ],
        "{shares:?}"
    );
}

/// A firing published while the worker fetches, or runs the one before, is
/// taken without waiting for the fallback poll: the doorbell rung
/// meanwhile, or the pull held open, brings it. The poll is longer than the
/// case's patience, so a missed wake-up fails it.
async fn takes_what_is_published_while_it_fetches_without_its_poll(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage
        .worker_with("conf", "conf-1", 1, 5.0, &["--poll-interval", "120"])
        .await;
    stage
        .put(json!({"id": "quick", "group": "conf", "handler": "echo", "payload": {"text": "ok"}}))
        .await;
    // Bursts of three on one thread: the second and third are published
    // while the worker runs the first or fetches after it.
    for round in 1..=8 {
        for _ in 0..3 {
            stage.trigger("quick").await;
        }
        let firings = stage.settled("quick", round * 3).await;
        assert!(
            firings.iter().all(|f| f.state == FiringState::Succeeded),
            "{firings:?}"
        );
    }
}

/// A group with dots in its name is served like any other.
async fn serves_a_dotted_group(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("team.batch", "dotted-1", 1, 5.0).await;
    stage
        .put(json!({"id": "dots", "group": "team.batch", "handler": "echo", "payload": {"text": "ok"}}))
        .await;
    stage.trigger("dots").await;
    let firings = stage.settled("dots", 1).await;
    assert_eq!(states(&firings), [FiringState::Succeeded], "{firings:?}");
}

/// A cancel request stops the run: the firing ends `cancelled`.
async fn stops_a_cancelled_run(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "conf-1", 1, 5.0).await;
    stage
        .put(
            json!({"id": "long", "group": "conf", "handler": "sleep", "payload": {"seconds": 120}}),
        )
        .await;
    stage.trigger("long").await;
    let running = stage.executing("long").await;
    stage
        .client
        .cancel_firing(&running.id.to_string())
        .await
        .expect("cancel accepted");
    let firings = stage.settled("long", 1).await;
    assert_eq!(states(&firings), [FiringState::Cancelled], "{firings:?}");
}

/// The heartbeat lists the firings the worker runs (`running`).
async fn lists_its_running_firings_in_heartbeats(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "beat-1", 1, 5.0).await;
    stage
        .put(json!({"id": "nap", "group": "conf", "handler": "sleep", "payload": {"seconds": 30}}))
        .await;
    stage.trigger("nap").await;
    let running = stage.executing("nap").await;
    let wanted = running.id.to_string();
    eventually(
        Duration::from_secs(20),
        "the heartbeat lists the run",
        || async {
            let workers = stage
                .client
                .list_workers(Some("conf".into()))
                .await
                .unwrap_or_default();
            let info = workers.iter().find(|w| w.id == "beat-1");
            info.and_then(|w| w.running.as_ref())
                .is_some_and(|r| r.iter().any(|id| id.to_string() == wanted))
        },
    )
    .await;
}

/// A worker killed -9 in the middle of a run: the run is found lost and
/// runs again on another worker, without spending the job's one attempt.
async fn a_killed_worker_s_run_runs_again_elsewhere(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let mut first = stage.worker("conf", "doomed", 1, 5.0).await;
    stage
        .put(json!({"id": "survivor", "group": "conf", "handler": "sleep", "payload": {"seconds": 2}}))
        .await;
    stage.trigger("survivor").await;
    stage.executing("survivor").await;
    first.kill9();
    let _second = stage.worker("conf", "heir", 1, 5.0).await;
    let firings = stage.succeeded("survivor", Some("heir"), PATIENCE).await;
    assert_eq!(
        firings
            .iter()
            .filter(|f| f.state == FiringState::Succeeded)
            .count(),
        1,
        "{firings:?}"
    );
}

/// SIGTERM while a run fits in the drain grace: the run finishes and
/// succeeds, and the worker exits 0.
async fn drains_a_run_that_fits_its_grace(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let mut worker = stage.worker("conf", "drainer", 1, 20.0).await;
    stage
        .put(json!({"id": "brief", "group": "conf", "handler": "sleep", "payload": {"seconds": 2}}))
        .await;
    stage.trigger("brief").await;
    stage.executing("brief").await;
    let status = worker.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "exit {status:?}: {}", worker.log_tail(40));
    let firings = stage.settled("brief", 1).await;
    assert_eq!(states(&firings), [FiringState::Succeeded], "{firings:?}");
}

/// A run that overruns the drain grace is reported interrupted and runs
/// again on another worker: never silently `cancelled`.
async fn runs_again_what_overran_the_drain(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let mut worker = stage.worker("conf", "hasty", 1, 0.5).await;
    stage
        .put(json!({"id": "overrun", "group": "conf", "handler": "sleep", "payload": {"seconds": 3}}))
        .await;
    stage.trigger("overrun").await;
    stage.executing("overrun").await;
    let status = worker.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "exit {status:?}: {}", worker.log_tail(40));
    let _next = stage.worker("conf", "patient", 1, 20.0).await;
    let firings = stage.succeeded("overrun", None, PATIENCE).await;
    assert!(
        firings.iter().all(|f| f.state != FiringState::Cancelled),
        "{firings:?}"
    );
    assert_eq!(
        firings.last().and_then(|f| f.worker.as_deref()),
        Some("patient"),
        "{firings:?}"
    );
}

/// Garbage on the firing subject is dealt with, the worker stays up, and a
/// real firing after it still runs.
async fn survives_malformed_firing_messages(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let mut worker = stage.worker("conf", "sturdy", 1, 5.0).await;
    let nats = stage.nats.connect().await;
    let js = async_nats::jetstream::new(nats);
    for (i, body) in [&b"not json"[..], b"{}", b"", &[0xff, 0xfe, 0x00][..]]
        .into_iter()
        .enumerate()
    {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("garbage-{i}").as_str());
        if i % 2 == 1 {
            headers.insert("Chime-Firing-Id", "no such firing");
            headers.insert("Chime-Attempt", "minus one");
        }
        js.publish_with_headers("chime.fire.conf.normal", headers, body.to_vec().into())
            .await
            .expect("published")
            .await
            .expect("stored");
    }
    stage
        .put(
            json!({"id": "after", "group": "conf", "handler": "echo", "payload": {"text": "fine"}}),
        )
        .await;
    stage.trigger("after").await;
    let firings = stage.settled("after", 1).await;
    assert_eq!(states(&firings), [FiringState::Succeeded], "{firings:?}");
    assert!(worker.try_status().is_none(), "{}", worker.log_tail(40));
}

/// With one thread busy, the waiting firing of the higher band runs first.
async fn takes_the_higher_band_first(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    let _worker = stage.worker("conf", "single", 1, 5.0).await;
    stage
        .put(json!({"id": "blocker", "group": "conf", "handler": "sleep", "payload": {"seconds": 3}}))
        .await;
    stage
        .put(json!({"id": "low", "group": "conf", "handler": "echo", "priority": 0}))
        .await;
    stage
        .put(json!({"id": "high", "group": "conf", "handler": "echo", "priority": 9}))
        .await;
    stage.trigger("blocker").await;
    stage.executing("blocker").await;
    stage.trigger("low").await;
    stage.trigger("high").await;
    let low = stage.settled("low", 1).await;
    let high = stage.settled("high", 1).await;
    assert!(
        high[0].started_at < low[0].started_at,
        "high started {:?}, low {:?}",
        high[0].started_at,
        low[0].started_at
    );
}

/// A firing cancelled while it waited in the stream: its start is refused
/// and the worker does not run it, then goes on to the next one.
async fn does_not_run_a_firing_whose_start_is_refused(implementation: Implementation) {
    let stage = Stage::new(implementation).await;
    stage
        .put(json!({"id": "unwanted", "group": "conf", "handler": "echo"}))
        .await;
    stage
        .put(
            json!({"id": "wanted", "group": "conf", "handler": "echo", "payload": {"text": "yes"}}),
        )
        .await;
    let unwanted = stage.trigger("unwanted").await;
    stage
        .client
        .cancel_firing(&unwanted)
        .await
        .expect("a waiting firing can be cancelled");
    stage.trigger("wanted").await;
    let _worker = stage.worker("conf", "choosy", 1, 5.0).await;
    // Published after the unwanted one on the same subject: by the time it
    // ran, the worker had met the unwanted one and asked to start it.
    let wanted = stage.settled("wanted", 1).await;
    assert_eq!(states(&wanted), [FiringState::Succeeded], "{wanted:?}");
    let firings = stage.attempts("unwanted").await;
    assert_eq!(states(&firings), [FiringState::Cancelled], "{firings:?}");
    assert_eq!(firings[0].worker, None, "{firings:?}");
    assert_eq!(firings[0].started_at, None, "{firings:?}");
}

/// NATS gone for longer than the heartbeat lease: the worker fences,
/// stops the run and reports it interrupted; once NATS is back the firing
/// runs again, without spending the job's single attempt, and the worker
/// takes work again.
async fn fences_when_nats_is_gone_and_comes_back(implementation: Implementation) {
    let mut stage = Stage::new(implementation).await;
    let mut worker = stage.worker("conf", "cut-off", 1, 5.0).await;
    stage
        .put(json!({"id": "stranded", "group": "conf", "handler": "sleep", "payload": {"seconds": 20}}))
        .await;
    stage.trigger("stranded").await;
    stage.executing("stranded").await;
    stage.nats.kill();
    // Longer than the lease (the bucket's 15 s TTL less the 2 s fence
    // margin): the outage is the fault under test.
    tokio::time::sleep(Duration::from_secs(16)).await;
    stage.nats.restart().await;
    let firings = stage
        .succeeded("stranded", None, Duration::from_secs(90))
        .await;
    assert!(
        firings.len() >= 2,
        "the fenced attempt is recorded: {firings:?}"
    );
    assert!(worker.try_status().is_none(), "{}", worker.log_tail(40));
}

/// Every case, run for one implementation, each its own test.
macro_rules! conformance {
    ($module:ident, $implementation:expr) => {
        mod $module {
            use super::*;

            conformance!(@cases $implementation;
                runs_a_firing_and_reports_its_output,
                hands_the_handler_the_firing,
                reports_failures_and_runs_retries,
                runs_every_shard_once,
                takes_the_broadcast_shares_offered_to_it,
                takes_what_is_published_while_it_fetches_without_its_poll,
                serves_a_dotted_group,
                stops_a_cancelled_run,
                lists_its_running_firings_in_heartbeats,
                a_killed_worker_s_run_runs_again_elsewhere,
                drains_a_run_that_fits_its_grace,
                runs_again_what_overran_the_drain,
                survives_malformed_firing_messages,
                takes_the_higher_band_first,
                does_not_run_a_firing_whose_start_is_refused,
                fences_when_nats_is_gone_and_comes_back,
            );
        }
    };
    (@cases $implementation:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case($implementation).await;
            }
        )*
    };
}

conformance!(rust, Implementation::Rust);
conformance!(python, Implementation::Python);
conformance!(typescript, Implementation::TypeScript);
