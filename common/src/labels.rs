//! Job labels (CONTRACT.md v1.1, "New job fields") and the selectors that
//! choose jobs by them (`jobs.list`, `jobs.pause`, `jobs.resume`, `chimectl
//! -l`).
//!
//! Selectors use the syntax of Kubernetes label selectors:
//! `team=data,env!=dev,critical,!legacy,tier in (a,b),zone notin (x)`.
//! Requirements are joined by commas and must all hold. `k=v` and `k==v`
//! hold when label `k` is `v`; `k!=v` when it is absent or another value;
//! `k` when the label is present; `!k` when it is absent; `k in (a,b)` when
//! it is one of the values; `k notin (a,b)` when it is absent or none of them.
//!
//! The parser is written here rather than taken from a crate: the one Rust
//! crate for this syntax (`simple-selectors`, last released 2018) evaluates
//! a selector against one map instead of returning its requirements, and
//! the store needs the requirements to select in SQL, where paging happens;
//! `kube`'s selector types come with the whole Kubernetes API and parse no
//! text. The parser is strict: anything it does not understand is refused
//! with the position and what was expected, never read loosely.

use crate::duration::json_kind;
use crate::error::FieldError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// A job's labels, by key.
pub type Labels = BTreeMap<String, String>;

/// The most labels a job may carry.
pub const MAX_LABELS: usize = 32;
/// The longest label key.
pub const MAX_KEY_LEN: usize = 63;
/// The longest label value, in characters.
pub const MAX_VALUE_LEN: usize = 256;
/// The most requirements one selector may hold.
pub const MAX_REQUIREMENTS: usize = 32;
/// The most values of one `in` / `notin` list.
pub const MAX_SET_VALUES: usize = 64;
/// The longest selector text, in bytes.
pub const MAX_SELECTOR_LEN: usize = 8 * 1024;

/// Checks a label key: 1 to 63 of `a-z 0-9 . _ / -`.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "a label key must be 1 to {MAX_KEY_LEN} characters, found {}",
            key.chars().count()
        ));
    }
    match key.chars().find(|c| !is_key_char(*c)) {
        Some(c) => Err(format!(
            "{c:?} is not allowed in label key {key:?}; use only a-z 0-9 . _ / -"
        )),
        None => Ok(()),
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '/' | '-')
}

/// Checks a label value: 0 to 256 characters.
pub fn check_value(value: &str) -> Result<(), String> {
    let n = value.chars().count();
    if n > MAX_VALUE_LEN {
        return Err(format!(
            "a label value must be at most {MAX_VALUE_LEN} characters, found {n}"
        ));
    }
    Ok(())
}

/// Reads the `labels` field of a spec (at JSON path `path`), reporting every
/// problem with its path (`labels.team`).
pub fn labels_from_json(value: &Value, path: &str) -> Result<Labels, Vec<FieldError>> {
    let Value::Object(map) = value else {
        return Err(vec![FieldError::new(
            path,
            format!(
                "expected an object of string values, found {}",
                json_kind(value)
            ),
        )]);
    };
    let mut errors = Vec::new();
    if map.len() > MAX_LABELS {
        errors.push(FieldError::new(
            path,
            format!("may hold at most {MAX_LABELS} labels, found {}", map.len()),
        ));
        return Err(errors);
    }
    let mut labels = Labels::new();
    for (key, v) in map {
        let field = format!("{path}.{key}");
        if let Err(e) = check_key(key) {
            errors.push(FieldError::new(field, e));
            continue;
        }
        match v {
            Value::String(s) => match check_value(s) {
                Ok(()) => {
                    labels.insert(key.clone(), s.clone());
                }
                Err(e) => errors.push(FieldError::new(field, e)),
            },
            other => errors.push(FieldError::new(
                field,
                format!("expected a string, found {}", json_kind(other)),
            )),
        }
    }
    if errors.is_empty() {
        Ok(labels)
    } else {
        Err(errors)
    }
}

