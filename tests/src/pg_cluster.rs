//! A private PostgreSQL server for one test: its own data directory in a
//! temporary folder, its own port, its own settings (TLS, streaming
//! replication to a standby the test makes), stopped and removed on drop.
//!
//! Tests that need a server configured differently from the shared one at
//! `$CHIME_TEST_PG_URL` use this. PostgreSQL refuses to run as root, so when
//! the test runs as root the server runs as the `postgres` user (`runuser`),
//! as Debian's packages set it up.

use crate::ports::free_port;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

/// Where a TLS server's key and certificate are, and the CA that signed them.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
}

/// What to start a [`PgCluster`] with.
#[derive(Clone, Debug, Default)]
pub struct PgClusterOptions {
    /// Serve TLS with this certificate, and accept only TLS connections
    /// from TCP clients.
    pub tls: Option<ServerTls>,
    /// Accept streaming replication connections, so that
    /// [`PgCluster::start_standby`] can make a standby of this server.
    pub replication: bool,
}

/// A running private PostgreSQL server; stopped and removed on drop.
pub struct PgCluster {
    bin: PathBuf,
    dir: TempDir,
    port: u16,
}

/// The directory of the newest installed PostgreSQL's server programs.
fn server_bin() -> PathBuf {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .unwrap_or_else(|e| {
            panic!(
                "no PostgreSQL server installed under {}: {e}",
                root.display()
            )
        })
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| panic!("no initdb under {}/*/bin", root.display()))
}

fn running_as_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

impl PgCluster {
    /// Creates a data directory and starts a server on a free port.
    pub fn start(options: PgClusterOptions) -> PgCluster {
        let dir = tempfile::Builder::new()
            .prefix("chime-pg-")
            .tempdir()
            .expect("a temporary directory");
        let cluster = PgCluster {
            bin: server_bin(),
            port: free_port(),
            dir,
        };
        if running_as_root() {
            cluster.run("chown", &["-R", "postgres:postgres", &cluster.path()]);
        }
        cluster.as_server_user(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        let mut conf = format!(
            "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\n",
            cluster.port,
            cluster.path()
        );
        let mut hba = String::from("local all all trust\n");
        if options.replication {
            conf.push_str("wal_level = replica\nmax_wal_senders = 4\n");
            hba.push_str("local replication all trust\nhost replication all 127.0.0.1/32 trust\n");
        }
        if let Some(tls) = &options.tls {
            cluster.write_private("server.crt", &tls.cert_pem);
            cluster.write_private("server.key", &tls.key_pem);
            conf.push_str(&format!(
                "ssl = on\nssl_cert_file = '{0}/server.crt'\nssl_key_file = '{0}/server.key'\n",
                cluster.path()
            ));
            hba.push_str(
                "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
            );
        } else {
            hba.push_str("host all all 127.0.0.1/32 trust\n");
        }
        cluster.append(&format!("{}/postgresql.conf", cluster.data()), &conf);
        cluster.write(&format!("{}/pg_hba.conf", cluster.data()), &hba);
        let log = format!("{}/postgres.log", cluster.path());
        cluster.as_server_user(
            "pg_ctl",
            &["-D", &cluster.data(), "-l", &log, "-w", "start"],
        );
        cluster
    }

    /// Makes a streaming standby of this server (started with
    /// `replication`): `pg_basebackup` into a new temporary directory, its
    /// own port, started as a hot standby. With `synchronous`, this server
    /// then waits for the standby to flush every commit before it reports
    /// it, so a commit a client saw succeed survives a failover.
    pub fn start_standby(&self, synchronous: bool) -> PgCluster {
        let dir = tempfile::Builder::new()
            .prefix("chime-pg-standby-")
            .tempdir()
            .expect("a temporary directory");
        let standby = PgCluster {
            bin: self.bin.clone(),
            port: free_port(),
            dir,
        };
        if running_as_root() {
            standby.run("chown", &["-R", "postgres:postgres", &standby.path()]);
        }
        let primary_port = self.port.to_string();
        standby.as_server_user(
            "pg_basebackup",
            &[
                "-D",
                &standby.data(),
                "-h",
                "127.0.0.1",
                "-p",
                &primary_port,
                "-U",
                "postgres",
                "-X",
                "stream",
                "--write-recovery-conf",
                "--no-sync",
            ],
        );
        // The copied configuration names the primary's port and socket
        // directory; a later line wins.
        standby.append(
            &format!("{}/postgresql.conf", standby.data()),
            &format!(
                "port = {}\nunix_socket_directories = '{}'\nhot_standby = on\n",
                standby.port,
                standby.path()
            ),
        );
        let log = format!("{}/postgres.log", standby.path());
        standby.as_server_user(
            "pg_ctl",
            &["-D", &standby.data(), "-l", &log, "-w", "start"],
        );
        if synchronous {
            self.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
            self.psql("SELECT pg_reload_conf()");
        }
        let wanted = if synchronous { "sync" } else { "async" };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let state = self.psql("SELECT sync_state FROM pg_stat_replication");
            if state.trim() == wanted {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the standby did not stream as {wanted} within 30 s (pg_stat_replication: {state:?})\n{}",
                standby.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        standby
    }

    /// SIGKILL to the server's postmaster: a crash of the host, nothing
    /// flushed or handed over. Its backends exit as they notice.
    pub fn kill(&self) {
        let pid_file = format!("{}/postmaster.pid", self.data());
        let text = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("cannot read {pid_file}: {e}"));
        let pid: i32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {pid_file}"));
        // ESRCH: it is gone already, which is what a kill wants.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    /// Promotes a standby to a primary and waits until it accepts writes.
    pub fn promote(&self) {
        self.as_server_user("pg_ctl", &["-D", &self.data(), "-w", "promote"]);
    }

    /// Runs `sql` with `psql` as user `postgres` and returns its unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`, for a proxy in front of it.
    pub fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// A URL for database `postgres` as user `postgres`, with `query`
    /// (`sslmode=…`) appended when not empty.
    pub fn url(&self, query: &str) -> String {
        let base = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        if query.is_empty() {
            base
        } else {
            format!("{base}?{query}")
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(format!("{}/postgres.log", self.path())).unwrap_or_default()
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }

    fn data(&self) -> String {
        format!("{}/data", self.path())
    }

    fn write(&self, path: &str, text: &str) {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
        if running_as_root() {
            self.run("chown", &["postgres:postgres", path]);
        }
    }

    /// A file only the server may read (PostgreSQL refuses a key others can).
    fn write_private(&self, name: &str, text: &str) {
        let path = format!("{}/{name}", self.path());
        self.write(&path, text);
        self.run("chmod", &["600", &path]);
    }

    fn append(&self, path: &str, text: &str) {
        let mut current =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        current.push_str(text);
        self.write(path, &current);
    }

    fn as_server_user(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program).display().to_string();
        if running_as_root() {
            let mut all = vec!["-u", "postgres", "--", program.as_str()];
            all.extend_from_slice(args);
            self.run("runuser", &all);
        } else {
            self.run(&program, args);
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = Command::new(program)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let program = self.bin.join("pg_ctl").display().to_string();
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        let mut command = if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", program.as_str()]);
            c
        } else {
            Command::new(&program)
        };
        let _ = command.args(args).output();
    }
}
