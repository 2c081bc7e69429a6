//! Job specifications (what users put) and jobs (what Chime keeps).
//!
//! Validation walks the JSON itself rather than relying on serde errors, so
//! that one reply lists every problem, each with its JSON path.

use crate::bounds::{
    check_at_most, check_group, check_name, MAX_ATTEMPTS, MAX_GROUP_LEN, MAX_ID_LEN,
    MAX_MISFIRE_THRESHOLD, MAX_ON_SUCCESS, MAX_RETRY_DELAY, MAX_TIMEOUT,
};
use crate::concurrency::{Concurrency, Overlap};
use crate::duration::{format_duration, json_kind, parse_duration, rfc3339_ms, rfc3339_ms_opt};
use crate::error::FieldError;
use crate::labels::{labels_from_json, Labels};
use crate::schedule::{Schedule, ScheduleSpec};
use crate::time_rules::TimeRules;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Limits that are settings rather than contract constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted payload, JSON-encoded.
    pub max_payload_bytes: usize,
    /// Whether the payloads of the built-in handlers are checked
    /// (`crate::payloads`). On for everything a user sends; off only where
    /// the scheduler reads back what it stored, so that a job stored before
    /// a rule existed stays readable (and fails at its firing, as it did).
    pub builtin_payloads: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 64 * 1024,
            builtin_payloads: true,
        }
    }
}

impl Limits {
    /// How a stored spec is read back: without the payload limit (lowering
    /// it must not make stored jobs unreadable) and without the built-in
    /// payload checks.
    pub fn stored() -> Limits {
        Limits {
            max_payload_bytes: usize::MAX,
            builtin_payloads: false,
        }
    }
}

/// What to do with instants found later than `misfire_threshold`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// One catch-up run for all missed instants.
    #[default]
    FireOnce,
    /// Every missed instant (bounded by a scheduler setting).
    FireAll,
    /// None; missed instants are recorded `skipped`.
    Skip,
}

macro_rules! wire_enum {
    ($t:ty, $($v:ident => $s:literal),+) => {
        impl $t {
            /// The wire name.
            pub fn as_str(self) -> &'static str { match self { $(<$t>::$v => $s),+ } }
        }
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s { $($s => Ok(<$t>::$v),)+ _ => Err(format!("{s:?} is not one of {}", [$($s),+].join(", "))) }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

wire_enum!(Overlap, Allow => "allow", Forbid => "forbid", Queue => "queue", Replace => "replace");
wire_enum!(Misfire, FireOnce => "fire_once", FireAll => "fire_all", Skip => "skip");
wire_enum!(JobState, Active => "active", Paused => "paused", Completed => "completed");

/// Retry policy: exponential backoff, capped, jittered (computed with the `backoff` crate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 means no retry.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    #[serde(with = "crate::duration::duration_serde")]
    #[schema(value_type = String, example = "30s")]
    pub initial: Duration,
    /// Largest delay.
    #[serde(with = "crate::duration::duration_serde")]
    #[schema(value_type = String, example = "30s")]
    pub max: Duration,
    /// Growth factor between delays.
    pub multiplier: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 1,
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
            multiplier: 2.0,
        }
    }
}

/// A job as users write it (CONTRACT.md, "Job specification").
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct JobSpec {
    pub id: String,
    pub group: String,
    pub schedule: ScheduleSpec,
    pub handler: String,
    pub payload: Value,
    pub priority: u8,
    #[serde(with = "crate::duration::duration_serde")]
    #[schema(value_type = String, example = "30s")]
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub overlap: Overlap,
    /// `max_concurrent`, `queue_limit`, `shards`, `broadcast`.
    #[serde(flatten)]
    pub concurrency: Concurrency,
    pub misfire: Misfire,
    #[serde(with = "crate::duration::duration_serde")]
    #[schema(value_type = String, example = "30s")]
    pub misfire_threshold: Duration,
    pub paused: bool,
    /// Jobs to trigger when a firing of this one succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_success: Vec<String>,
    /// Publish an alert after this many consecutive failed firings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_after_failures: Option<u32>,
    /// With `alert_after_failures`: also pause the job when the alert fires.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pause_after_alert: bool,
    /// Labels that selectors choose jobs by (`crate::labels`); absent means none.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// `dst`, `jitter`, `exclude`, `max_lateness`.
    #[serde(flatten)]
    pub time: TimeRules,
}

