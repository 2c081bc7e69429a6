//! Ending child processes gracefully, with a bound.
//!
//! A graceful stop is itself behaviour under test (a scheduler finishing its
//! pass, a worker draining), so it gets a deadline: a child that ignores
//! SIGTERM fails the test instead of hanging it.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Sends SIGTERM and polls until the child exits; SIGKILLs it and reports
/// an error if it outlives `timeout`.
pub(crate) async fn terminate(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pids fit in i32"));
    if let Ok(Some(status)) = child.try_wait() {
        return Ok(status);
    }
    // ESRCH means it exited in between; try_wait below collects it.
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "did not exit within {timeout:?} of SIGTERM (killed with SIGKILL)"
                ));
            }
            Err(e) => return Err(format!("could not be waited for: {e}")),
        }
    }
}
