//! A field-level diff of two job specs as JSON: which fields differ, by
//! their JSON path (`schedule.cron`, `labels.team`), with the value before
//! and after. Objects are compared field by field; anything else (arrays,
//! strings, numbers) is one value.

use serde::Serialize;
use serde_json::Value;

/// One field that differs. `None` on a side means the field is absent there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    pub field: String,
    pub from: Option<Value>,
    pub to: Option<Value>,
}

impl std::fmt::Display for FieldChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), Value::to_string);
        write!(
            f,
            "{}: {} -> {}",
            self.field,
            show(&self.from),
            show(&self.to)
        )
    }
}

/// The fields in which `to` differs from `from`, in field order.
pub fn diff(from: &Value, to: &Value) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    walk("", Some(from), Some(to), &mut changes);
    changes
}

fn walk(path: &str, from: Option<&Value>, to: Option<&Value>, out: &mut Vec<FieldChange>) {
    match (from, to) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let field = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(&field, a.get(key), b.get(key), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            field: path.to_string(),
            from: a.cloned(),
            to: b.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_fields_are_named_by_path() {
        let from = json!({"priority": 5, "schedule": {"cron": "0 * * * *", "tz": "UTC"},
                          "labels": {"team": "data"}, "payload": {"argv": ["a"]}});
        let to = json!({"priority": 7, "schedule": {"cron": "0 1 * * *", "tz": "UTC"},
                        "labels": {"env": "prod"}, "payload": {"argv": ["a", "b"]}});
        let text: Vec<String> = diff(&from, &to).iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "labels.env: (absent) -> \"prod\"",
                "labels.team: \"data\" -> (absent)",
                "payload.argv: [\"a\"] -> [\"a\",\"b\"]",
                "priority: 5 -> 7",
                "schedule.cron: \"0 * * * *\" -> \"0 1 * * *\"",
            ]
        );
        assert!(diff(&from, &from).is_empty());
    }
}
