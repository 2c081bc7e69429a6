//! The `schedule` object of a JobSpec as JSON: validation with field paths,
//! and the contract's JSON shape back out.
//!
//! Validation is the compile step's parser run once on user input: a spec that
//! passes `from_json` always compiles (given any anchor), so the API, the
//! durable submission path and `chimectl preview` all refuse the same inputs
//! with the same messages.

use super::every::{check_count, check_every, check_window};
use super::fan_in::{check_within, parse_after};
use super::masks::CronExpr;
use super::seed::Seed;
use crate::bounds::check_time;
use crate::duration::{format_duration, format_time, json_kind, parse_duration, parse_time};
use crate::error::FieldError;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use chrono_tz::Tz;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::time::Duration;

/// The `schedule` object of a JobSpec.
#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleSpec {
    /// `{"cron": EXPR, "tz": IANA}`; `tz` is `"UTC"` when absent in JSON.
    Cron { cron: String, tz: String },
    /// `{"every": DURATION, "start_at"?, "end_at"?, "count"?}`: fixed rate.
    Every {
        every: Duration,
        start_at: Option<DateTime<Utc>>,
        end_at: Option<DateTime<Utc>>,
        count: Option<u64>,
    },
    /// `{"at": TIME}`: once.
    At { at: DateTime<Utc> },
    /// `{"after": [job ids], "within"?: DURATION}`: fan-in, no instants of
    /// its own; fires once every listed job has succeeded since it last
    /// fired (or was put), counting only successes within `within`.
    After {
        after: Vec<String>,
        within: Option<Duration>,
    },
}

/// Which keys belong to which kind of schedule.
const KINDS: [(&str, &[&str]); 4] = [
    ("cron", &["tz"]),
    ("every", &["start_at", "end_at", "count"]),
    ("at", &[]),
    ("after", &["within"]),
];

/// The kinds, as error messages list them.
const KIND_NAMES: &str = "\"cron\", \"every\", \"at\" or \"after\"";

