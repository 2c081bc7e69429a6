//! The job fields that say how Chime treats a job's time beyond its
//! schedule: `dst`, `jitter`, `exclude`, `max_lateness` and
//! `alert_on_excluded` (CONTRACT.md,
//! "Contract v1.1"; docs/API.md, "Time rules").
//!
//! Kept together, apart from the rest of `job.rs`, because `jobs.preview`
//! takes the same fields (but `max_lateness`) and must refuse the same
//! inputs with the same messages as `jobs.put`.

use crate::bounds::check_at_most;
use crate::bounds::{check_name, MAX_ID_LEN};
use crate::duration::{format_duration, json_kind, parse_duration};
use crate::error::FieldError;
use crate::schedule::{DstPolicy, ScheduleOptions};
use serde::Serialize;
use serde_json::{Map, Value};
use std::time::Duration;

/// The most calendars a job may exclude.
pub const MAX_EXCLUDE: usize = 16;
/// The longest `jitter` of a one-off schedule (others are bounded by their
/// shortest period).
pub const MAX_JITTER: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest `max_lateness`.
pub const MAX_LATENESS: Duration = Duration::from_secs(30 * 24 * 3600);

/// `dst`, `jitter`, `exclude`, `max_lateness`, `alert_on_excluded` of a job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TimeRules {
    /// What local times in a gap or a repeat do; `None`: the v1 rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstPolicy>,
    /// Each instant moves later by a fixed amount below this.
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "crate::duration::duration_opt"
    )]
    #[schema(value_type = Option<String>, example = "5m")]
    pub jitter: Option<Duration>,
    /// Calendar ids whose dates (in the schedule's time zone) are skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// A firing starting later than its instant by more than this raises a
    /// `late` alert.
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "crate::duration::duration_opt"
    )]
    #[schema(value_type = Option<String>, example = "30s")]
    pub max_lateness: Option<Duration>,
    /// Whether an instant skipped by an `exclude` calendar raises a `missed`
    /// alert (a misfire skip always does; a calendar skip is usually
    /// intended, so only when asked for).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub alert_on_excluded: bool,
}

impl TimeRules {
    /// The keys this reads from a job object.
    pub const FIELDS: [&'static str; 5] = [
        "dst",
        "jitter",
        "exclude",
        "max_lateness",
        "alert_on_excluded",
    ];

