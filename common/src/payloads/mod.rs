//! The payloads of the built-in handlers, `shell` and `http`: one
//! definition of each shape, read by job validation (`jobs.put`, the HTTP
//! API, `chimectl apply`, durable submissions, a trigger's own payload)
//! and by the worker's handlers, so that a payload accepted when a job is
//! put is exactly one the worker runs, and a mistake is refused then, with
//! its field, instead of failing at the job's first firing.
//!
//! A payload of any other handler is the handler's own business: it is
//! checked only for size (`job.rs`).

pub mod http;
pub mod shell;

use crate::error::FieldError;
use serde_json::Value;

pub use http::HttpPayload;
pub use shell::ShellPayload;

/// The built-in handlers' names.
pub const BUILT_IN: [&str; 2] = [shell::HANDLER, http::HANDLER];

/// Checks `payload` (at JSON path `path`, e.g. `payload`) as handler
/// `handler` reads it: every problem of a built-in handler's payload, with
/// its path (`payload.argv`, `payload.env.FOO`); nothing for other handlers.
pub fn check(handler: &str, payload: &Value, path: &str) -> Result<(), Vec<FieldError>> {
    match handler {
        shell::HANDLER => ShellPayload::from_json(payload, path).map(drop),
        http::HANDLER => HttpPayload::from_json(payload, path).map(drop),
        _ => Ok(()),
    }
}

/// `path.key`, the path of a field inside a payload.
fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The fields of a payload object: `Ok(None)` for null (no payload),
/// an error at `path` for anything but an object; each key not in `known`
/// is refused at its path with `hint` (the shape) and a guess when a known
/// key is close.
fn object<'a>(
    payload: &'a Value,
    path: &str,
    known: &[&str],
    hint: &str,
    errors: &mut Vec<FieldError>,
) -> Option<&'a serde_json::Map<String, Value>> {
    match payload {
        Value::Object(obj) => {
            for key in obj.keys().filter(|k| !known.contains(&k.as_str())) {
                let guess = crate::suggest::closest(key, known)
                    .map(|meant| format!(" did you mean `{meant}`?"))
                    .unwrap_or_default();
                errors.push(FieldError::new(
                    at(path, key),
                    format!("unknown field;{guess} {hint}"),
                ));
            }
            Some(obj)
        }
        Value::Null => None,
        other => {
            errors.push(FieldError::new(
                path,
                format!(
                    "expected an object, found {}; {hint}",
                    crate::duration::json_kind(other)
                ),
            ));
            None
        }
    }
}

/// A present, non-null field of `obj`.
fn present<'a>(obj: Option<&'a serde_json::Map<String, Value>>, key: &str) -> Option<&'a Value> {
    obj.and_then(|o| o.get(key)).filter(|v| !v.is_null())
}

/// An object of strings (`env`, `headers`), each entry checked by `check`
/// (the key and the value; the problem, if any): every problem is reported
/// at `path.<key>`, and only right entries are kept.
fn string_map(
    value: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
    check: impl Fn(&str, &str) -> Option<String>,
) -> std::collections::BTreeMap<String, String> {
    let mut map = std::collections::BTreeMap::new();
    match value {
        None => {}
        Some(Value::Object(entries)) => {
            for (key, value) in entries {
                let problem = match value {
                    Value::String(text) => check(key, text),
                    other => Some(format!(
                        "expected a string, found {}",
                        crate::duration::json_kind(other)
                    )),
                };
                match (problem, value.as_str()) {
                    (Some(problem), _) => errors.push(FieldError::new(at(path, key), problem)),
                    (None, Some(text)) => {
                        map.insert(key.clone(), text.to_string());
                    }
                    (None, None) => {}
                }
            }
        }
        Some(other) => errors.push(FieldError::new(
            path,
            format!(
                "expected an object of strings, found {}",
                crate::duration::json_kind(other)
            ),
        )),
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_built_in_handlers_are_checked() {
        assert!(check("shell", &json!({"argv": ["true"]}), "payload").is_ok());
        assert!(check("http", &json!({"url": "https://example.com"}), "payload").is_ok());
        let errors = check("shell", &json!(null), "payload").unwrap_err();
        assert_eq!(errors[0].field, "payload.argv");
        for other in ["report", "Shell", "shell-v2"] {
            assert!(
                check(other, &json!({"cmd": 1}), "payload").is_ok(),
                "{other}"
            );
        }
    }
}