/// Reads a spec as a client reads a job the server sent: the server checked
/// the payload when the job was put, and a read-only caller receives it as
/// its digest (`{"redacted": …}`), which no built-in handler's shape fits.
impl<'de> Deserialize<'de> for JobSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let limits = Limits {
            builtin_payloads: false,
            ..Limits::default()
        };
        JobSpec::from_json(&v, &limits).map_err(|errors| {
            let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            serde::de::Error::custom(text.join("; "))
        })
    }
}

/// Fields of a [`Job`] that are not part of the spec; accepted and ignored on put,
/// so a client can get a job, edit it and put it back.
const READ_ONLY_FIELDS: [&str; 6] = [
    "state",
    "next_fire_at",
    "version",
    "created_at",
    "updated_at",
    UPSTREAM_MISSING_FIELD,
];

/// The [`Job`] field listing the `after` jobs that do not exist.
pub const UPSTREAM_MISSING_FIELD: &str = "upstream_missing";

/// A put's condition (CONTRACT.md v1.1): not part of the spec, accepted in
/// the put body and read by [`if_version`].
pub const IF_VERSION_FIELD: &str = "if_version";

/// The `if_version` of a put body: `None` when absent; 0 means "only if the
/// job does not exist", N "only if the stored job has version N".
pub fn if_version(body: &Value) -> Result<Option<i64>, FieldError> {
    match body.get(IF_VERSION_FIELD).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => v.as_i64().filter(|n| *n >= 0).map(Some).ok_or_else(|| {
            FieldError::new(
                IF_VERSION_FIELD,
                format!("must be an integer from 0 (the job must not exist) up, found {v}"),
            )
        }),
    }
}

/// Every field a job spec may hold: its own, the read-only ones a reply
/// echoes, and those of its time rules and concurrency limits.
fn known_fields() -> Vec<&'static str> {
    let mut known: Vec<&'static str> = vec![
        "id",
        "group",
        "schedule",
        "handler",
        "payload",
        "priority",
        "timeout",
        "retry",
        "overlap",
        "misfire",
        "misfire_threshold",
        "paused",
        "on_success",
        "alert_after_failures",
        "pause_after_alert",
        "labels",
        IF_VERSION_FIELD,
    ];
    known.extend(READ_ONLY_FIELDS);
    known.extend(TimeRules::FIELDS);
    known.extend(Concurrency::FIELDS);
    known
}

/// A part of the spec read by its own parser: its default when absent or
/// null, its errors added to `errors`.
fn optional_part<T>(
    obj: &Map<String, Value>,
    key: &str,
    errors: &mut Vec<FieldError>,
    default: impl FnOnce() -> T,
    parse: impl FnOnce(&Value) -> Result<T, Vec<FieldError>>,
) -> Option<T> {
    match obj.get(key).filter(|v| !v.is_null()) {
        None => Some(default()),
        Some(v) => parse(v).map_err(|mut e| errors.append(&mut e)).ok(),
    }
}

/// A part of the spec that must be there, read by its own parser.
fn required_part<T>(
    obj: &Map<String, Value>,
    key: &str,
    errors: &mut Vec<FieldError>,
    parse: impl FnOnce(&Value) -> Result<T, Vec<FieldError>>,
) -> Option<T> {
    match obj.get(key).filter(|v| !v.is_null()) {
        None => {
            errors.push(FieldError::new(key, "is required"));
            None
        }
        Some(v) => parse(v).map_err(|mut e| errors.append(&mut e)).ok(),
    }
}

/// `on_success`: the ids of the jobs a success triggers, each once, never
/// the job itself (`id`); `None` when the field is wrong.
fn on_success(w: &mut Walk<'_>, id: Option<&str>) -> Option<Vec<String>> {
    match w.present("on_success") {
        None => Some(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_ON_SUCCESS => {
            // Naming a job twice triggers it once: duplicates are dropped.
            let mut ids: Vec<String> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str().map(|s| (s, check_name(s, MAX_ID_LEN))) {
                    Some((s, Ok(()))) if id == Some(s) => w.fail(
                        &format!("on_success[{i}]"),
                        "names the job itself; a job cannot trigger itself on success",
                    ),
                    Some((s, Ok(()))) if ids.iter().any(|known| known == s) => {}
                    Some((s, Ok(()))) => ids.push(s.to_string()),
                    Some((_, Err(e))) => w.fail(&format!("on_success[{i}]"), e),
                    None => w.fail(&format!("on_success[{i}]"), "expected a job id string"),
                }
            }
            Some(ids)
        }
        Some(Value::Array(_)) => {
            w.fail(
                "on_success",
                format!("may name at most {MAX_ON_SUCCESS} jobs"),
            );
            None
        }
        Some(other) => {
            let msg = format!("expected an array of job ids, found {}", json_kind(other));
            w.fail("on_success", msg);
            None
        }
    }
}

