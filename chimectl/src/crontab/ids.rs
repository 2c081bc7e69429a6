//! Readable job ids for imported crontab lines: `cron-` and the program
//! the line runs, with its first argument when that is a word or a path
//! (`cron-run-parts-cron.daily`, `cron-backup`), so `chimectl list` says
//! what each job does. Lines that would get the same id are numbered in
//! file order (`cron-debian-sa1`, `cron-debian-sa1-2`): the same crontab
//! gives the same ids on every import.
//!
//! The program is found the way a reader would: of the commands joined by
//! `&&`, `||` and `;`, the last that does real work (not a `test`, `[`,
//! `cd` or `command -v` guard), the first of its pipeline, without
//! environment assignments, shell keywords and redirections.

use chime_common::bounds::MAX_ID_LEN;
use std::collections::HashSet;

/// Words that guard or prepare a command rather than being its work.
const GUARDS: [&str; 16] = [
    "test", "[", "[[", "]", "]]", "cd", "command", "true", "false", ":", "exit", "type", "which",
    "hash", "sleep", "echo",
];

/// Shell keywords that come before the program itself.
const KEYWORDS: [&str; 10] = [
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!",
];

/// Programs that run the program after them (and their own flags).
const WRAPPERS: [&str; 6] = ["exec", "nice", "nohup", "ionice", "chronic", "time"];

/// Where a command list splits into simple commands.
const SEPARATORS: [&str; 9] = ["&&", "||", ";", "&", "|", "{", "}", "(", ")"];

/// Hands out ids, each once.
#[derive(Debug, Default)]
pub struct Ids {
    used: HashSet<String>,
}

impl Ids {
    /// The id for a line running `command`: its slug, numbered if taken.
    pub fn assign(&mut self, command: &str) -> String {
        let base = format!("cron-{}", slug(command));
        let mut id = base.clone();
        let mut n = 1;
        while self.used.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        self.used.insert(id.clone());
        id
    }
}

/// The readable part of an id: program and first argument, lower case,
/// of `a-z 0-9 . _ -` only, short enough to leave room for a number.
pub fn slug(command: &str) -> String {
    let words = main_command(command);
    let mut parts: Vec<&str> = Vec::new();
    if let Some(program) = words.first() {
        parts.push(basename(program));
        let argument = words.iter().skip(1).find(|w| !w.starts_with('-'));
        if let Some(argument) = argument.filter(|a| is_wordy(a)) {
            parts.push(basename(argument));
        }
    }
    let mut slug = String::new();
    for c in parts.join("-").chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '_') {
            c
        } else {
            '-'
        };
        if !(c == '-' && slug.ends_with('-')) {
            slug.push(c);
        }
    }
    // `cron-` in front and `-NNNN` behind must still fit.
    slug.truncate(MAX_ID_LEN - 16);
    let slug = slug.trim_matches(|c| c == '-' || c == '.');
    if slug.is_empty() {
        "job".to_string()
    } else {
        slug.to_string()
    }
}

/// The words of the simple command that does the line's work.
fn main_command(command: &str) -> Vec<&str> {
    let mut segments: Vec<Vec<&str>> = vec![Vec::new()];
    let mut after_pipe = false;
    for word in tokens(command) {
        if SEPARATORS.contains(&word) {
            segments.push(Vec::new());
            // The rest of a pipeline reads what its first command writes.
            after_pipe = word == "|";
            continue;
        }
        if after_pipe {
            continue;
        }
        if let Some(segment) = segments.last_mut() {
            segment.push(word);
        }
    }
    let meaningful: Vec<Vec<&str>> = segments.into_iter().map(strip).collect();
    meaningful
        .iter()
        .rev()
        .find(|words| words.first().is_some_and(|w| !GUARDS.contains(w)))
        .or_else(|| meaningful.iter().find(|words| !words.is_empty()))
        .cloned()
        .unwrap_or_default()
}

