//! A job's daylight-saving policy: the `dst` field, `{"gap": "shift" | "skip",
//! "repeat": "first" | "both"}`.
//!
//! Absent (or a key of it absent), the v1 rule decides by the hour field:
//! fixed hours shift and fire the first occurrence only, `*` or step hours
//! skip and fire both (see `zone.rs`). Writing the policy makes the choice
//! explicit, whatever the hour field says.

use crate::duration::json_kind;
use crate::error::FieldError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a local time inside a spring-forward gap does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Gap {
    /// Fires at the end of the gap (the transition instant).
    Shift,
    /// Does not fire.
    Skip,
}

/// What a local time repeated at fall-back does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Repeat {
    /// Fires at its first occurrence only.
    First,
    /// Fires at both occurrences.
    Both,
}

/// The `dst` job field; a `None` part follows the v1 rule.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema,
)]
pub struct DstPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<Gap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<Repeat>,
}

/// A policy with both parts decided, as the search applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DstRule {
    pub(crate) gap: Gap,
    pub(crate) repeat: Repeat,
}

/// Why an instant is not simply its local time once: what `jobs.preview`
/// marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DstMark {
    /// The local time fell in a spring-forward gap; this is the gap's end.
    Shifted,
    /// The local time happens twice at fall-back and fires both times; this
    /// is one of the two.
    Repeated,
}

impl DstMark {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DstMark::Shifted => "shifted",
            DstMark::Repeated => "repeated",
        }
    }
}

impl DstPolicy {
    /// Parses the `dst` object; errors name `{path}.gap`, `{path}.repeat`,
    /// an unknown key, or `path` itself.
    pub fn from_json(value: &Value, path: &str) -> Result<DstPolicy, Vec<FieldError>> {
        let Some(obj) = value.as_object() else {
            return Err(vec![FieldError::new(
                path,
                format!(
                    "expected an object such as {{\"gap\": \"skip\", \"repeat\": \"both\"}}, found {}",
                    json_kind(value)
                ),
            )]);
        };
        let mut errors = Vec::new();
        for key in obj
            .keys()
            .filter(|k| !matches!(k.as_str(), "gap" | "repeat"))
        {
            errors.push(FieldError::new(
                format!("{path}.{key}"),
                "unknown field; dst has \"gap\" (shift | skip) and \"repeat\" (first | both)",
            ));
        }
        let mut choice = |key: &str, names: [&str; 2]| -> Option<usize> {
            let v = obj.get(key).filter(|v| !v.is_null())?;
            let found = v.as_str().and_then(|s| names.iter().position(|n| *n == s));
            if found.is_none() {
                errors.push(FieldError::new(
                    format!("{path}.{key}"),
                    format!("must be \"{}\" or \"{}\", found {v}", names[0], names[1]),
                ));
            }
            found
        };
        let gap = choice("gap", ["shift", "skip"]).map(|i| [Gap::Shift, Gap::Skip][i]);
        let repeat = choice("repeat", ["first", "both"]).map(|i| [Repeat::First, Repeat::Both][i]);
        if errors.is_empty() {
            Ok(DstPolicy { gap, repeat })
        } else {
            Err(errors)
        }
    }

    /// The policy with the v1 rule filling what is not written.
    pub(crate) fn rule(&self, fixed_hours: bool) -> DstRule {
        let (gap, repeat) = if fixed_hours {
            (Gap::Shift, Repeat::First)
        } else {
            (Gap::Skip, Repeat::Both)
        };
        DstRule {
            gap: self.gap.unwrap_or(gap),
            repeat: self.repeat.unwrap_or(repeat),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policies_parse_and_round_trip() {
        let p = DstPolicy::from_json(&json!({"gap": "skip", "repeat": "both"}), "dst").unwrap();
        assert_eq!(p.gap, Some(Gap::Skip));
        assert_eq!(p.repeat, Some(Repeat::Both));
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            json!({"gap": "skip", "repeat": "both"})
        );
        let half = DstPolicy::from_json(&json!({"repeat": "first"}), "dst").unwrap();
        assert_eq!(
            serde_json::to_value(half).unwrap(),
            json!({"repeat": "first"})
        );
    }

    #[test]
    fn bad_policies_name_the_key() {
        let fields = |v: Value| -> Vec<String> {
            DstPolicy::from_json(&v, "dst")
                .unwrap_err()
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        assert_eq!(fields(json!("skip")), ["dst"]);
        assert_eq!(
            fields(json!({"gap": "jump", "repeat": 2, "fold": 1})),
            ["dst.fold", "dst.gap", "dst.repeat"]
        );
    }

    #[test]
    fn unwritten_parts_follow_the_v1_rule() {
        let none = DstPolicy::default();
        assert_eq!(
            none.rule(true),
            DstRule {
                gap: Gap::Shift,
                repeat: Repeat::First
            }
        );
        assert_eq!(
            none.rule(false),
            DstRule {
                gap: Gap::Skip,
                repeat: Repeat::Both
            }
        );
        let gap_only = DstPolicy {
            gap: Some(Gap::Skip),
            repeat: None,
        };
        assert_eq!(gap_only.rule(true).repeat, Repeat::First);
        assert_eq!(gap_only.rule(true).gap, Gap::Skip);
    }
}
