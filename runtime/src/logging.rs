//! The log output every long-running program (scheduler, worker) sets up
//! the same way: `RUST_LOG` filters (default `info`), text or JSON lines on
//! stdout, and colours only for a person at a terminal. A log that goes to
//! a file, a pipe or a collector (journald, Docker, Kubernetes) gets plain
//! text, and `NO_COLOR` (https://no-color.org) turns colours off anywhere.

use std::ffi::OsStr;
use std::io::IsTerminal as _;
use tracing_subscriber::EnvFilter;

/// Installs the process's log subscriber: JSON lines when `json`, else
/// text. Call once, at start-up.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let no_color = std::env::var_os("NO_COLOR");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours(
            std::io::stdout().is_terminal(),
            no_color.as_deref(),
        ));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Whether log lines are coloured: on a terminal, unless `NO_COLOR` is set
/// to anything but the empty string.
pub fn colours(stdout_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(
            colours(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colours(true, Some(OsStr::new("1"))));
        assert!(!colours(false, None));
        assert!(!colours(false, Some(OsStr::new(""))));
    }
}