/// `retry`: the policy, its defaults filled in; `None` when it is wrong.
fn retry_policy(w: &mut Walk<'_>) -> Option<RetryPolicy> {
    match w.present("retry") {
        None => Some(RetryPolicy::default()),
        Some(Value::Object(r)) => {
            let before = w.errors.len();
            let mut rw = Walk {
                obj: r,
                path: "retry",
                errors: w.errors,
            };
            rw.unknown_fields(&["max_attempts", "initial", "max", "multiplier"]);
            let d = RetryPolicy::default();
            let max_attempts = rw.integer("max_attempts", 1, MAX_ATTEMPTS as u64, Some(1));
            let initial = rw.duration("initial", d.initial, false, MAX_RETRY_DELAY);
            let max = rw.duration("max", d.max, false, MAX_RETRY_DELAY);
            let multiplier = match rw.present("multiplier") {
                None => Some(d.multiplier),
                Some(v) => match v.as_f64() {
                    Some(m) if (1.0..=100.0).contains(&m) => Some(m),
                    _ => {
                        rw.fail(
                            "multiplier",
                            format!("must be a number from 1 to 100, found {v}"),
                        );
                        None
                    }
                },
            };
            if let (Some(i), Some(m)) = (initial, max) {
                if m < i {
                    rw.fail("max", "must not be shorter than retry.initial");
                }
            }
            match (max_attempts, initial, max, multiplier) {
                (Some(a), Some(i), Some(m), Some(x)) if w.errors.len() == before => {
                    Some(RetryPolicy {
                        max_attempts: a as u32,
                        initial: i,
                        max: m,
                        multiplier: x,
                    })
                }
                _ => None,
            }
        }
        Some(other) => {
            let msg = format!("expected an object, found {}", json_kind(other));
            w.fail("retry", msg);
            None
        }
    }
}

/// `payload`: any JSON value within the payload size limit.
fn payload(w: &mut Walk<'_>, limits: &Limits) -> Value {
    let payload = w.present("payload").cloned().unwrap_or(Value::Null);
    let encoded = serde_json::to_vec(&payload)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if encoded > limits.max_payload_bytes {
        w.fail(
            "payload",
            format!(
                "is {encoded} bytes encoded; the limit is {} bytes",
                limits.max_payload_bytes
            ),
        );
    }
    payload
}

/// The hint for a field of a schedule written beside it, at the top of the
/// spec, where other tools keep it (`{"cron": …}`, `"timezone"`).
fn misplaced(path: &str, key: &str) -> Option<String> {
    if !path.is_empty() {
        return None;
    }
    match key {
        "cron" | "every" | "at" | "after" | "tz" | "start_at" | "end_at" | "count"
        | "within" => Some(format!(
            "unknown field; {key:?} belongs inside \"schedule\", e.g. {{\"schedule\": {{\"{key}\": …}}}}"
        )),
        "timezone" | "time_zone" | "zone" => Some(
            "unknown field; a cron schedule's zone is \"tz\" inside \"schedule\", \
             e.g. {\"schedule\": {\"cron\": \"0 2 * * *\", \"tz\": \"Europe/Berlin\"}}"
                .to_string(),
        ),
        _ => None,
    }
}

/// Collects problems while walking one JSON object.
struct Walk<'a> {
    obj: &'a Map<String, Value>,
    path: &'a str,
    errors: &'a mut Vec<FieldError>,
}

impl<'a> Walk<'a> {
    fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn fail(&mut self, key: &str, message: impl Into<String>) {
        let path = self.field_path(key);
        self.errors.push(FieldError::new(path, message));
    }