impl ScheduleSpec {
    /// Parses and fully validates (cron syntax, tz name, every > 0, count >= 1,
    /// end_at after start_at, ...).
    ///
    /// `path` is the JSON path prefix, normally "schedule"; errors name e.g.
    /// "schedule.cron", "schedule.tz", "schedule.every", "schedule.bogus"
    /// (unknown key), or "schedule" itself (not an object / not exactly one of
    /// cron|every|at). Every problem found is reported.
    pub fn from_json(value: &Value, path: &str) -> Result<ScheduleSpec, Vec<FieldError>> {
        let at = |key: &str| {
            if path.is_empty() {
                key.to_string()
            } else {
                format!("{path}.{key}")
            }
        };
        let whole = if path.is_empty() { "schedule" } else { path };
        let Some(obj) = value.as_object() else {
            return Err(vec![FieldError::new(
                whole,
                format!(
                    "expected an object with one of {KIND_NAMES}, found {}",
                    json_kind(value)
                ),
            )]);
        };
        let mut errors = Vec::new();

        let kinds = kinds_of(obj, whole, &at, &mut errors);

        let cron = obj.get("cron").and_then(|v| {
            let text = string(v, "a cron expression string such as \"0 30 2 * * *\"")
                .map_err(|m| errors.push(FieldError::new(at("cron"), m)))
                .ok()?;
            // H's values need the job's id (checked when compiled); its syntax not.
            CronExpr::parse_seeded(text, Some(Seed::ANY))
                .map_err(|ms| errors.extend(ms.into_iter().map(|m| FieldError::new(at("cron"), m))))
                .ok()?;
            Some(text.to_string())
        });
        let tz = optional(obj, "tz").and_then(|v| {
            let name = string(v, "an IANA time zone name such as \"Europe/Berlin\"")
                .map_err(|m| errors.push(FieldError::new(at("tz"), m)))
                .ok()?;
            parse_tz(name)
                .map_err(|m| errors.push(FieldError::new(at("tz"), m)))
                .ok()?;
            Some(name.to_string())
        });
        let every = obj.get("every").and_then(|v| {
            let d = parse_duration(v)
                .map_err(|m| errors.push(FieldError::new(at("every"), m)))
                .ok()?;
            match check_every(d) {
                Some(m) => {
                    errors.push(FieldError::new(at("every"), m));
                    None
                }
                None => Some(d),
            }
        });
        let mut time = |key: &str, v: &Value| {
            parse_time(v)
                .map(truncate_to_millis)
                .and_then(|t| check_time(t).map_or(Ok(t), Err))
                .map_err(|m| errors.push(FieldError::new(at(key), m)))
                .ok()
        };
        let start_at = optional(obj, "start_at").and_then(|v| time("start_at", v));
        let end_at = optional(obj, "end_at").and_then(|v| time("end_at", v));
        let at_time = obj.get("at").and_then(|v| time("at", v));
        if let Some(m) = check_window(start_at, end_at) {
            errors.push(FieldError::new(at("end_at"), m));
        }
        let count = optional(obj, "count").and_then(|v| {
            let n = v.as_u64().ok_or_else(|| {
                format!(
                    "expected a whole number of firings, at least 1, found {}",
                    match v {
                        Value::Number(n) => n.to_string(),
                        other => json_kind(other).to_string(),
                    }
                )
            });
            match n.map(|n| (n, check_count(n))) {
                Ok((n, None)) => Some(n),
                Ok((_, Some(m))) | Err(m) => {
                    errors.push(FieldError::new(at("count"), m));
                    None
                }
            }
        });
        let after = obj.get("after").and_then(|v| {
            parse_after(v)
                .map_err(|es| {
                    errors.extend(
                        es.into_iter()
                            .map(|(i, m)| FieldError::new(format!("{}{i}", at("after")), m)),
                    )
                })
                .ok()
        });
        let within = optional(obj, "within").and_then(|v| {
            let d = parse_duration(v)
                .map_err(|m| errors.push(FieldError::new(at("within"), m)))
                .ok()?;
            match check_within(d) {
                Some(m) => {
                    errors.push(FieldError::new(at("within"), m));
                    None
                }
                None => Some(d),
            }
        });

        if !errors.is_empty() {
            return Err(errors);
        }
        let spec = match kinds.as_slice() {
            ["cron"] => cron.map(|cron| ScheduleSpec::Cron {
                cron,
                tz: tz.unwrap_or_else(|| "UTC".to_string()),
            }),
            ["every"] => every.map(|every| ScheduleSpec::Every {
                every,
                start_at,
                end_at,
                count,
            }),
            ["at"] => at_time.map(|at| ScheduleSpec::At { at }),
            ["after"] => after.map(|after| ScheduleSpec::After { after, within }),
            _ => None,
        };
        spec.ok_or_else(|| {
            vec![FieldError::new(
                whole,
                "could not be read (an error went unreported; this is a bug)",
            )]
        })
    }
}

impl ScheduleSpec {
    /// The upstream jobs of a fan-in schedule; empty for the others.
    pub fn after(&self) -> &[String] {
        match self {
            ScheduleSpec::After { after, .. } => after,
            _ => &[],
        }
    }

    /// Whether this is a fan-in schedule (`after`), which has no instants.
    pub fn is_fan_in(&self) -> bool {
        matches!(self, ScheduleSpec::After { .. })
    }

    /// The zone whose local dates the schedule lives in: a cron schedule's
    /// `tz`, UTC for the others (their instants have no local time).
    pub fn time_zone(&self) -> Tz {
        match self {
            ScheduleSpec::Cron { tz, .. } => parse_tz(tz).unwrap_or(Tz::UTC),
            _ => Tz::UTC,
        }
    }
}

/// A JSON string, or the message for what was found instead.
fn string<'a>(v: &'a Value, expected: &str) -> Result<&'a str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected {expected}, found {}", json_kind(v)))
}

/// An optional key: absent and `null` are the same.
fn optional<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// Instants are kept with millisecond precision, as they are stored and
/// written, so a spec survives a round trip through JSON unchanged.
fn truncate_to_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::milliseconds(1)).unwrap_or(t)
}

/// An IANA zone name; on failure a message with a suggestion when only the
/// case was wrong.
pub(crate) fn parse_tz(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>().map_err(|_| {
        match chrono_tz::TZ_VARIANTS
            .iter()
            .find(|tz| tz.name().eq_ignore_ascii_case(name))
        {
            Some(tz) => format!("unknown time zone {name:?}; did you mean {:?}?", tz.name()),
            None => format!(
                "unknown time zone {name:?}; use an IANA name such as \"Europe/Berlin\", \
                 \"America/New_York\" or \"UTC\""
            ),
        }
    })
}

