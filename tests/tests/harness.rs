//! Tests of the harness itself: the servers and databases it provides are
//! real, usable, survive what they should and are gone when dropped.

use std::process::Command;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use chime_tests::{
    backend_tests, free_port, Binary, ChimeProcess, DatabaseKind, NatsOptions, NatsServer,
    PgDatabase, SqliteDatabase, TestDatabase,
};
use sqlx::{Connection, PgConnection, SqliteConnection};

/// A file-backed stream, so messages outlive a server crash.
async fn create_file_stream(js: &jetstream::Context) -> stream::Stream {
    js.create_stream(stream::Config {
        name: "HARNESS".to_owned(),
        subjects: vec!["harness.>".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create stream HARNESS")
}

#[tokio::test]
async fn nats_server_accepts_jetstream_stream_and_publish() {
    let nats = NatsServer::start().await;
    let js = jetstream::new(nats.connect().await);
    let mut stream = create_file_stream(&js).await;

    let ack = js
        .publish("harness.hello", "world".into())
        .await
        .expect("publish")
        .await
        .expect("publish ack");

    assert_eq!(ack.stream, "HARNESS");
    assert_eq!(ack.sequence, 1);
    assert_eq!(stream.info().await.expect("info").state.messages, 1);
}

#[tokio::test]
async fn killed_nats_server_restarts_on_same_url_with_stream_messages() {
    let mut nats = NatsServer::start().await;
    let url = nats.url();
    {
        let js = jetstream::new(nats.connect().await);
        create_file_stream(&js).await;
        js.publish("harness.kept", "survives a crash".into())
            .await
            .expect("publish")
            .await
            .expect("publish ack");
    }

    nats.kill();
    assert!(!nats.is_running());
    nats.restart().await;

    assert_eq!(nats.url(), url);
    let js = jetstream::new(nats.connect().await);
    let stream = js
        .get_stream("HARNESS")
        .await
        .expect("stream after restart");
    let message = stream.get_raw_message(1).await.expect("message 1");
    assert_eq!(message.subject.as_str(), "harness.kept");
    assert_eq!(&message.payload[..], b"survives a crash");
}

#[tokio::test]
async fn stopped_nats_server_refuses_connections_until_restarted() {
    let mut nats = NatsServer::start().await;

    nats.stop().await;
    assert!(!nats.is_running());
    assert!(async_nats::connect(nats.url()).await.is_err());

    nats.restart().await;
    nats.connect()
        .await
        .flush()
        .await
        .expect("flush after restart");
}

#[tokio::test]
async fn nats_server_monitoring_port_serves_varz_when_asked() {
    let nats = NatsServer::start_with(NatsOptions {
        monitoring: true,
        ..Default::default()
    })
    .await;
    let monitor = nats.monitor_url().expect("monitoring was requested");
    let port: u16 = monitor.rsplit(':').next().unwrap().parse().unwrap();

    // A plain HTTP/1.0 GET; no HTTP client needed for one request.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to monitoring port");
    socket
        .write_all(b"GET /varz HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.0 200"), "{response}");
    assert!(response.contains("\"jetstream\""), "{response}");
}

#[tokio::test]
async fn nats_servers_started_together_get_distinct_ports() {
    let (a, b) = tokio::join!(NatsServer::start(), NatsServer::start());
    assert_ne!(a.port(), b.port());
    assert_ne!(free_port(), free_port());
}

#[tokio::test]
async fn postgres_database_is_fresh_usable_and_dropped_afterwards() {
    let db = PgDatabase::create().await;
    let name = db.name().to_owned();
    assert!(name.starts_with("chime_test_"));

    let mut conn = PgConnection::connect(db.url()).await.expect("connect");
    let (one, current): (i32, String) = sqlx::query_as("SELECT 1, current_database()")
        .fetch_one(&mut conn)
        .await
        .expect("SELECT 1");
    assert_eq!((one, current.as_str()), (1, name.as_str()));
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(tables, 0, "a new database has no tables");

    // Still connected: the drop must end this session to succeed.
    let admin_url = db.admin_url().to_owned();
    drop(db);

    let mut admin = PgConnection::connect(&admin_url)
        .await
        .expect("connect admin");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(left, 0, "database {name} still exists after drop");
    assert!(sqlx::query("SELECT 1").execute(&mut conn).await.is_err());
}

#[tokio::test]
async fn postgres_databases_are_distinct_per_call() {
    let (a, b) = tokio::join!(PgDatabase::create(), PgDatabase::create());
    assert_ne!(a.name(), b.name());
    assert_ne!(a.url(), b.url());
}

#[tokio::test]
async fn sqlite_database_file_is_created_usable_and_removed_afterwards() {
    let db = SqliteDatabase::create();
    assert!(db.url().starts_with("sqlite://") && db.url().ends_with("?mode=rwc"));

    let mut conn = SqliteConnection::connect(&db.url()).await.expect("connect");
    sqlx::query("CREATE TABLE t (x INTEGER)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO t VALUES (42)")
        .execute(&mut conn)
        .await
        .unwrap();
    let x: i64 = sqlx::query_scalar("SELECT x FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(x, 42);
    assert!(db.path().is_file());
    conn.close().await.unwrap();

    let dir = db.dir().to_owned();
    drop(db);
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
}

backend_tests! {
    /// The macro hands each body a fresh database of the backend its name says.
    async fn backend_tests_run_the_body_on_each_backend(db: TestDatabase) {
        let url = db.url();
        match db.kind() {
            DatabaseKind::Postgres => {
                assert!(url.starts_with("postgres://"), "{url}");
                let mut conn = PgConnection::connect(&url).await.unwrap();
                sqlx::query("CREATE TABLE t (x BIGINT)").execute(&mut conn).await.unwrap();
            }
            DatabaseKind::Sqlite => {
                assert!(url.starts_with("sqlite://"), "{url}");
                let mut conn = SqliteConnection::connect(&url).await.unwrap();
                sqlx::query("CREATE TABLE t (x BIGINT)").execute(&mut conn).await.unwrap();
            }
        }
    }

    async fn backend_tests_may_return_a_result(db: TestDatabase) -> anyhow::Result<()> {
        anyhow::ensure!(!db.url().is_empty());
        Ok(())
    }
}

/// `sh` stands in for a Chime binary so that the process plumbing is tested
/// whatever state the real binaries are in.
fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

#[tokio::test]
async fn chime_process_logs_output_and_terminates_on_sigterm() {
    let mut process = ChimeProcess::spawn(sh(
        "echo starting; echo to stderr >&2; sleep 0.2; echo ready to serve; exec sleep 30",
    ));

    let line = process
        .wait_for_log_line("ready", Duration::from_secs(5))
        .await;
    assert_eq!(line, "ready to serve");
    let log = process.log();
    assert!(
        log.contains("starting") && log.contains("to stderr"),
        "{log}"
    );

    let status = process.terminate(Duration::from_secs(5)).await;
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(nix::libc::SIGTERM));
}

#[tokio::test]
async fn chime_process_kill9_ends_a_process_that_ignores_sigterm() {
    let mut process = ChimeProcess::spawn(sh("trap '' TERM; echo up; exec sleep 30"));
    process
        .wait_for_log_line("up", Duration::from_secs(5))
        .await;

    process.kill9();

    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        process.try_status().and_then(|s| s.signal()),
        Some(nix::libc::SIGKILL)
    );
}

#[tokio::test]
#[should_panic(expected = "did not exit within 300ms of SIGTERM")]
async fn terminate_panics_when_the_process_outlives_its_timeout() {
    let mut process = ChimeProcess::spawn(sh("trap '' TERM; echo up; exec sleep 30"));
    process
        .wait_for_log_line("up", Duration::from_secs(5))
        .await;
    process.terminate(Duration::from_millis(300)).await;
}

#[tokio::test]
#[should_panic(expected = "exited (exit status: 3) before logging \"ready\"")]
async fn wait_for_log_line_panics_when_the_process_exits_first() {
    let mut process = ChimeProcess::spawn(sh("echo boom; exit 3"));
    process
        .wait_for_log_line("ready", Duration::from_secs(5))
        .await;
}

#[tokio::test]
async fn chime_process_wait_returns_the_exit_status() {
    let mut process = ChimeProcess::spawn(sh("exit 7"));
    let status = process.wait(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(7));
}

#[test]
fn workspace_binaries_are_built_next_to_the_test_executable() {
    let deps = std::env::current_exe().unwrap();
    let profile_dir = deps.parent().unwrap().parent().unwrap();
    for binary in Binary::ALL {
        let path = binary.path();
        assert!(path.is_file(), "{}", path.display());
        assert_eq!(path, profile_dir.join(binary.name()));
    }
}
