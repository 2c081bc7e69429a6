//! The `shell` handler's payload: `{"argv": ["program", "arg", …],
//! "env"?: {"NAME": "value"}, "cwd"?: "dir"}`, and the variables every
//! command sees besides its own.
//!
//! No shell is interposed: `argv[0]` is the program, found on `PATH` unless
//! it is a path. The rules are those the operating system sets for a child
//! process (no NUL byte anywhere, no `=` in a variable's name), so a payload
//! that passes them starts, or fails only for what is on the worker's host
//! (a missing program or directory).

use super::{at, object, present, string_map};
use crate::duration::json_kind;
use crate::error::FieldError;
use serde_json::Value;
use std::collections::BTreeMap;

/// The handler's name.
pub const HANDLER: &str = "shell";

/// The most items `argv` may hold.
pub const MAX_ARGV: usize = 256;

/// The firing's id (`<job id>@<scheduled ms>#<attempt>`).
pub const ENV_FIRING_ID: &str = "CHIME_FIRING_ID";
/// The job's id.
pub const ENV_JOB_ID: &str = "CHIME_JOB_ID";
/// The firing's scheduled instant, RFC 3339 with milliseconds, UTC.
pub const ENV_SCHEDULED_AT: &str = "CHIME_SCHEDULED_AT";
/// The attempt, 1, 2, ….
pub const ENV_ATTEMPT: &str = "CHIME_ATTEMPT";
/// A sharded job's shard, 0…N-1 (set only for a sharded job).
pub const ENV_SHARD: &str = "CHIME_SHARD";
/// A sharded job's shard count N (set only for a sharded job).
pub const ENV_SHARDS: &str = "CHIME_SHARDS";

/// The variables the worker sets for each firing; a payload's `env` may not
/// name them, since the worker's value would silently win.
pub const FIRING_ENV: [&str; 6] = [
    ENV_FIRING_ID,
    ENV_JOB_ID,
    ENV_SCHEDULED_AT,
    ENV_ATTEMPT,
    ENV_SHARD,
    ENV_SHARDS,
];

/// The payload's fields.
pub const FIELDS: [&str; 3] = ["argv", "env", "cwd"];

/// The shape, for messages.
pub const USAGE: &str = r#"a shell payload is {"argv": ["program", "arg", ...], "env"?: {"NAME": "value"}, "cwd"?: "dir"}"#;

/// A `shell` payload, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPayload {
    /// The program and its arguments: 1 to [`MAX_ARGV`] strings, the first
    /// not empty.
    pub argv: Vec<String>,
    /// Variables added to the command's environment.
    pub env: BTreeMap<String, String>,
    /// The directory the command runs in (the worker's own when absent).
    pub cwd: Option<String>,
}

impl ShellPayload {
    /// Reads the payload at JSON path `path`, reporting every problem with
    /// its path (`payload.argv[0]`, `payload.env.FOO`). `null` is a payload
    /// without `argv`.
    pub fn from_json(payload: &Value, path: &str) -> Result<ShellPayload, Vec<FieldError>> {
        let mut errors = Vec::new();
        let obj = object(payload, path, &FIELDS, USAGE, &mut errors);
        if !payload.is_object() && !payload.is_null() {
            return Err(errors);
        }
        let argv = argv(present(obj, "argv"), &at(path, "argv"), &mut errors);
        let env = string_map(
            present(obj, "env"),
            &at(path, "env"),
            &mut errors,
            env_problem,
        );
        let cwd = match present(obj, "cwd") {
            None => None,
            Some(Value::String(dir)) if !dir.is_empty() && !dir.contains('\0') => Some(dir.clone()),
            Some(Value::String(_)) => {
                errors.push(FieldError::new(
                    at(path, "cwd"),
                    "must be a directory: not empty, no NUL byte",
                ));
                None
            }
            Some(other) => {
                errors.push(FieldError::new(
                    at(path, "cwd"),
                    format!(
                        "expected a directory path string, found {}",
                        json_kind(other)
                    ),
                ));
                None
            }
        };
        match argv {
            Some(argv) if errors.is_empty() => Ok(ShellPayload { argv, env, cwd }),
            _ => Err(errors),
        }
    }
}