impl Serialize for ScheduleSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ScheduleSpec::Cron { cron, tz } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("cron", cron)?;
                m.serialize_entry("tz", tz)?;
                m.end()
            }
            ScheduleSpec::Every {
                every,
                start_at,
                end_at,
                count,
            } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("every", &format_duration(*every))?;
                if let Some(t) = start_at {
                    m.serialize_entry("start_at", &format_time(*t))?;
                }
                if let Some(t) = end_at {
                    m.serialize_entry("end_at", &format_time(*t))?;
                }
                if let Some(n) = count {
                    m.serialize_entry("count", n)?;
                }
                m.end()
            }
            ScheduleSpec::At { at } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("at", &format_time(*at))?;
                m.end()
            }
            ScheduleSpec::After { after, within } => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("after", after)?;
                if let Some(d) = within {
                    m.serialize_entry("within", &format_duration(*d))?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ScheduleSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        ScheduleSpec::from_json(&v, "schedule").map_err(|errors| {
            serde::de::Error::custom(
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })
    }
}

/// The OpenAPI schema of `schedule`: written against the serializer above
/// (its three shapes and their keys), since the type's serde code is
/// hand-written and the derive cannot read it.
impl utoipa::PartialSchema for ScheduleSpec {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        let string = |description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(description))
        };
        let cron = ObjectBuilder::new()
            .property(
                "cron",
                string("5, 6 or 7 fields, or @yearly @monthly @weekly @daily @hourly"),
            )
            .property("tz", string("IANA time zone, default UTC"))
            .required("cron");
        let every = ObjectBuilder::new()
            .property("every", string("DURATION, such as \"30s\" or \"1h 30m\""))
            .property("start_at", string("RFC 3339"))
            .property("end_at", string("RFC 3339"))
            .property(
                "count",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1)),
            )
            .required("every");
        let at = ObjectBuilder::new()
            .property("at", string("RFC 3339"))
            .required("at");
        let after = ObjectBuilder::new()
            .property(
                "after",
                utoipa::openapi::schema::ArrayBuilder::new()
                    .items(string("a job id"))
                    .min_items(Some(1))
                    .max_items(Some(super::fan_in::MAX_AFTER)),
            )
            .property(
                "within",
                string("DURATION: upstream successes older than this no longer count"),
            )
            .required("after");
        OneOfBuilder::new()
            .item(cron)
            .item(every)
            .item(at)
            .item(after)
            .description(Some(
                "Exactly one of cron, every, at and after (docs/API.md)",
            ))
            .into()
    }
}

impl utoipa::ToSchema for ScheduleSpec {}