/// A simple command without its leading keywords, wrappers (with their
/// flags) and environment assignments, and without redirections anywhere.
fn strip(words: Vec<&str>) -> Vec<&str> {
    let mut out = Vec::with_capacity(words.len());
    let mut skip_target = false;
    let mut in_wrapper = false;
    for word in words {
        if skip_target {
            skip_target = false;
            continue;
        }
        if is_redirection(word) {
            // `> file` names its target in the next word; `>/dev/null` does not.
            skip_target = word
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '&')
                .trim_start_matches(['>', '<'])
                .is_empty()
                && !word.ends_with('&');
            continue;
        }
        if !out.is_empty() {
            out.push(word);
        } else if WRAPPERS.contains(&word) {
            in_wrapper = true;
        } else if in_wrapper && (word.starts_with('-') || word.bytes().all(|b| b.is_ascii_digit()))
        {
            // A wrapper's flag and its value (`nice -n 19`).
        } else if !(KEYWORDS.contains(&word) || is_assignment(word)) {
            out.push(word);
        }
    }
    out
}

/// The command's words, with `;`, `&&`, `||`, `|`, `&`, braces and
/// parentheses split off as words of their own (`cron.daily;` is two).
fn tokens(command: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for word in command.split_whitespace() {
        let mut rest = word;
        while !rest.is_empty() {
            match rest.find([';', '&', '|', '{', '}', '(', ')']) {
                // `2>&1` and `&>` are redirections, not separators.
                Some(i) if rest[..i].ends_with('>') || rest[i..].starts_with("&>") => {
                    out.push(rest);
                    rest = "";
                }
                Some(0) => {
                    let len = if rest.starts_with("&&") || rest.starts_with("||") {
                        2
                    } else {
                        1
                    };
                    out.push(&rest[..len]);
                    rest = &rest[len..];
                }
                Some(i) => {
                    out.push(&rest[..i]);
                    rest = &rest[i..];
                }
                None => {
                    out.push(rest);
                    rest = "";
                }
            }
        }
    }
    out
}

fn is_redirection(word: &str) -> bool {
    let rest = word.trim_start_matches(|c: char| c.is_ascii_digit() || c == '&');
    rest.starts_with('>') || rest.starts_with('<')
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A word worth naming a job by: a name or a path, not a number or a symbol.
fn is_wordy(word: &str) -> bool {
    let name = basename(word);
    name.chars().any(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn basename(word: &str) -> &str {
    let trimmed = word.trim_end_matches('/');
    trimmed.rsplit('/').next().unwrap_or(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_that_does_the_work_names_the_job() {
        for (command, expected) in [
            (
                "cd / && run-parts --report /etc/cron.hourly",
                "run-parts-cron.hourly",
            ),
            (
                "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }",
                "run-parts-cron.daily",
            ),
            (
                "[ -x /etc/init.d/anacron ] && if [ ! -d /run/systemd/system ]; then \
                 /usr/sbin/invoke-rc.d anacron start >/dev/null; fi",
                "invoke-rc.d-anacron",
            ),
            (
                "test -e /run/systemd/system || SERVICE_MODE=1 /sbin/e2scrub_all -A -r",
                "e2scrub_all",
            ),
            (
                "command -v debian-sa1 > /dev/null && debian-sa1 1 1",
                "debian-sa1",
            ),
            ("/usr/local/bin/backup --full", "backup"),
            ("poll-queue --max 100", "poll-queue"),
            ("report hourly", "report-hourly"),
            ("pg_dump mydb 2>&1 | gzip > /backup/db.gz", "pg_dump-mydb"),
            ("nice -n 19 /opt/Tools/Sync.SH", "sync.sh"),
            ("$HOME/bin/thing", "thing"),
            ("echo hello", "echo-hello"),
            ("!!!", "job"),
        ] {
            assert_eq!(slug(command), expected, "{command}");
        }
    }

    #[test]
    fn ids_are_numbered_in_order_and_valid() {
        let mut ids = Ids::default();
        assert_eq!(ids.assign("debian-sa1 1 1"), "cron-debian-sa1");
        assert_eq!(ids.assign("debian-sa1 60 2"), "cron-debian-sa1-2");
        assert_eq!(ids.assign("debian-sa1 1 1"), "cron-debian-sa1-3");
        let long = format!("/bin/{} arg", "x".repeat(300));
        let id = ids.assign(&long);
        assert!(
            chime_common::bounds::check_name(&id, MAX_ID_LEN).is_ok(),
            "{id}"
        );
        assert!(chime_common::bounds::check_name(&ids.assign("é ü"), MAX_ID_LEN).is_ok());
    }
}
