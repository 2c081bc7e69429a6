//! The fan-in schedule `{"after": [job ids], "within"?: DURATION}`: a job
//! that fires once every listed job has succeeded since it last fired (or
//! was put), with no time instants of its own. Here: the checks of its two
//! fields; the store keeps what counted (`scheduler/src/store/fan_in.rs`).

use crate::bounds::{check_at_most, MAX_WITHIN};
use crate::bounds::{check_name, MAX_ID_LEN};
use crate::duration::json_kind;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

/// The most jobs one `after` may wait for.
pub const MAX_AFTER: usize = 32;

/// The job ids of `after`, or every problem as (path suffix, message): the
/// suffix is `""` for the list itself or `"[i]"` for one entry.
pub(crate) fn parse_after(v: &Value) -> Result<Vec<String>, Vec<(String, String)>> {
    let Value::Array(items) = v else {
        return Err(vec![(
            String::new(),
            format!("expected an array of job ids, found {}", json_kind(v)),
        )]);
    };
    // Checked before the entries, so a hostile list of millions is refused
    // without walking it.
    if items.is_empty() || items.len() > MAX_AFTER {
        return Err(vec![(
            String::new(),
            format!("must name 1 to {MAX_AFTER} jobs, found {}", items.len()),
        )]);
    }
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("[{i}]");
        match item.as_str() {
            None => errors.push((
                at,
                format!("expected a job id string, found {}", json_kind(item)),
            )),
            Some(id) => match check_name(id, MAX_ID_LEN) {
                Err(e) => errors.push((at, e)),
                Ok(()) if !seen.insert(id) => {
                    errors.push((at, format!("names {id:?} twice; name each job once")))
                }
                Ok(()) => ids.push(id.to_string()),
            },
        }
    }
    if errors.is_empty() {
        Ok(ids)
    } else {
        Err(errors)
    }
}

/// Why a `within` is refused, or `None`: it must be longer than zero, whole
/// milliseconds (stored that way) and at most [`MAX_WITHIN`].
pub(crate) fn check_within(within: Duration) -> Option<String> {
    if within.is_zero() {
        Some("must be longer than zero".to_string())
    } else if !within.subsec_nanos().is_multiple_of(1_000_000) {
        Some(format!(
            "must be a whole number of milliseconds, found {within:?}"
        ))
    } else {
        check_at_most(within, MAX_WITHIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(v: Value) -> Vec<String> {
        parse_after(&v)
            .unwrap_err()
            .into_iter()
            .map(|(path, _)| path)
            .collect()
    }

    #[test]
    fn after_names_one_to_thirty_two_distinct_valid_ids() {
        assert_eq!(
            parse_after(&json!(["a", "b.c-d_9"])).unwrap(),
            vec!["a", "b.c-d_9"]
        );
        assert_eq!(paths(json!([])), [""]);
        let many: Vec<String> = (0..33).map(|i| format!("j{i}")).collect();
        assert_eq!(paths(json!(many)), [""]);
        assert_eq!(paths(json!("a")), [""]);
        assert_eq!(paths(json!(["a", "a"])), ["[1]"]);
        assert_eq!(paths(json!(["ok", "bad id", 5, ""])), ["[1]", "[2]", "[3]"]);
        assert_eq!(paths(json!(["x".repeat(129)])), ["[0]"]);
    }

    #[test]
    fn within_is_positive_whole_milliseconds_within_range() {
        assert!(check_within(Duration::from_secs(60)).is_none());
        assert!(check_within(MAX_WITHIN).is_none());
        assert!(check_within(Duration::ZERO).is_some());
        assert!(check_within(Duration::from_micros(1500)).is_some());
        assert!(check_within(MAX_WITHIN + Duration::from_millis(1)).is_some());
    }
}