/// One requirement of a [`Selector`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` / `key==value`.
    Equals(String, String),
    /// `key!=value`: absent, or another value.
    NotEquals(String, String),
    /// `key`.
    Exists(String),
    /// `!key`.
    Absent(String),
    /// `key in (v1,v2)`.
    In(String, Vec<String>),
    /// `key notin (v1,v2)`: absent, or none of them.
    NotIn(String, Vec<String>),
}

impl Requirement {
    /// The label key it is about.
    pub fn key(&self) -> &str {
        match self {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::Exists(k)
            | Requirement::Absent(k)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _) => k,
        }
    }

    /// Whether `labels` meet it.
    pub fn matches(&self, labels: &Labels) -> bool {
        let found = labels.get(self.key()).map(String::as_str);
        match self {
            Requirement::Equals(_, v) => found == Some(v.as_str()),
            Requirement::NotEquals(_, v) => found != Some(v.as_str()),
            Requirement::Exists(_) => found.is_some(),
            Requirement::Absent(_) => found.is_none(),
            Requirement::In(_, vs) => found.is_some_and(|f| vs.iter().any(|v| v == f)),
            Requirement::NotIn(_, vs) => !found.is_some_and(|f| vs.iter().any(|v| v == f)),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Equals(k, v) => write!(f, "{k}={v}"),
            Requirement::NotEquals(k, v) => write!(f, "{k}!={v}"),
            Requirement::Exists(k) => write!(f, "{k}"),
            Requirement::Absent(k) => write!(f, "!{k}"),
            Requirement::In(k, vs) => write!(f, "{k} in ({})", vs.join(",")),
            Requirement::NotIn(k, vs) => write!(f, "{k} notin ({})", vs.join(",")),
        }
    }
}

/// A parsed label selector: requirements that must all hold. Never empty
/// (an empty selector would choose every job, which a bulk pause by
/// selector must not do by accident).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Its requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether `labels` meet every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for Selector {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.len() > MAX_SELECTOR_LEN {
            return Err(format!(
                "is {} bytes; a selector may be at most {MAX_SELECTOR_LEN}",
                text.len()
            ));
        }
        let mut parser = Parser { text, pos: 0 };
        let mut requirements = Vec::new();
        loop {
            requirements.push(parser.requirement()?);
            if requirements.len() > MAX_REQUIREMENTS {
                return Err(format!("holds more than {MAX_REQUIREMENTS} requirements"));
            }
            parser.skip_space();
            match parser.peek() {
                None => break,
                Some(',') => parser.pos += 1,
                Some(c) => return Err(parser.expected(&format!("',' or the end, found {c:?}"))),
            }
        }
        Ok(Selector { requirements })
    }
}

