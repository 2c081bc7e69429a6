//! PostgreSQL over TLS: a private server with `ssl = on` that refuses
//! plain TCP, a CA made by the test. `sslmode=verify-full` with that CA as
//! `sslrootcert` connects the store and the scheduler;
//! another CA fails with a clear error; `require` encrypts without
//! verifying; `disable` is refused by the server.

use chime_common::Limits;
use chime_scheduler::store::{Store, StoreOptions};
use chime_tests::{Binary, ChimeProcess, NatsServer, PgCluster, PgClusterOptions, ServerTls};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use sqlx::Connection;
use std::path::Path;
use std::time::Duration;

/// A CA: its certificate (PEM) and what signs with it.
struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("a self-signed CA");
        Authority { cert, key }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    fn server(&self) -> ServerTls {
        let key = KeyPair::generate().expect("a key");
        let params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("params");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a server certificate");
        ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn write(&self, dir: &Path, name: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, self.cert.pem()).expect("CA file");
        path.display().to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_the_scheduler_connect_with_verify_full_and_refuse_a_wrong_ca() {
    chime_tests::init_tracing();
    let ca = Authority::new("chime test CA");
    let other = Authority::new("someone else's CA");
    let pg = PgCluster::start(PgClusterOptions {
        tls: Some(ca.server()),
        ..Default::default()
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let other_file = other.write(dir.path(), "other.pem");

    let verified = pg.url(&format!("sslmode=verify-full&sslrootcert={ca_file}"));
    let store = Store::connect(&verified, StoreOptions::default())
        .await
        .unwrap_or_else(|e| panic!("verify-full with the right CA: {e}\n{}", pg.log()));
    let spec = chime_common::JobSpec::from_json(
        &serde_json::json!({"id": "tls", "schedule": {"every": "1h"}, "handler": "shell",
            "payload": {"argv": ["/bin/true"]}}),
        &Limits::default(),
    )
    .expect("a spec");
    store
        .put_job(&spec, chrono::Utc::now())
        .await
        .expect("put over TLS");
    let mut conn = sqlx::PgConnection::connect(&verified)
        .await
        .expect("connect");
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .expect("pg_stat_ssl");
    assert!(encrypted);

    let wrong = pg.url(&format!("sslmode=verify-full&sslrootcert={other_file}"));
    let error = match Store::connect(&wrong, StoreOptions::default()).await {
        Ok(_) => panic!("a server certificate from another CA was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        error.to_lowercase().contains("certificate") || error.to_lowercase().contains("tls"),
        "{error}"
    );

    Store::connect(&pg.url("sslmode=require"), StoreOptions::default())
        .await
        .expect("require encrypts without verifying");
    let plain = Store::connect(&pg.url("sslmode=disable"), StoreOptions::default()).await;
    assert!(plain.is_err(), "the server accepts only TLS");

    // The scheduler binary, end to end.
    let nats = NatsServer::start().await;
    let mut command = Binary::Scheduler.command();
    command.args([
        "--nats-url",
        &nats.url(),
        "--database-url",
        &verified,
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let mut scheduler = ChimeProcess::spawn(command);
    scheduler
        .wait_for_log_line("chime-scheduler ready", Duration::from_secs(30))
        .await;
    scheduler.terminate(Duration::from_secs(15)).await;

    let mut command = Binary::Scheduler.command();
    command.args([
        "--nats-url",
        &nats.url(),
        "--database-url",
        &wrong,
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let mut refused = ChimeProcess::spawn(command);
    let status = refused.wait(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = refused.log();
    assert!(log.contains("cannot open the store"), "{log}");
}
