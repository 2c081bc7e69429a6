//! Moving in: a crontab read as Chime jobs of the `shell` handler
//! (`chimectl import crontab`).
//!
//! Each schedule line becomes one job whose cron expression is the line's
//! own five fields (or macro), in the zone of the last `CRON_TZ=` line
//! before it (else the zone the import is given: `--tz` or the machine's),
//! running the command with `sh -c` (or the last `SHELL=`) and the
//! environment assignments above it, `PATH` among them, as cron would. A
//! system crontab (`--system`: `/etc/crontab`, `/etc/cron.d/*`) has the
//! user after the time fields; it is kept as the label `cron-user`, since
//! a job runs as its worker's user. Like cron, a job does not catch up on
//! what it missed (`misfire: skip`) and runs even if its last run is still
//! going (`overlap: allow`).
//!
//! A line that cannot become a job as cron meant it is refused naming its
//! line: `@reboot`, cron's `%` standard input, and a line whose sixth field
//! is a user name when `--system` is not given, which would otherwise run
//! the user name as a command.

mod fields;
pub mod host;
mod ids;

use chime_common::{JobSpec, Limits};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// The label every imported job carries, so `apply --prune -l` can own them.
pub const IMPORTED_LABEL: (&str, &str) = ("imported-from", "crontab");

/// The label that keeps a system crontab line's user.
pub const USER_LABEL: &str = "cron-user";

/// How to read a crontab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Every job's group (the default group when `None`).
    pub group: Option<String>,
    /// A system crontab: a user column after the time fields.
    pub system: bool,
    /// The zone of lines without a `CRON_TZ=` above them.
    pub zone: String,
    /// The jobs start paused.
    pub paused: bool,
    /// Names that, right after the time fields of a user crontab, mark a
    /// system crontab line ([`host::known_users`]).
    pub known_users: BTreeSet<String>,
}

impl Options {
    /// A user crontab in `zone`, every other option off, knowing the
    /// [`host::TYPICAL_USERS`] only.
    pub fn in_zone(zone: &str) -> Options {
        Options {
            group: None,
            system: false,
            zone: zone.to_string(),
            paused: false,
            known_users: host::TYPICAL_USERS.iter().map(|u| u.to_string()).collect(),
        }
    }
}

/// A crontab, as jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Crontab {
    /// One job per schedule line, in the file's order.
    pub jobs: Vec<ImportedJob>,
    /// What was read but has no equivalent, or works differently, said once.
    pub notes: Vec<String>,
    /// The schedule lines with no `CRON_TZ=` above them, which run in
    /// [`Options::zone`].
    pub in_default_zone: Vec<usize>,
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

/// One schedule line, read.
struct Line<'a> {
    schedule: String,
    user: Option<&'a str>,
    command: String,
}

/// Reads a crontab. Either every job, or every line that cannot be imported.
pub fn import(text: &str, options: &Options) -> Result<Crontab, Vec<LineError>> {
    let mut context = Context {
        tz: None,
        shell: "/bin/sh".to_string(),
        env: BTreeMap::new(),
    };
    let mut jobs = Vec::new();
    let mut notes = Vec::new();
    let mut errors = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ids = ids::Ids::default();
    let mut without_path = Vec::new();
    let mut in_default_zone = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if let Some((name, value)) = fields::assignment(text) {
            match name {
                "CRON_TZ" => context.tz = Some(value).filter(|v| !v.is_empty()),
                "MAILTO" | "MAILFROM" => notes.push(format!(
                    "line {line}: {name} ignored: Chime sends no mail; a failed firing raises \
                     an alert (chimectl alerts), and chimectl logs FIRING_ID shows its output"
                )),
                "SHELL" => context.shell = value,
                _ => {
                    context.env.insert(name.to_string(), value);
                }
            }
            continue;
        }
        let error = |message: String| LineError { line, message };
        let parsed = match read_line(text, options) {
            Ok(parsed) => parsed,
            Err(message) => {
                errors.push(error(message));
                continue;
            }
        };
        let key = format!(
            "{}\n{}\n{}",
            parsed.schedule,
            parsed.user.unwrap_or(""),
            parsed.command
        );
        if let Some(first) = seen.insert(key, line) {
            errors.push(error(format!(
                "the same schedule and command as line {first}; remove one"
            )));
            continue;
        }
        if !context.env.contains_key("PATH") {
            without_path.push(line);
        }
        if context.tz.is_none() {
            in_default_zone.push(line);
        }
        let value = job(&parsed, &context, options, ids.assign(&parsed.command));
        match JobSpec::from_json(&value, &Limits::default()) {
            Ok(spec) => jobs.push(ImportedJob { line, value, spec }),
            Err(problems) => errors.extend(
                problems
                    .into_iter()
                    .map(|p| error(format!("{}: {}", p.field, p.message))),
            ),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    notes.extend(path_note(&without_path));
    notes.extend(user_note(&jobs));
    Ok(Crontab {
        jobs,
        notes,
        in_default_zone,
    })
}

/// The schedule, user and command of a schedule line, or why it is refused.
fn read_line<'a>(text: &'a str, options: &Options) -> Result<Line<'a>, String> {
    let (schedule, rest) = fields::schedule(text)?;
    let (first, after) = fields::first_word(rest);
    let (user, command) = if options.system {
        if !fields::is_user_name(first) {
            return Err(format!(
                "expected the user to run as after the time fields (a system crontab), \
                 found {first:?}"
            ));
        }
        (Some(first), after)
    } else {
        if options.known_users.contains(first) && !after.is_empty() {
            return Err(format!(
                "{first:?} after the time fields is a user name, so this is a system crontab \
                 line (/etc/crontab, /etc/cron.d/*): import the file with --system (if \
                 {first:?} is the program to run, write its path instead)"
            ));
        }
        (None, rest)
    };
    if command.is_empty() {
        return Err("the line has a schedule but no command".into());
    }
    Ok(Line {
        schedule,
        user,
        command: fields::unescape_percent(command)?,
    })
}