    /// Reads the fields present in `obj` (absent and `null` are the same),
    /// reporting every problem with its field path.
    pub fn from_json(obj: &Map<String, Value>) -> Result<TimeRules, Vec<FieldError>> {
        let mut errors = Vec::new();
        let present = |key: &str| obj.get(key).filter(|v| !v.is_null());
        let dst = present("dst").and_then(|v| {
            DstPolicy::from_json(v, "dst")
                .map_err(|mut e| errors.append(&mut e))
                .ok()
        });
        let mut duration = |key: &str, max: Duration| {
            let v = present(key)?;
            let checked = parse_duration(v).and_then(|d| {
                if !d.subsec_nanos().is_multiple_of(1_000_000) {
                    return Err(format!(
                        "must be a whole number of milliseconds, found {d:?}"
                    ));
                }
                check_at_most(d, max).map_or(Ok(d), Err)
            });
            checked
                .map_err(|m| errors.push(FieldError::new(key, m)))
                .ok()
        };
        let jitter = duration("jitter", MAX_JITTER);
        let max_lateness = duration("max_lateness", MAX_LATENESS);
        let alert_on_excluded = match present("alert_on_excluded") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                errors.push(FieldError::new(
                    "alert_on_excluded",
                    format!("expected true or false, found {}", json_kind(other)),
                ));
                false
            }
        };
        let exclude = match present("exclude") {
            None => Vec::new(),
            Some(Value::Array(items)) if items.len() <= MAX_EXCLUDE => {
                let mut ids: Vec<String> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str().map(|s| (s, check_name(s, MAX_ID_LEN))) {
                        // Naming a calendar twice excludes its dates once.
                        Some((s, Ok(()))) if ids.iter().any(|known| known == s) => {}
                        Some((s, Ok(()))) => ids.push(s.to_string()),
                        Some((_, Err(e))) => {
                            errors.push(FieldError::new(format!("exclude[{i}]"), e))
                        }
                        None => errors.push(FieldError::new(
                            format!("exclude[{i}]"),
                            format!("expected a calendar id string, found {}", json_kind(item)),
                        )),
                    }
                }
                ids
            }
            Some(Value::Array(_)) => {
                errors.push(FieldError::new(
                    "exclude",
                    format!("may name at most {MAX_EXCLUDE} calendars"),
                ));
                Vec::new()
            }
            Some(other) => {
                errors.push(FieldError::new(
                    "exclude",
                    format!(
                        "expected an array of calendar ids, found {}",
                        json_kind(other)
                    ),
                ));
                Vec::new()
            }
        };
        if errors.is_empty() {
            Ok(TimeRules {
                dst,
                jitter,
                exclude,
                max_lateness,
                alert_on_excluded,
            })
        } else {
            Err(errors)
        }
    }

    /// How the schedule of the job `id` is compiled under these rules.
    pub fn schedule_options<'a>(&self, id: Option<&'a str>) -> ScheduleOptions<'a> {
        ScheduleOptions {
            id,
            dst: self.dst,
            jitter: self.jitter,
        }
    }

    /// `max_lateness` in milliseconds, as the store keeps it.
    pub fn max_lateness_ms(&self) -> Option<i64> {
        self.max_lateness
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// `max_lateness`, formatted (for alert messages).
    pub fn max_lateness_text(&self) -> Option<String> {
        self.max_lateness.map(format_duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<TimeRules, Vec<String>> {
        TimeRules::from_json(v.as_object().unwrap())
            .map_err(|e| e.into_iter().map(|e| e.field).collect())
    }

    #[test]
    fn all_fields_parse_and_serialize_back() {
        let v = json!({
            "dst": {"gap": "skip", "repeat": "both"}, "jitter": "5m",
            "exclude": ["holidays", "holidays", "freeze"], "max_lateness": 1000,
            "alert_on_excluded": true
        });
        let rules = read(v).unwrap();
        assert!(rules.alert_on_excluded);
        assert_eq!(rules.exclude, ["holidays", "freeze"]);
        assert_eq!(rules.max_lateness, Some(Duration::from_secs(1)));
        assert_eq!(
            serde_json::to_value(&rules).unwrap(),
            json!({
                "dst": {"gap": "skip", "repeat": "both"}, "jitter": "5m",
                "exclude": ["holidays", "freeze"], "max_lateness": "1s",
                "alert_on_excluded": true
            })
        );
        assert_eq!(read(json!({})).unwrap(), TimeRules::default());
        assert_eq!(
            serde_json::to_value(TimeRules::default()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn every_problem_names_its_field() {
        let errors = read(json!({
            "dst": {"gap": "later"}, "jitter": "1.5ms", "max_lateness": "31d",
            "exclude": ["ok", "bad id", 7], "alert_on_excluded": "yes"
        }))
        .unwrap_err();
        assert_eq!(
            errors,
            [
                "dst.gap",
                "jitter",
                "max_lateness",
                "alert_on_excluded",
                "exclude[1]",
                "exclude[2]"
            ]
        );
        let too_many: Vec<String> = (0..17).map(|i| format!("c{i}")).collect();
        assert_eq!(read(json!({"exclude": too_many})).unwrap_err(), ["exclude"]);
        assert_eq!(
            read(json!({"exclude": "holidays"})).unwrap_err(),
            ["exclude"]
        );
    }

    fn job(extra: Value) -> Result<crate::JobSpec, Vec<FieldError>> {
        let mut v = json!({"id": "j", "schedule": {"cron": "*/15 * * * *"}, "handler": "shell",
            "payload": {"argv": ["true"]}});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        crate::JobSpec::from_json(&v, &crate::Limits::default())
    }

    fn job_fields(extra: Value) -> Vec<String> {
        job(extra)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn job_specs_check_the_rules_against_their_schedule() {
        let spec =
            job(json!({"jitter": "15m", "dst": {"gap": "skip"}, "max_lateness": "1s"})).unwrap();
        assert_eq!(spec.time.jitter, Some(Duration::from_secs(900)));
        let again = crate::JobSpec::from_json(&spec.to_json(), &crate::Limits::default());
        assert_eq!(again.unwrap(), spec);
        assert_eq!(job_fields(json!({"jitter": "16m"})), ["jitter"]);
        assert_eq!(
            job_fields(json!({"schedule": {"every": "1m"}, "jitter": "2m"})),
            ["jitter"]
        );
        assert_eq!(
            job_fields(json!({"schedule": {"every": "1m"}, "dst": {}})),
            ["dst"]
        );
        assert!(job(json!({"schedule": {"at": "2030-01-01T00:00:00Z"}, "jitter": "1d"})).is_ok());
        // H draws from the id; a schedule no id can satisfy is refused.
        assert!(job(json!({"schedule": {"cron": "H H * * *"}})).is_ok());
        assert!(job(json!({"schedule": {"cron": "0 0 H(30-31) 2 *"}})).is_err());
    }
}
