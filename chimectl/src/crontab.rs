//! Moving in: a crontab read as Chime jobs of the `shell` handler
//! (`chimectl import crontab`).
//!
//! Each schedule line becomes one job whose cron expression is the line's
//! own five fields (or macro), in the zone of the last `CRON_TZ=` line
//! before it, running the command with `sh -c` (or the last `SHELL=`) and
//! the environment assignments above it, as cron would. Like cron, a job
//! does not catch up on what it missed (`misfire: skip`) and runs even if
//! its last run is still going (`overlap: allow`). The id is stable: a slug
//! of the command and a hash of the schedule and command, so importing the
//! same crontab again (e.g. with `apply`) changes nothing.

use chime_common::protocol::payload_sha256;
use chime_common::{JobSpec, Limits};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The label every imported job carries, so `apply --prune -l` can own them.
pub const IMPORTED_LABEL: (&str, &str) = ("imported-from", "crontab");

/// A crontab, as jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Crontab {
    /// One job per schedule line, in the file's order.
    pub jobs: Vec<ImportedJob>,
    /// What was read but has no equivalent, said once per line.
    pub notes: Vec<String>,
}

/// One schedule line as a job.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedJob {
    /// 1-based line number.
    pub line: usize,
    /// The job as `apply` reads it (only the fields the import sets).
    pub value: Value,
    /// The same, checked.
    pub spec: JobSpec,
}

/// A line that cannot be imported (1-based line number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// What the lines above a schedule line set.
struct Context {
    tz: Option<String>,
    shell: String,
    env: BTreeMap<String, String>,
}

/// Reads a crontab (the user format: no user column). `group`, if given,
/// is every job's group. Either every job, or every line that cannot be
/// imported.
pub fn import(text: &str, group: Option<&str>) -> Result<Crontab, Vec<LineError>> {
    let mut context = Context {
        tz: None,
        shell: "/bin/sh".to_string(),
        env: BTreeMap::new(),
    };
    let mut jobs = Vec::new();
    let mut notes = Vec::new();
    let mut errors = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let error = |message: String| LineError { line, message };
        if let Some((name, value)) = assignment(text) {
            match name {
                "CRON_TZ" => context.tz = Some(value).filter(|v| !v.is_empty()),
                "MAILTO" | "MAILFROM" => notes.push(format!(
                    "line {line}: {name} ignored: Chime sends no mail; a failed firing raises \
                     an alert (chimectl history shows its output)"
                )),
                "SHELL" => context.shell = value,
                _ => {
                    context.env.insert(name.to_string(), value);
                }
            }
            continue;
        }
        match job(text, &context, group) {
            Ok((key, value)) => {
                if let Some(first) = seen.insert(key, line) {
                    errors.push(error(format!(
                        "the same schedule and command as line {first}; remove one"
                    )));
                    continue;
                }
                match JobSpec::from_json(&value, &Limits::default()) {
                    Ok(spec) => jobs.push(ImportedJob { line, value, spec }),
                    Err(problems) => errors.extend(
                        problems
                            .into_iter()
                            .map(|p| error(format!("{}: {}", p.field, p.message))),
                    ),
                }
            }
            Err(message) => errors.push(error(message)),
        }
    }
    if errors.is_empty() {
        Ok(Crontab { jobs, notes })
    } else {
        Err(errors)
    }
}

/// `NAME=value` (the value optionally quoted), as cron reads environment
/// lines; `None` for a schedule line.
fn assignment(text: &str) -> Option<(&str, String)> {
    let (name, value) = text.split_once('=')?;
    let name = name.trim();
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_')
        || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
        .unwrap_or(value);
    Some((name, unquoted.to_string()))
}

