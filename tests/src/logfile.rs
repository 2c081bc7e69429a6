//! Log files of the child processes the harness starts.
//!
//! Children write stdout and stderr to a file rather than a pipe: a pipe
//! nobody drains fills up and blocks the child, and a file can still be read
//! after the child died, which is exactly when a failing test wants its last
//! words.

use std::fs::OpenOptions;
use std::path::Path;
use std::process::Stdio;

/// How many lines of a child's log a panic message quotes.
pub(crate) const TAIL_LINES: usize = 40;

/// Opens (creating, appending) `path` and returns two handles to it, for the
/// child's stdout and stderr, so both streams interleave in one file.
pub(crate) fn open_for_child(path: &Path) -> (Stdio, Stdio) {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open log file {}: {e}", path.display()));
    let second = file
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot duplicate log file {}: {e}", path.display()));
    (Stdio::from(file), Stdio::from(second))
}

/// The whole log, lossily decoded; empty if it cannot be read.
pub(crate) fn read(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    }
}

/// The last `lines` lines of the log, for panic messages.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = read(path);
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    if all.is_empty() {
        return "(log is empty)".to_owned();
    }
    all[start..].join("\n")
}