/// `argv`: 1 to [`MAX_ARGV`] strings without NUL, the first not empty.
fn argv(value: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) -> Option<Vec<String>> {
    let example = r#"e.g. ["/usr/local/bin/report", "--daily"]; no shell is interposed, so a command line runs as ["sh", "-c", "..."]"#;
    let items = match value {
        None => {
            errors.push(FieldError::new(
                path,
                format!("is required: the program and its arguments, {example}"),
            ));
            return None;
        }
        Some(Value::Array(items)) if (1..=MAX_ARGV).contains(&items.len()) => items,
        Some(Value::Array(items)) => {
            errors.push(FieldError::new(
                path,
                format!(
                    "must hold 1 to {MAX_ARGV} strings, found {}; {example}",
                    items.len()
                ),
            ));
            return None;
        }
        Some(other) => {
            errors.push(FieldError::new(
                path,
                format!(
                    "expected a list of strings, found {}; {example}",
                    json_kind(other)
                ),
            ));
            return None;
        }
    };
    let before = errors.len();
    let mut argv = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("{path}[{i}]");
        match item {
            Value::String(s) if i == 0 && s.is_empty() => {
                errors.push(FieldError::new(field, "the program must not be empty"))
            }
            Value::String(s) if s.contains('\0') => {
                errors.push(FieldError::new(field, "must not contain a NUL byte"))
            }
            Value::String(s) => argv.push(s.clone()),
            other => errors.push(FieldError::new(
                field,
                format!("expected a string, found {}", json_kind(other)),
            )),
        }
    }
    (errors.len() == before).then_some(argv)
}