    fn unknown_fields(&mut self, known: &[&str]) {
        let unknown: Vec<String> = self
            .obj
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            let message = match misplaced(self.path, &key) {
                Some(hint) => hint,
                None => crate::suggest::unknown_field(&key, known),
            };
            self.fail(&key, message);
        }
    }

    fn present(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn name(&mut self, key: &str, max: usize, default: Option<&str>) -> Option<String> {
        match self.present(key) {
            None => match default {
                Some(d) => Some(d.to_string()),
                None => {
                    self.fail(key, "is required");
                    None
                }
            },
            Some(Value::String(s)) => match check_name(s, max) {
                Ok(()) => Some(s.clone()),
                Err(e) => {
                    self.fail(key, e);
                    None
                }
            },
            Some(other) => {
                let msg = format!("expected a string, found {}", json_kind(other));
                self.fail(key, msg);
                None
            }
        }
    }

    fn string(&mut self, key: &str, max: usize) -> Option<String> {
        match self.present(key) {
            None => {
                self.fail(key, "is required");
                None
            }
            Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= max => Some(s.clone()),
            Some(Value::String(s)) => {
                let msg = format!("must be 1 to {max} characters, found {}", s.chars().count());
                self.fail(key, msg);
                None
            }
            Some(other) => {
                let msg = format!("expected a string, found {}", json_kind(other));
                self.fail(key, msg);
                None
            }
        }
    }

    fn integer(&mut self, key: &str, min: u64, max: u64, default: Option<u64>) -> Option<u64> {
        match self.present(key) {
            None => default,
            Some(v) => match v.as_u64() {
                Some(n) if (min..=max).contains(&n) => Some(n),
                _ => {
                    let msg = format!("must be an integer from {min} to {max}, found {v}");
                    self.fail(key, msg);
                    None
                }
            },
        }
    }

    /// A DURATION of at most `max` (and more than zero when `positive`).
    fn duration(
        &mut self,
        key: &str,
        default: Duration,
        positive: bool,
        max: Duration,
    ) -> Option<Duration> {
        match self.present(key) {
            None => Some(default),
            Some(v) => match parse_duration(v) {
                Ok(d) if positive && d.is_zero() => {
                    self.fail(key, "must be longer than zero");
                    None
                }
                Ok(d) if !d.subsec_nanos().is_multiple_of(1_000_000) => {
                    // Stored and written in whole milliseconds: a finer
                    // duration would read back as another one.
                    self.fail(
                        key,
                        format!("must be a whole number of milliseconds, found {d:?}"),
                    );
                    None
                }
                Ok(d) => match check_at_most(d, max) {
                    Some(e) => {
                        self.fail(key, e);
                        None
                    }
                    None => Some(d),
                },
                Err(e) => {
                    self.fail(key, e);
                    None
                }
            },
        }
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        match self.present(key) {
            None => Some(false),
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                let msg = format!("expected true or false, found {}", json_kind(other));
                self.fail(key, msg);
                None
            }
        }
    }

    fn choice<T: FromStr<Err = String> + Default>(&mut self, key: &str) -> Option<T> {
        match self.present(key) {
            None => Some(T::default()),
            Some(Value::String(s)) => match s.parse() {
                Ok(v) => Some(v),
                Err(e) => {
                    self.fail(key, e);
                    None
                }
            },
            Some(other) => {
                let msg = format!("expected a string, found {}", json_kind(other));
                self.fail(key, msg);
                None
            }
        }
    }
}