/// A cursor over a selector's text.
struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += self.peek().map_or(0, char::len_utf8);
        }
    }

    fn expected(&self, what: &str) -> String {
        format!(
            "at character {}: expected {what}",
            self.text[..self.pos].chars().count() + 1
        )
    }

    /// A run of characters that may form a key (checked afterwards).
    fn key(&mut self) -> Result<String, String> {
        self.skip_space();
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        {
            self.pos += 1;
        }
        if start == self.pos {
            let found = self
                .peek()
                .map_or("the end".to_string(), |c| format!("{c:?}"));
            return Err(self.expected(&format!("a label key, found {found}")));
        }
        let key = &self.text[start..self.pos];
        check_key(key).map_err(|e| format!("at character {}: {e}", start + 1))?;
        Ok(key.to_string())
    }

    /// A value: everything up to `,` `(` `)` `=` `!` or the end, trimmed.
    fn value(&mut self) -> Result<String, String> {
        self.skip_space();
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| !matches!(c, ',' | '(' | ')' | '=' | '!'))
        {
            self.pos += self.peek().map_or(0, char::len_utf8);
        }
        let value = self.text[start..self.pos].trim();
        check_value(value).map_err(|e| format!("at character {}: {e}", start + 1))?;
        Ok(value.to_string())
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        self.skip_space();
        if self.peek() == Some('!') {
            self.pos += 1;
            return Ok(Requirement::Absent(self.key()?));
        }
        let key = self.key()?;
        let had_space = self.peek().is_some_and(char::is_whitespace);
        self.skip_space();
        let rest = self.rest();
        if rest.starts_with("!=") {
            self.pos += 2;
            return Ok(Requirement::NotEquals(key, self.value()?));
        }
        if rest.starts_with("==") {
            self.pos += 2;
            return Ok(Requirement::Equals(key, self.value()?));
        }
        if rest.starts_with('=') {
            self.pos += 1;
            return Ok(Requirement::Equals(key, self.value()?));
        }
        for (word, negated) in [("notin", true), ("in", false)] {
            let after = rest.get(word.len()..);
            if had_space
                && rest.starts_with(word)
                && after.is_some_and(|a| a.starts_with('(') || a.starts_with(char::is_whitespace))
            {
                self.pos += word.len();
                let values = self.set()?;
                return Ok(if negated {
                    Requirement::NotIn(key, values)
                } else {
                    Requirement::In(key, values)
                });
            }
        }
        match self.peek() {
            None | Some(',') => Ok(Requirement::Exists(key)),
            Some(c) => Err(self.expected(&format!(
                "'=', '==', '!=', 'in (…)', 'notin (…)', ',' or the end after key {key:?}, found {c:?}"
            ))),
        }
    }

    /// `( v1, v2, … )`.
    fn set(&mut self) -> Result<Vec<String>, String> {
        self.skip_space();
        if self.peek() != Some('(') {
            return Err(self.expected("'(' to open the list of values"));
        }
        self.pos += 1;
        let mut values = Vec::new();
        loop {
            let value = self.value()?;
            if value.is_empty() {
                return Err(self.expected("a value in the list of values"));
            }
            values.push(value);
            if values.len() > MAX_SET_VALUES {
                return Err(format!(
                    "a list of values may hold at most {MAX_SET_VALUES}"
                ));
            }
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(')') => {
                    self.pos += 1;
                    return Ok(values);
                }
                _ => return Err(self.expected("',' or ')' in the list of values")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parse(s: &str) -> Selector {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn the_contract_example_parses() {
        let s = parse("team=data,env!=dev,critical");
        assert_eq!(
            s.requirements(),
            &[
                Requirement::Equals("team".into(), "data".into()),
                Requirement::NotEquals("env".into(), "dev".into()),
                Requirement::Exists("critical".into()),
            ]
        );
        assert!(s.matches(&labels(&[("team", "data"), ("critical", "")])));
        assert!(s.matches(&labels(&[
            ("team", "data"),
            ("env", "prod"),
            ("critical", "y")
        ])));
        assert!(!s.matches(&labels(&[
            ("team", "data"),
            ("env", "dev"),
            ("critical", "y")
        ])));
        assert!(!s.matches(&labels(&[("team", "data")])));
    }

    #[test]
    fn every_kubernetes_form_parses() {
        let s = parse(" !legacy , tier in (web, api) ,zone notin(x),a==b, k.io/x-y_z = ");
        assert_eq!(
            s.requirements(),
            &[
                Requirement::Absent("legacy".into()),
                Requirement::In("tier".into(), vec!["web".into(), "api".into()]),
                Requirement::NotIn("zone".into(), vec!["x".into()]),
                Requirement::Equals("a".into(), "b".into()),
                Requirement::Equals("k.io/x-y_z".into(), "".into()),
            ]
        );
        // `in` without a space before it is part of a key, and `inx` is not `in`.
        assert_eq!(
            parse("in").requirements(),
            &[Requirement::Exists("in".into())]
        );
        assert!("tier inx (a)".parse::<Selector>().is_err());
    }

    #[test]
    fn bad_selectors_are_refused_with_a_position() {
        for bad in [
            "",
            " ",
            ",",
            "a,",
            ",a",
            "a=b,,c",
            "A=b",
            "a b",
            "a=(b)",
            "a in b",
            "a in (b",
            "a in ()",
            "a in (x,)",
            "!a=b",
            "a=b=c",
            "a!b",
            "a in (b,c",
            "a notin",
            "é=1",
        ] {
            let e = bad.parse::<Selector>().expect_err(bad);
            assert!(!e.is_empty(), "{bad}");
        }
        let e = "team=data,Env=dev".parse::<Selector>().unwrap_err();
        assert!(
            e.contains("'E'") || e.contains("\"E\"") || e.contains("E"),
            "{e}"
        );
        let long = vec!["a"; MAX_REQUIREMENTS + 1].join(",");
        assert!(long
            .parse::<Selector>()
            .unwrap_err()
            .contains("requirements"));
        assert!("x"
            .repeat(MAX_SELECTOR_LEN + 1)
            .parse::<Selector>()
            .is_err());
        assert!(format!("k={}", "v".repeat(MAX_VALUE_LEN + 1))
            .parse::<Selector>()
            .is_err());
    }

    #[test]
    fn label_objects_are_checked_with_their_paths() {
        let ok = labels_from_json(&json!({"team": "data", "k8s.io/x": ""}), "labels").unwrap();
        assert_eq!(ok.len(), 2);
        let errors = labels_from_json(
            &json!({"Team": "x", "ok": 5, "long": "v".repeat(257), "": "x"}),
            "labels",
        )
        .unwrap_err();
        let mut fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            vec!["labels.", "labels.Team", "labels.long", "labels.ok"]
        );
        let many: serde_json::Map<String, Value> =
            (0..33).map(|i| (format!("k{i}"), json!("v"))).collect();
        let errors = labels_from_json(&Value::Object(many), "labels").unwrap_err();
        assert_eq!(errors[0].field, "labels");
        assert!(labels_from_json(&json!(["a"]), "labels").is_err());
        assert!(check_key(&"k".repeat(63)).is_ok());
        assert!(check_key(&"k".repeat(64)).is_err());
    }

    fn key() -> impl Strategy<Value = String> {
        "[a-z0-9._/-]{1,12}"
    }

    fn value() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._ -]{0,8}".prop_map(|v| v.trim().to_string())
    }

    /// A value of an `in` list, which may not be empty.
    fn set_value() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._-][a-zA-Z0-9._ -]{0,7}".prop_map(|v| v.trim().to_string())
    }

    fn requirement() -> impl Strategy<Value = Requirement> {
        prop_oneof![
            (key(), value()).prop_map(|(k, v)| Requirement::Equals(k, v)),
            (key(), value()).prop_map(|(k, v)| Requirement::NotEquals(k, v)),
            key().prop_map(Requirement::Exists),
            key().prop_map(Requirement::Absent),
            (key(), prop::collection::vec(set_value(), 1..4))
                .prop_map(|(k, v)| Requirement::In(k, v)),
            (key(), prop::collection::vec(set_value(), 1..4))
                .prop_map(|(k, v)| Requirement::NotIn(k, v)),
        ]
    }

    proptest! {
        /// Whatever is written, the parser answers (a selector or a message) and never panics.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,40}") {
            let _ = text.parse::<Selector>();
        }

        /// A selector written back as text reads as the same selector.
        #[test]
        fn selectors_round_trip_through_text(reqs in prop::collection::vec(requirement(), 1..6)) {
            let selector = Selector { requirements: reqs };
            let text = selector.to_string();
            prop_assert_eq!(text.parse::<Selector>(), Ok(selector), "{}", text);
        }

        /// A requirement and its negation never both hold, and one of them always does.
        #[test]
        fn negations_are_complements(
            k in key(), v in value(), vs in prop::collection::vec(value(), 1..3),
            present in prop::collection::btree_map(key(), value(), 0..4),
        ) {
            for (a, b) in [
                (Requirement::Equals(k.clone(), v.clone()), Requirement::NotEquals(k.clone(), v.clone())),
                (Requirement::Exists(k.clone()), Requirement::Absent(k.clone())),
                (Requirement::In(k.clone(), vs.clone()), Requirement::NotIn(k.clone(), vs.clone())),
            ] {
                prop_assert_ne!(a.matches(&present), b.matches(&present));
            }
        }
    }
}