/// What is wrong with one `env` entry, if anything.
fn env_problem(name: &str, value: &str) -> Option<String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        Some("a variable's name must not be empty nor contain = or a NUL byte".into())
    } else if FIRING_ENV.contains(&name) {
        Some(format!(
            "is set by the worker for each firing ({}); choose another name",
            FIRING_ENV.join(", ")
        ))
    } else if value.contains('\0') {
        Some("must not contain a NUL byte".into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(payload: Value) -> Vec<String> {
        match ShellPayload::from_json(&payload, "payload") {
            Ok(p) => panic!("{payload} accepted as {p:?}"),
            Err(errors) => errors.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn a_full_payload_is_read() {
        let p = ShellPayload::from_json(
            &json!({"argv": ["sh", "-c", "echo $X"], "env": {"X": "1", "EMPTY": ""}, "cwd": "/tmp"}),
            "payload",
        )
        .unwrap();
        assert_eq!(p.argv, ["sh", "-c", "echo $X"]);
        assert_eq!(p.env.get("X").map(String::as_str), Some("1"));
        assert_eq!(p.env.get("EMPTY").map(String::as_str), Some(""));
        assert_eq!(p.cwd.as_deref(), Some("/tmp"));
        let p = ShellPayload::from_json(
            &json!({"argv": ["true"], "env": null, "cwd": null}),
            "payload",
        )
        .unwrap();
        assert!(p.env.is_empty() && p.cwd.is_none());
    }

    #[test]
    fn argv_is_required_and_bounded() {
        assert_eq!(fields(json!(null)), ["payload.argv"]);
        assert_eq!(fields(json!({})), ["payload.argv"]);
        assert_eq!(fields(json!({"argv": []})), ["payload.argv"]);
        assert_eq!(fields(json!({"argv": "ls -l"})), ["payload.argv"]);
        assert_eq!(
            fields(json!({"argv": vec!["x"; MAX_ARGV + 1]})),
            ["payload.argv"]
        );
        assert!(ShellPayload::from_json(&json!({"argv": vec!["x"; MAX_ARGV]}), "payload").is_ok());
        assert_eq!(fields(json!({"argv": [""]})), ["payload.argv[0]"]);
        assert_eq!(
            fields(json!({"argv": ["ls", 1, "a\u{0}b", null]})),
            ["payload.argv[1]", "payload.argv[2]", "payload.argv[3]"]
        );
        // An empty argument after the program is an argument like any other.
        assert!(ShellPayload::from_json(&json!({"argv": ["printf", ""]}), "payload").is_ok());
    }

    #[test]
    fn a_payload_that_is_not_an_object_names_the_payload() {
        for bad in [json!("ls -l"), json!(["ls"]), json!(3), json!(true)] {
            let errors = ShellPayload::from_json(&bad, "payload").unwrap_err();
            assert_eq!(errors.len(), 1, "{bad}");
            assert_eq!(errors[0].field, "payload", "{bad}");
            assert!(errors[0].message.contains(r#"{"argv""#), "{}", errors[0]);
        }
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let errors = ShellPayload::from_json(&json!({"cmd": "ls -l"}), "payload").unwrap_err();
        let f: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(f, ["payload.cmd", "payload.argv"]);
        assert!(errors[0].message.contains(USAGE), "{}", errors[0]);
        assert!(
            errors[1].message.contains(r#"["sh", "-c", "..."]"#),
            "{}",
            errors[1]
        );
        let errors =
            ShellPayload::from_json(&json!({"argv": ["ls"], "environment": {}}), "payload")
                .unwrap_err();
        assert_eq!(errors[0].field, "payload.environment");
        let errors = ShellPayload::from_json(&json!({"argv": ["ls"], "args": ["-l"]}), "payload")
            .unwrap_err();
        assert!(
            errors[0].message.contains("did you mean `argv`?"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn env_entries_are_checked_by_name() {
        assert_eq!(
            fields(json!({"argv": ["ls"], "env": {"FOO": 1, "A=B": "x", "": "y", "OK": "z"}})),
            ["payload.env.", "payload.env.A=B", "payload.env.FOO"]
        );
        assert_eq!(
            fields(json!({"argv": ["ls"], "env": ["FOO=1"]})),
            ["payload.env"]
        );
        assert_eq!(
            fields(json!({"argv": ["ls"], "env": {"V": "a\u{0}"}})),
            ["payload.env.V"]
        );
        let errors = ShellPayload::from_json(
            &json!({"argv": ["ls"], "env": {"CHIME_JOB_ID": "x"}}),
            "payload",
        )
        .unwrap_err();
        assert_eq!(errors[0].field, "payload.env.CHIME_JOB_ID");
        assert!(
            errors[0].message.contains("set by the worker"),
            "{}",
            errors[0]
        );
    }

    proptest::proptest! {
        /// Any strings at all are read without panicking; what is accepted
        /// is kept whole and is what the operating system can take.
        #[test]
        fn hostile_strings_are_refused_or_kept_whole(
            argv in proptest::collection::vec(".{0,12}", 0..4),
            name in ".{0,8}",
            value in ".{0,12}",
            cwd in ".{0,12}",
        ) {
            let payload = json!({"argv": argv, "env": {name.clone(): value.clone()}, "cwd": cwd});
            match ShellPayload::from_json(&payload, "payload") {
                Ok(p) => {
                    proptest::prop_assert_eq!(&p.argv, &argv);
                    proptest::prop_assert!(!argv[0].is_empty());
                    proptest::prop_assert!(argv.iter().all(|a| !a.contains('\0')));
                    proptest::prop_assert!(!name.is_empty() && !name.contains('='));
                    proptest::prop_assert_eq!(p.env.get(&name), Some(&value));
                    proptest::prop_assert_eq!(p.cwd, Some(cwd));
                }
                Err(errors) => {
                    proptest::prop_assert!(!errors.is_empty());
                    proptest::prop_assert!(errors.iter().all(|e| e.field.starts_with("payload.")));
                }
            }
        }
    }

    #[test]
    fn cwd_is_a_non_empty_string() {
        for bad in [json!(""), json!(5), json!(["/tmp"]), json!("/t\u{0}")] {
            assert_eq!(fields(json!({"argv": ["ls"], "cwd": bad})), ["payload.cwd"]);
        }
    }
}