/// The job of one schedule line.
fn job(line: &Line<'_>, context: &Context, options: &Options, id: String) -> Value {
    let zone = context.tz.as_deref().unwrap_or(&options.zone);
    let mut payload = json!({"argv": [context.shell, "-c", line.command]});
    if !context.env.is_empty() {
        payload["env"] = json!(context.env);
    }
    let mut labels = json!({IMPORTED_LABEL.0: IMPORTED_LABEL.1});
    if let Some(user) = line.user {
        labels[USER_LABEL] = json!(user);
    }
    let mut value = json!({
        "id": id,
        "schedule": {"cron": line.schedule, "tz": zone},
        "handler": "shell",
        "payload": payload,
        "misfire": "skip",
        "overlap": "allow",
        "labels": labels,
    });
    if let Some(group) = &options.group {
        value["group"] = json!(group);
    }
    if options.paused {
        value["paused"] = json!(true);
    }
    value
}

/// Cron runs a line without `PATH=` above it with `/usr/bin:/bin`; a job
/// runs with its worker's `PATH`.
fn path_note(lines: &[usize]) -> Option<String> {
    let first = lines.first()?;
    let more = match lines.len() - 1 {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "line {first}{more}: no PATH= above it: the command runs with the worker's PATH \
         (cron's would be /usr/bin:/bin); add a PATH= line to fix it"
    ))
}

/// A job runs as its worker's user, not as the user a system crontab names.
fn user_note(jobs: &[ImportedJob]) -> Option<String> {
    let users: BTreeSet<&str> = jobs
        .iter()
        .filter_map(|j| j.spec.labels.get(USER_LABEL).map(String::as_str))
        .collect();
    if users.is_empty() {
        return None;
    }
    let users: Vec<&str> = users.into_iter().collect();
    Some(format!(
        "cron ran these lines as {}; a job runs as its worker's user (the label {USER_LABEL} \
         keeps the name; run the group's workers as that user, or select them by it)",
        users.join(", ")
    ))
}

/// The jobs as the one YAML list `chimectl apply` reads.
pub fn to_yaml(crontab: &Crontab) -> Result<String, String> {
    let jobs: Vec<&Value> = crontab.jobs.iter().map(|job| &job.value).collect();
    serde_yaml_ng::to_string(&jobs).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc() -> Options {
        Options::in_zone("UTC")
    }

    #[test]
    fn reboot_and_unknown_lines_are_refused_naming_the_line() {
        let errors = import("# c\n@reboot /bin/start\nnonsense\n0 5 * * *\n", &utc()).unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [2, 3, 4], "{errors:?}");
        assert!(
            errors[0].to_string().starts_with("line 2: @reboot"),
            "{}",
            errors[0]
        );
        let bad = import("61 * * * * run\n", &utc()).unwrap_err();
        assert!(bad[0].message.starts_with("schedule.cron"), "{bad:?}");
        let twice = import("0 5 * * * run\n0 5 * * * run\n", &utc()).unwrap_err();
        assert!(twice[0].message.contains("line 1"), "{twice:?}");
    }

    #[test]
    fn a_system_line_without_system_is_refused_and_with_it_keeps_the_user() {
        let line =
            "SHELL=/bin/sh\n17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly\n";
        let errors = import(line, &utc()).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0]
                .to_string()
                .starts_with("line 2: \"root\" after the time fields is a user name"),
            "{}",
            errors[0]
        );
        assert!(errors[0].message.contains("--system"), "{}", errors[0]);
        // A lone word that is also a user name is a command.
        assert!(import("0 5 * * * root\n", &utc()).is_ok());

        let system = Options {
            system: true,
            paused: true,
            ..Options::in_zone("Europe/Berlin")
        };
        let imported = import(line, &system).expect("imports");
        let spec = &imported.jobs[0].spec;
        assert_eq!(spec.id, "cron-run-parts-cron.hourly");
        assert_eq!(
            spec.labels.get(USER_LABEL).map(String::as_str),
            Some("root")
        );
        assert_eq!(
            spec.payload["argv"],
            json!([
                "/bin/sh",
                "-c",
                "cd / && run-parts --report /etc/cron.hourly"
            ])
        );
        assert!(spec.paused);
        assert_eq!(imported.jobs[0].value["schedule"]["tz"], "Europe/Berlin");
        assert!(
            imported.notes.iter().any(|n| n.contains("as root")),
            "{:?}",
            imported.notes
        );
        let bad = import("0 5 * * * /bin/true\n", &system).unwrap_err();
        assert!(bad[0].message.contains("expected the user"), "{bad:?}");
    }
}
