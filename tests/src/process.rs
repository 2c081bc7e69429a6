//! Chime's own binaries as child processes.
//!
//! End-to-end tests run `chime-scheduler`, `chime-worker` and `chimectl`
//! exactly as users do, so that flags, environment variables, signals and
//! exit codes are tested too, and so that a replica can be SIGKILLed in the
//! middle of its work (see [`crate::Binary`] for where they come from).
//! Output goes to a log file whose tail is printed when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::terminate;
use crate::logfile;

/// A child process whose output goes to a log file. Dropping it kills the
/// process; if the test is panicking, the log's tail is printed first.
pub struct ChimeProcess {
    name: String,
    child: Option<Child>,
    status: Option<ExitStatus>,
    /// Holds `output.log`; removed on drop.
    dir: TempDir,
}

impl ChimeProcess {
    /// Spawns `command` with stdin closed and stdout and stderr into one log
    /// file. Sets `NO_COLOR=1` unless the command sets it, so log lines are
    /// plain text to search.
    ///
    /// ```ignore
    /// let mut cmd = Binary::Scheduler.command();
    /// cmd.arg("--nats-url").arg(nats.url()).env("CHIME_DATABASE_URL", db.url());
    /// let mut scheduler = ChimeProcess::spawn(cmd);
    /// scheduler.wait_for_log_line("ready", Duration::from_secs(10)).await;
    /// ```
    pub fn spawn(mut command: Command) -> Self {
        let name = Path::new(command.get_program())
            .file_name()
            .unwrap_or(command.get_program())
            .to_string_lossy()
            .into_owned();
        let dir = tempfile::Builder::new()
            .prefix(&format!("chime-{name}-"))
            .tempdir()
            .unwrap_or_else(|e| {
                panic!("cannot create a temporary directory for {name}'s log: {e}")
            });
        let (stdout, stderr) = logfile::open_for_child(&dir.path().join("output.log"));
        if !command.get_envs().any(|(key, _)| key == "NO_COLOR") {
            command.env("NO_COLOR", "1");
        }
        command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command.get_program()));
        ChimeProcess {
            name,
            child: Some(child),
            status: None,
            dir,
        }
    }

    /// The process id, while it has not been waited for.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The log file: stdout and stderr interleaved.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("output.log")
    }

    /// Everything the process has written so far.
    pub fn log(&self) -> String {
        logfile::read(&self.log_path())
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        logfile::tail(&self.log_path(), lines)
    }

    /// The exit status, if the process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.status = Some(status);
                    self.child = None;
                }
            }
        }
        self.status
    }

    /// Waits until a line of the log contains `needle` and returns that
    /// line. Panics, quoting the log, if the process exits first or
    /// `timeout` passes.
    pub async fn wait_for_log_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            // Read before checking for exit: a last line before exiting counts.
            let exited = self.try_status();
            if let Some(line) = self.log().lines().find(|line| line.contains(needle)) {
                return line.to_owned();
            }
            if let Some(status) = exited {
                self.fail(&format!("exited ({status}) before logging {needle:?}"));
            }
            if Instant::now() >= deadline {
                self.fail(&format!("did not log {needle:?} within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits for the process to exit by itself (a one-shot command such as
    /// `chimectl`). Panics, quoting the log, if it outlives `timeout`.
    pub async fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return status;
            }
            if Instant::now() >= deadline {
                self.fail(&format!("did not exit within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: the process dies at once, as in a crash or OOM kill.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            self.status = child.wait().ok();
        }
    }

    /// SIGTERM, then waits for a graceful exit and returns its status.
    /// Panics, quoting the log, if the process outlives `timeout` (it is
    /// then SIGKILLed).
    pub async fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.try_status() {
            return status;
        }
        let mut child = self
            .child
            .take()
            .expect("a process without status has a child");
        match terminate(&mut child, timeout).await {
            Ok(status) => {
                self.status = Some(status);
                status
            }
            Err(reason) => self.fail(&reason),
        }
    }

    fn fail(&mut self, reason: &str) -> ! {
        self.kill9();
        panic!(
            "{} {reason}\n--- last lines of its log ({}) ---\n{}\n---",
            self.name,
            self.log_path().display(),
            self.log_tail(logfile::TAIL_LINES)
        );
    }
}

impl Drop for ChimeProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!(
                "--- last lines of {}'s log ---\n{}\n---",
                self.name,
                self.log_tail(logfile::TAIL_LINES)
            );
        }
    }
}