impl JobSpec {
    /// Parses and validates a JobSpec, reporting every problem with its JSON path.
    pub fn from_json(value: &Value, limits: &Limits) -> Result<JobSpec, Vec<FieldError>> {
        let mut errors = Vec::new();
        let Value::Object(obj) = value else {
            return Err(vec![FieldError::new(
                "",
                format!(
                    "a job spec must be a JSON object, found {}",
                    json_kind(value)
                ),
            )]);
        };
        let mut w = Walk {
            obj,
            path: "",
            errors: &mut errors,
        };
        let known = known_fields();
        w.unknown_fields(&known);

        let id = w.name("id", MAX_ID_LEN, None);
        let group = w.name("group", MAX_GROUP_LEN, Some("default"));
        if let Some(Err(e)) = group.as_deref().map(check_group) {
            w.fail("group", e);
        }
        let handler = w.string("handler", MAX_ID_LEN);
        let priority = w.integer("priority", 0, 9, Some(5));
        let timeout = w.duration("timeout", Duration::from_secs(3600), true, MAX_TIMEOUT);
        let overlap = w.choice::<Overlap>("overlap");
        let concurrency = Concurrency::from_json(obj, overlap)
            .map_err(|mut e| w.errors.append(&mut e))
            .ok();
        let misfire = w.choice::<Misfire>("misfire");
        let misfire_threshold = w.duration(
            "misfire_threshold",
            Duration::from_secs(60),
            false,
            MAX_MISFIRE_THRESHOLD,
        );
        let paused = w.boolean("paused");
        let pause_after_alert = w.boolean("pause_after_alert");
        let alert_after_failures = match w.present("alert_after_failures") {
            None => Some(None),
            Some(_) => w
                .integer("alert_after_failures", 1, 1_000_000, None)
                .map(|n| Some(n as u32)),
        };

        let payload = payload(&mut w, limits);

        let on_success = on_success(&mut w, id.as_deref());

        let retry = retry_policy(&mut w);

        let labels = optional_part(obj, "labels", &mut errors, Labels::new, |v| {
            labels_from_json(v, "labels")
        });
        let schedule = required_part(obj, "schedule", &mut errors, |v| {
            ScheduleSpec::from_json(v, "schedule")
        });

        let time = TimeRules::from_json(obj)
            .map_err(|mut e| errors.append(&mut e))
            .ok();
        // What needs the id and the schedule together: H and jitter draw
        // from the id, jitter is bounded by the period, dst needs cron.
        if let (Some(id), Some(schedule), Some(time)) = (&id, &schedule, &time) {
            let options = time.schedule_options(Some(id));
            if let Err(e) = Schedule::compile_with(schedule, DateTime::UNIX_EPOCH, &options) {
                errors.push(e);
            }
            errors.extend(check_fan_in(id, schedule, time));
        }
        // Last, so that a spec wrong in its schedule names that field first.
        if let (Some(handler), true) = (&handler, limits.builtin_payloads) {
            if let Err(mut problems) = crate::payloads::check(handler, &payload, "payload") {
                errors.append(&mut problems);
            }
        }

        match (
            id,
            group,
            schedule,
            handler,
            priority,
            timeout,
            retry,
            overlap,
            concurrency,
            misfire,
            misfire_threshold,
            paused,
            on_success,
            alert_after_failures,
            pause_after_alert,
            labels,
            time,
        ) {
            (
                Some(id),
                Some(group),
                Some(schedule),
                Some(handler),
                Some(priority),
                Some(timeout),
                Some(retry),
                Some(overlap),
                Some(concurrency),
                Some(misfire),
                Some(misfire_threshold),
                Some(paused),
                Some(on_success),
                Some(alert_after_failures),
                Some(pause_after_alert),
                Some(labels),
                Some(time),
            ) if errors.is_empty() => Ok(JobSpec {
                id,
                group,
                schedule,
                handler,
                payload,
                priority: priority as u8,
                timeout,
                retry,
                overlap,
                concurrency,
                misfire,
                misfire_threshold,
                paused,
                on_success,
                alert_after_failures,
                pause_after_alert,
                labels,
                time,
            }),
            _ => Err(errors),
        }
    }

    /// The spec as JSON, as stored and as echoed in replies.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// What this valid spec likely does not mean, for the put reply's
    /// `warnings`: what the spec alone shows (numbered days of the week in a
    /// 6- or 7-field cron expression). The scheduler adds what only it
    /// knows, such as the handlers its live workers offer.
    pub fn warnings(&self) -> Vec<crate::warning::Warning> {
        self.schedule.warnings("schedule")
    }

    /// The timeout, formatted.
    pub fn timeout_text(&self) -> String {
        format_duration(self.timeout)
    }
}

/// What a fan-in (`after`) schedule refuses of the rest of its job: naming
/// the job itself, and calendars (a fan-in firing has no local date of its
/// own to exclude; it fires when its upstreams have succeeded).
fn check_fan_in(id: &str, schedule: &ScheduleSpec, time: &TimeRules) -> Vec<FieldError> {
    let mut errors: Vec<FieldError> = schedule
        .after()
        .iter()
        .enumerate()
        .filter(|(_, upstream)| *upstream == id)
        .map(|(i, _)| {
            FieldError::new(
                format!("schedule.after[{i}]"),
                "names the job itself; a job cannot wait for its own success",
            )
        })
        .collect();
    if schedule.is_fan_in() && !time.exclude.is_empty() {
        errors.push(FieldError::new(
            "exclude",
            "does not apply to a fan-in (\"after\") schedule, which has no instants",
        ));
    }
    errors
}