/// Which of the kinds (`cron`, `every`, `at`, `after`) `obj` gives, with an
/// error for each unknown field, for options of a kind it does not give,
/// and unless exactly one kind is given.
fn kinds_of(
    obj: &serde_json::Map<String, Value>,
    whole: &str,
    at: &dyn Fn(&str) -> String,
    errors: &mut Vec<FieldError>,
) -> Vec<&'static str> {
    for key in obj.keys() {
        if !KINDS
            .iter()
            .any(|(kind, extra)| kind == key || extra.contains(&key.as_str()))
        {
            errors.push(FieldError::new(
                at(key),
                "unknown field; a schedule is {\"cron\", \"tz\"?}, \
                 {\"every\", \"start_at\"?, \"end_at\"?, \"count\"?}, {\"at\"} \
                 or {\"after\", \"within\"?}",
            ));
        }
    }
    let kinds: Vec<&str> = KINDS
        .iter()
        .map(|(kind, _)| *kind)
        .filter(|kind| obj.contains_key(*kind))
        .collect();
    match kinds.as_slice() {
        [] => errors.push(FieldError::new(
            whole,
            format!("needs exactly one of {KIND_NAMES}"),
        )),
        [kind] => {
            // Options of the other kinds are mistakes, not silently ignored.
            for (other, extra) in KINDS.iter().filter(|(k, _)| k != kind) {
                for key in extra.iter().filter(|k| obj.contains_key(**k)) {
                    errors.push(FieldError::new(
                        at(key),
                        format!("only applies to an \"{other}\" schedule, not \"{kind}\""),
                    ));
                }
            }
        }
        many => errors.push(FieldError::new(
            whole,
            format!(
                "has {}; give exactly one of {KIND_NAMES}",
                many.iter()
                    .map(|k| format!("\"{k}\""))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        )),
    }
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ScheduleSpec, Vec<FieldError>> {
        ScheduleSpec::from_json(&v, "schedule")
    }

    fn fields(v: Value) -> Vec<String> {
        parse(v).unwrap_err().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn times_periods_and_counts_beyond_their_range_are_refused() {
        assert_eq!(
            fields(json!({"every": "300000y", "start_at": "9999-12-31T23:59:59Z"})),
            vec!["schedule.every", "schedule.start_at"]
        );
        assert_eq!(
            fields(json!({"every": "1s", "end_at": "2100-01-01T00:00:00Z"})),
            vec!["schedule.end_at"]
        );
        assert_eq!(
            fields(json!({"at": "1969-12-31T23:59:59Z"})),
            vec!["schedule.at"]
        );
        assert_eq!(
            fields(json!({"every": "1s", "count": 1_000_000_000_001u64})),
            vec!["schedule.count"]
        );
        assert!(parse(json!({
            "every": "3650d", "start_at": "2099-12-31T23:59:59.999Z",
            "count": 1_000_000_000_000u64
        }))
        .is_ok());
    }

    fn t(s: &str) -> DateTime<Utc> {
        crate::duration::parse_time_str(s).unwrap()
    }

    #[test]
    fn cron_tz_defaults_to_utc() {
        assert_eq!(
            parse(json!({"cron": "0 30 2 * * *"})).unwrap(),
            ScheduleSpec::Cron {
                cron: "0 30 2 * * *".into(),
                tz: "UTC".into()
            }
        );
        assert_eq!(
            parse(json!({"cron": "@daily", "tz": "Europe/Berlin"})).unwrap(),
            ScheduleSpec::Cron {
                cron: "@daily".into(),
                tz: "Europe/Berlin".into()
            }
        );
        assert_eq!(
            parse(json!({"cron": "@daily", "tz": null})).unwrap(),
            ScheduleSpec::Cron {
                cron: "@daily".into(),
                tz: "UTC".into()
            }
        );
    }

    #[test]
    fn every_and_at_parse_with_their_options() {
        assert_eq!(
            parse(json!({"every": "30s"})).unwrap(),
            ScheduleSpec::Every {
                every: Duration::from_secs(30),
                start_at: None,
                end_at: None,
                count: None
            }
        );
        assert_eq!(
            parse(json!({"every": 1500, "start_at": "2026-01-01T00:00:00Z", "end_at": "2026-01-02T00:00:00+01:00", "count": 3})).unwrap(),
            ScheduleSpec::Every {
                every: Duration::from_millis(1500),
                start_at: Some(t("2026-01-01T00:00:00Z")),
                end_at: Some(t("2026-01-01T23:00:00Z")),
                count: Some(3)
            }
        );
        assert_eq!(
            parse(json!({"at": "2026-05-01T09:00:00.1234Z"})).unwrap(),
            ScheduleSpec::At {
                at: t("2026-05-01T09:00:00.123Z")
            }
        );
    }

    #[test]
    fn a_bad_cron_names_schedule_cron_and_the_cron_field() {
        let errors = parse(json!({"cron": "61 * * * *"})).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "schedule.cron");
        assert!(
            errors[0].message.contains("minute")
                && errors[0].message.contains("61")
                && errors[0].message.contains("0-59")
        );
        let errors = parse(json!({"cron": "0 61 * * *"})).unwrap_err();
        assert_eq!(errors[0].field, "schedule.cron");
        assert!(errors[0].message.contains("hour") && errors[0].message.contains("61"));
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        assert_eq!(
            fields(json!({"cron": "0 61 * * *", "tz": "Mars/Olympus", "bogus": 1})),
            ["schedule.bogus", "schedule.cron", "schedule.tz"]
        );
        assert_eq!(
            fields(
                json!({"every": "0s", "count": 0, "start_at": "2026-01-02T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"})
            ),
            ["schedule.every", "schedule.end_at", "schedule.count"]
        );
        assert_eq!(fields(json!({"every": "soon"})), ["schedule.every"]);
        assert_eq!(
            fields(json!({"every": "1s", "count": -1})),
            ["schedule.count"]
        );
        assert_eq!(
            fields(json!({"every": "1s", "count": "3"})),
            ["schedule.count"]
        );
        assert_eq!(fields(json!({"at": "tomorrow"})), ["schedule.at"]);
        assert_eq!(fields(json!({"cron": 5})), ["schedule.cron"]);
        assert_eq!(fields(json!({"cron": "@daily", "tz": 1})), ["schedule.tz"]);
    }

    #[test]
    fn the_kind_must_be_exactly_one() {
        assert_eq!(fields(json!({})), ["schedule"]);
        assert_eq!(fields(json!({"tz": "UTC"})), ["schedule"]);
        let errors = parse(json!({"cron": "@daily", "every": "1m"})).unwrap_err();
        assert_eq!(errors[0].field, "schedule");
        assert!(
            errors[0].message.contains("\"cron\" and \"every\""),
            "{}",
            errors[0]
        );
        assert_eq!(fields(json!("@daily")), ["schedule"]);
        assert_eq!(fields(json!(null)), ["schedule"]);
    }

    #[test]
    fn options_of_another_kind_are_refused() {
        assert_eq!(
            fields(json!({"cron": "@daily", "count": 3})),
            ["schedule.count"]
        );
        assert_eq!(fields(json!({"every": "1m", "tz": "UTC"})), ["schedule.tz"]);
        assert_eq!(
            fields(json!({"at": "2026-01-01T00:00:00Z", "end_at": "2026-01-02T00:00:00Z"})),
            ["schedule.end_at"]
        );
    }

    #[test]
    fn the_path_prefix_is_used_in_field_names() {
        let errors =
            ScheduleSpec::from_json(&json!({"cron": "x"}), "jobs[3].schedule").unwrap_err();
        assert_eq!(errors[0].field, "jobs[3].schedule.cron");
    }

    #[test]
    fn unknown_time_zones_get_a_suggestion() {
        let errors = parse(json!({"cron": "@daily", "tz": "europe/berlin"})).unwrap_err();
        assert!(
            errors[0].message.contains("did you mean \"Europe/Berlin\""),
            "{}",
            errors[0]
        );
        let errors = parse(json!({"cron": "@daily", "tz": "Europe/Berln"})).unwrap_err();
        assert!(errors[0].message.contains("IANA"), "{}", errors[0]);
    }

    #[test]
    fn json_round_trips_in_the_contract_shape() {
        for v in [
            json!({"cron": "0 30 2 * * *", "tz": "Europe/Berlin"}),
            json!({"every": "1h 30m"}),
            json!({"every": "250ms", "start_at": "2026-01-01T00:00:00.000Z", "end_at": "2026-02-01T00:00:00.000Z", "count": 5}),
            json!({"at": "2026-05-01T09:00:00.000Z"}),
            json!({"after": ["a", "b"]}),
            json!({"after": ["a"], "within": "1h"}),
        ] {
            let spec = parse(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&spec).unwrap(), v);
            let again: ScheduleSpec = serde_json::from_value(v).unwrap();
            assert_eq!(again, spec);
        }
        assert_eq!(
            serde_json::to_value(parse(json!({"cron": "@hourly"})).unwrap()).unwrap(),
            json!({"cron": "@hourly", "tz": "UTC"})
        );
    }

    #[test]
    fn after_and_within_are_checked_with_their_paths() {
        assert_eq!(
            parse(json!({"after": ["a", "b"], "within": "30m"})).unwrap(),
            ScheduleSpec::After {
                after: vec!["a".into(), "b".into()],
                within: Some(Duration::from_secs(1800))
            }
        );
        assert_eq!(
            fields(json!({"after": ["a", "a", 3], "within": "0s"})),
            ["schedule.after[1]", "schedule.after[2]", "schedule.within"]
        );
        assert_eq!(fields(json!({"after": []})), ["schedule.after"]);
        assert_eq!(
            fields(json!({"after": ["a"], "within": "300000y"})),
            ["schedule.within"]
        );
        assert_eq!(
            fields(json!({"every": "1m", "within": "1m"})),
            ["schedule.within"]
        );
        assert_eq!(
            fields(json!({"after": ["a"], "tz": "UTC"})),
            ["schedule.tz"]
        );
        assert_eq!(
            fields(json!({"after": ["a"], "cron": "@daily"})),
            ["schedule"]
        );
    }

    #[test]
    fn deserialize_reports_the_joined_errors() {
        let e =
            serde_json::from_value::<ScheduleSpec>(json!({"cron": "0 61 * * *", "tz": "Nowhere"}))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("schedule.cron: ") && e.contains("; schedule.tz: "),
            "{e}"
        );
    }
}