/// A schedule line as a job; also its key (schedule and command), which
/// two lines must not share.
fn job(text: &str, context: &Context, group: Option<&str>) -> Result<(String, Value), String> {
    let (schedule, command) = if text.starts_with('@') {
        let (name, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        if name == "@reboot" {
            return Err(
                "@reboot cannot be imported: a Chime job runs on a schedule, not when a \
                 machine starts (run it from the machine's own init system)"
                    .into(),
            );
        }
        (name.to_string(), rest.trim())
    } else {
        let (fields, rest) = split_fields(text, 5).ok_or_else(|| {
            "expected five time fields and a command, an environment line NAME=value, \
             or a macro such as @daily"
                .to_string()
        })?;
        (fields.join(" "), rest)
    };
    if command.is_empty() {
        return Err("the line has a schedule but no command".into());
    }
    let command = unescape_percent(command)?;
    let key = format!("{schedule}\n{command}");
    let mut schedule_json = json!({"cron": schedule});
    if let Some(tz) = &context.tz {
        schedule_json["tz"] = json!(tz);
    }
    let mut payload = json!({"argv": [context.shell, "-c", command]});
    if !context.env.is_empty() {
        payload["env"] = json!(context.env);
    }
    let mut value = json!({
        "id": id(&key, &command),
        "schedule": schedule_json,
        "handler": "shell",
        "payload": payload,
        "misfire": "skip",
        "overlap": "allow",
        "labels": {IMPORTED_LABEL.0: IMPORTED_LABEL.1},
    });
    if let Some(group) = group {
        value["group"] = json!(group);
    }
    Ok((key, value))
}

/// The first `n` whitespace-separated fields and the rest of the line as
/// written (a command keeps its own spacing).
fn split_fields(text: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    let mut fields = Vec::with_capacity(n);
    let mut rest = text;
    for _ in 0..n {
        let trimmed = rest.trim_start();
        let end = trimmed.find(char::is_whitespace)?;
        fields.push(&trimmed[..end]);
        rest = &trimmed[end..];
    }
    Some((fields, rest.trim()))
}

/// Cron turns an unescaped `%` into a newline and feeds what follows to the
/// command's standard input, which a Chime job has not: refused; `\%` is a
/// plain `%`.
fn unescape_percent(command: &str) -> Result<String, String> {
    let mut out = String::with_capacity(command.len());
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                out.push('%');
                chars.next();
            }
            '%' => {
                return Err(
                    "the command has an unescaped %, which cron turns into standard \
                     input; a Chime job has none: write \\% for a literal %, or move the \
                     input into a script"
                        .into(),
                )
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// `cron-<slug of the program>-<hash>`: readable, and the same for the same
/// schedule and command.
fn id(key: &str, command: &str) -> String {
    let program = command
        .split_whitespace()
        .find(|word| !word.contains('='))
        .unwrap_or("job");
    let name = program.rsplit('/').next().unwrap_or(program);
    let mut slug: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    slug.truncate(40);
    let slug = slug.trim_matches('-');
    let slug = if slug.is_empty() { "job" } else { slug };
    let hash = payload_sha256(key.as_bytes());
    format!("cron-{slug}-{}", &hash[..10])
}

/// The jobs as the one YAML list `chimectl apply` reads.
pub fn to_yaml(crontab: &Crontab) -> Result<String, String> {
    let jobs: Vec<&Value> = crontab.jobs.iter().map(|job| &job.value).collect();
    serde_yaml_ng::to_string(&jobs).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_lines_are_told_from_schedule_lines() {
        assert_eq!(
            assignment("CRON_TZ=Europe/Berlin"),
            Some(("CRON_TZ", "Europe/Berlin".into()))
        );
        assert_eq!(assignment("FOO = \"a b\""), Some(("FOO", "a b".into())));
        assert_eq!(assignment("*/5 * * * * A=1 run"), None);
        assert_eq!(assignment("0 5 * * * run --x=1"), None);
    }

    #[test]
    fn a_command_keeps_its_spacing_and_escaped_percent() {
        let (fields, rest) = split_fields("0  5 * * 1-5   echo  'a  b' \\% done", 5).unwrap();
        assert_eq!(fields, ["0", "5", "*", "*", "1-5"]);
        assert_eq!(rest, "echo  'a  b' \\% done");
        assert_eq!(unescape_percent(rest).unwrap(), "echo  'a  b' % done");
        assert!(unescape_percent("date +%Y").is_err());
        assert_eq!(split_fields("0 5 * *", 5), None);
    }

    #[test]
    fn ids_are_stable_readable_and_valid() {
        let a = id("0 5 * * *\n/usr/bin/backup --all", "/usr/bin/backup --all");
        assert_eq!(
            a,
            id("0 5 * * *\n/usr/bin/backup --all", "/usr/bin/backup --all")
        );
        assert!(a.starts_with("cron-backup-"), "{a}");
        assert_ne!(
            a,
            id("0 6 * * *\n/usr/bin/backup --all", "/usr/bin/backup --all")
        );
        assert!(chime_common::bounds::check_name(&id("x\n!!!", "!!!"), 128).is_ok());
    }

    #[test]
    fn reboot_and_unknown_lines_are_refused_naming_the_line() {
        let errors = import("# c\n@reboot /bin/start\nnonsense\n0 5 * * *\n", None).unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [2, 3, 4], "{errors:?}");
        assert!(errors[0].to_string().contains("@reboot"), "{}", errors[0]);
        let bad = import("61 * * * * run\n", None).unwrap_err();
        assert!(bad[0].message.starts_with("schedule.cron"), "{bad:?}");
        let twice = import("0 5 * * * run\n0 5 * * * run\n", None).unwrap_err();
        assert!(twice[0].message.contains("line 1"), "{twice:?}");
    }
}