/// A job's lifecycle state.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Fires on its schedule.
    #[default]
    Active,
    /// Kept, not firing; resuming applies the misfire policy to what was missed.
    Paused,
    /// The schedule has no further instants.
    Completed,
}

/// A job as Chime keeps it: the spec plus what Chime knows about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    #[serde(flatten)]
    pub spec: JobSpec,
    pub state: JobState,
    #[serde(default, with = "rfc3339_ms_opt")]
    pub next_fire_at: Option<DateTime<Utc>>,
    /// A paused job resumes by itself at this instant (`jobs.pause` with
    /// `until`); absent when paused without an end or not paused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub paused_until: Option<DateTime<Utc>>,
    pub version: i64,
    #[serde(with = "rfc3339_ms")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub updated_at: DateTime<Utc>,
    /// The jobs of a fan-in `schedule.after` that do not exist (never put,
    /// or deleted): the job cannot fire until they are put. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_missing: Vec<String>,
    /// When the job's newest succeeded firing finished (`job_outcomes`),
    /// so the stalest job can be found without reading every history:
    /// written by `jobs.get` and `jobs.list`, absent when the job has not
    /// succeeded since it was put.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub last_success_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> Value {
        json!({"id": "nightly-report", "schedule": {"cron": "0 30 2 * * *"}, "handler": "shell",
            "payload": {"argv": ["/usr/local/bin/report"]}})
    }

    fn fields(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn defaults_fill_a_minimal_spec() {
        let spec = JobSpec::from_json(&minimal(), &Limits::default()).unwrap();
        assert_eq!(spec.group, "default");
        assert_eq!(spec.priority, 5);
        assert_eq!(spec.timeout, Duration::from_secs(3600));
        assert_eq!(spec.retry.max_attempts, 1);
        assert_eq!(spec.overlap, Overlap::Allow);
        assert_eq!(spec.misfire, Misfire::FireOnce);
        assert_eq!(spec.misfire_threshold, Duration::from_secs(60));
        assert!(!spec.paused);
    }

    #[test]
    fn the_contract_example_parses_and_round_trips() {
        let v = json!({
            "id": "nightly-report", "group": "reports",
            "schedule": {"cron": "0 30 2 * * *", "tz": "Europe/Berlin"},
            "handler": "shell", "payload": {"argv": ["/usr/local/bin/report", "--daily"]},
            "priority": 5, "timeout": "10m",
            "retry": {"max_attempts": 3, "initial": "1s", "max": "5m", "multiplier": 2.0},
            "overlap": "allow", "misfire": "fire_once", "misfire_threshold": "60s", "paused": false
        });
        let spec = JobSpec::from_json(&v, &Limits::default()).unwrap();
        assert_eq!(spec.retry.max_attempts, 3);
        assert_eq!(spec.timeout, Duration::from_secs(600));
        let again = JobSpec::from_json(&spec.to_json(), &Limits::default()).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let v = json!({
            "id": "bad id!", "schedule": {"cron": "0 61 * * *"}, "handler": 5,
            "priority": 12, "retry": {"max_attempts": 0, "bogus": 1}, "overlap": "sometimes",
            "colour": "red"
        });
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        let f = fields(&errors);
        for expected in [
            "id",
            "schedule.cron",
            "handler",
            "priority",
            "retry.max_attempts",
            "retry.bogus",
            "overlap",
            "colour",
        ] {
            assert!(f.contains(&expected), "missing {expected} in {f:?}");
        }
    }

    #[test]
    fn required_fields_are_named() {
        let errors = JobSpec::from_json(&json!({}), &Limits::default()).unwrap_err();
        let f = fields(&errors);
        assert!(f.contains(&"id") && f.contains(&"schedule") && f.contains(&"handler"));
        let errors = JobSpec::from_json(&json!([1]), &Limits::default()).unwrap_err();
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn oversized_payloads_are_refused() {
        let mut v = minimal();
        v["handler"] = json!("report");
        v["payload"] = json!("x".repeat(70 * 1024));
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), vec!["payload"]);
        let small = Limits {
            max_payload_bytes: 10 * 1024 * 1024,
            ..Limits::default()
        };
        assert!(JobSpec::from_json(&v, &small).is_ok());
    }

    #[test]
    fn read_only_job_fields_are_ignored_on_put() {
        let mut v = minimal();
        v["state"] = json!("active");
        v["version"] = json!(3);
        assert!(JobSpec::from_json(&v, &Limits::default()).is_ok());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("a.b_c-9", 128).is_ok());
        assert!(check_name("", 128).is_err());
        assert!(check_name("a b", 128).is_err());
        assert!(check_name(&"x".repeat(65), 64).is_err());
        assert!(check_group("eu.reports").is_ok());
        for bad in [".a", "a.", "a..b"] {
            assert!(check_group(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_beyond_their_range_are_refused_with_their_path() {
        let mut v = minimal();
        v["timeout"] = json!("300000y");
        v["misfire_threshold"] = json!("31d");
        v["retry"] = json!({"initial": "300000y", "max": 4_611_686_018_427_387_904u64});
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        let mut f = fields(&errors);
        f.sort();
        assert_eq!(
            f,
            vec!["misfire_threshold", "retry.initial", "retry.max", "timeout"]
        );
        for e in &errors {
            assert!(e.message.contains("at most"), "{e}");
        }
        v = minimal();
        v["timeout"] = json!("30d");
        v["retry"] = json!({"initial": "30d", "max": "30d"});
        v["misfire_threshold"] = json!("30d");
        assert!(JobSpec::from_json(&v, &Limits::default()).is_ok());
    }

    #[test]
    fn durations_finer_than_a_millisecond_are_refused() {
        for (key, value) in [
            ("timeout", "1us"),
            ("timeout", "1500us"),
            ("misfire_threshold", "1ns"),
        ] {
            let mut v = minimal();
            v[key] = json!(value);
            let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
            assert_eq!(fields(&errors), vec![key], "{value}");
        }
        let mut v = minimal();
        v["retry"] = json!({"initial": "0.5ms"});
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), vec!["retry.initial"]);
    }

    #[test]
    fn on_success_drops_duplicates_and_refuses_the_job_itself() {
        let mut v = minimal();
        v["on_success"] = json!(["a", "b", "a", "b", "c"]);
        let spec = JobSpec::from_json(&v, &Limits::default()).unwrap();
        assert_eq!(spec.on_success, vec!["a", "b", "c"]);
        v["on_success"] = json!(vec!["nightly-report"; 16]);
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert!(errors.iter().all(|e| e.field.starts_with("on_success[")));
        assert!(errors[0].message.contains("itself"), "{}", errors[0]);
    }

    #[test]
    fn labels_are_kept_and_checked_with_their_paths() {
        let mut v = minimal();
        v["labels"] = json!({"team": "data", "env": ""});
        let spec = JobSpec::from_json(&v, &Limits::default()).unwrap();
        assert_eq!(spec.labels.get("team").map(String::as_str), Some("data"));
        assert_eq!(spec.to_json()["labels"], json!({"env": "", "team": "data"}));
        assert!(minimal_spec().to_json().get("labels").is_none());
        v["labels"] = json!({"Team": "x", "ok": 1});
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        let mut f = fields(&errors);
        f.sort();
        assert_eq!(f, vec!["labels.Team", "labels.ok"]);
    }

    #[test]
    fn if_version_is_read_beside_the_spec_and_never_kept() {
        let mut v = minimal();
        assert_eq!(if_version(&v), Ok(None));
        v["if_version"] = json!(3);
        assert_eq!(if_version(&v), Ok(Some(3)));
        let spec = JobSpec::from_json(&v, &Limits::default()).unwrap();
        assert!(spec.to_json().get("if_version").is_none());
        for bad in [json!(-1), json!("3"), json!(1.5)] {
            v["if_version"] = bad;
            assert_eq!(if_version(&v).unwrap_err().field, "if_version");
        }
    }

    fn minimal_spec() -> JobSpec {
        JobSpec::from_json(&minimal(), &Limits::default()).unwrap()
    }

    #[test]
    fn a_fan_in_refuses_itself_and_calendars() {
        let mut v = minimal();
        v["schedule"] = json!({"after": ["a", "nightly-report"], "within": "1h"});
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), vec!["schedule.after[1]"]);
        v["schedule"] = json!({"after": ["a"]});
        assert!(JobSpec::from_json(&v, &Limits::default()).is_ok());
        v["exclude"] = json!(["holidays"]);
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), vec!["exclude"]);
        v["exclude"] = json!([]);
        v["jitter"] = json!("1s");
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), vec!["jitter"]);
        v["jitter"] = Value::Null;
        v["upstream_missing"] = json!(["a"]);
        assert!(JobSpec::from_json(&v, &Limits::default()).is_ok());
    }

    #[test]
    fn built_in_payloads_are_checked_with_their_paths() {
        for (handler, payload, expected) in [
            ("shell", Value::Null, vec!["payload.argv"]),
            (
                "shell",
                json!({"cmd": "report --daily"}),
                vec!["payload.cmd", "payload.argv"],
            ),
            (
                "shell",
                json!({"argv": ["x"], "env": {"FOO": 1}}),
                vec!["payload.env.FOO"],
            ),
            ("http", json!({}), vec!["payload.url"]),
            ("http", json!({"url": "ftp://x"}), vec!["payload.url"]),
            (
                "http",
                json!({"url": "http://x.test", "method": "GE T"}),
                vec!["payload.method"],
            ),
        ] {
            let mut v = minimal();
            v["handler"] = json!(handler);
            v["payload"] = payload.clone();
            let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
            assert_eq!(fields(&errors), expected, "{handler} {payload}");
            // A stored job is read back whatever its payload.
            let spec = JobSpec::from_json(&v, &Limits::stored()).unwrap();
            assert_eq!(spec.payload, payload);
        }
        let mut v = minimal();
        v["handler"] = json!("report");
        v["payload"] = json!({"cmd": 1});
        assert!(JobSpec::from_json(&v, &Limits::default()).is_ok());
    }

    #[test]
    fn a_job_read_from_a_reply_keeps_its_payload_as_sent() {
        let mut v = minimal();
        v["payload"] = json!({"redacted": "sha256:00"});
        let spec: JobSpec = serde_json::from_value(v).unwrap();
        assert_eq!(spec.payload, json!({"redacted": "sha256:00"}));
    }

    #[test]
    fn unknown_fields_say_what_was_meant() {
        let mut v = minimal();
        v["retries"] = json!(3);
        v["scheduel"] = json!({"cron": "0 * * * *"});
        v["colour"] = json!("red");
        v["retry"] = json!({"max_attempt": 3});
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        let message = |field: &str| {
            errors
                .iter()
                .find(|e| e.field == field)
                .map(|e| e.message.clone())
                .unwrap_or_else(|| panic!("no error at {field}: {errors:?}"))
        };
        assert!(message("retries").contains("did you mean `retry`?"));
        assert!(message("scheduel").contains("did you mean `schedule`?"));
        assert!(message("retry.max_attempt").contains("did you mean `max_attempts`?"));
        assert!(!message("colour").contains("did you mean"));
        assert!(message("colour").contains("known fields are id, group, schedule"));
    }

    #[test]
    fn schedule_fields_beside_the_schedule_are_pointed_inside_it() {
        let mut v = minimal();
        v.as_object_mut().unwrap().remove("schedule");
        v["cron"] = json!("0 2 * * *");
        v["timezone"] = json!("Europe/Berlin");
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        let f = fields(&errors);
        assert!(f.contains(&"cron") && f.contains(&"timezone") && f.contains(&"schedule"));
        let cron = errors.iter().find(|e| e.field == "cron").unwrap();
        assert!(
            cron.message.contains(r#"{"schedule": {"cron": …}}"#),
            "{cron}"
        );
        let tz = errors.iter().find(|e| e.field == "timezone").unwrap();
        assert!(tz.message.contains(r#""tz" inside "schedule""#), "{tz}");
    }

    #[test]
    fn retry_max_shorter_than_initial_is_refused() {
        let mut v = minimal();
        v["retry"] = json!({"initial": "10s", "max": "1s"});
        let errors = JobSpec::from_json(&v, &Limits::default()).unwrap_err();
        assert_eq!(fields(&errors), vec!["retry.max"]);
    }
}
