//! The bodies of Chime's fuzz targets, one function per target
//! (docs/FUZZING.md).
//!
//! `fuzz/` runs each under libFuzzer on nightly; the `fuzz_corpus` suite
//! replays every committed input through the very same function on stable,
//! so an input that once failed keeps being checked. Each body takes
//! arbitrary bytes, returns quietly for input Chime refuses, and panics only
//! when Chime itself panics or a property of what it accepted fails.
//!
//! Inputs are text where that keeps the corpus readable:
//!
//! | target | input |
//! |---|---|
//! | `jobspec` | a JobSpec as JSON |
//! | `schedule` | line 1: an instant, integer milliseconds since the epoch; line 2: a schedule object as JSON, or a cron expression; line 3 (cron only): its time zone |
//! | `firing_headers` | `Name: value` header lines, an empty line, the body |
//! | `protocol` | one worker-protocol message as JSON, read as every message type |
//! | `api_request` | line 1: the verb (`jobs.put`); the rest: the request body |

use chime_common::api::{BackfillRequest, ListAlertsRequest, TriggerRequest, MAX_PAGE};
use chime_common::bounds::{check_name, MAX_ID_LEN};
use chime_common::protocol::{
    doorbell_bands, doorbell_body, Alert, CancelRequest, Finished, StartReply, StartRequest,
    WorkerInfo,
};
use chime_common::schedule::{Schedule, ScheduleSpec};
use chime_common::{ErrorCode, JobSpec, Limits};
use chime_scheduler::intake::api::{ApiConfig, ApiRequest, PauseTarget};
use chime_scheduler::store::{AuditFilter, FiringFilter, JobFilter};
use chime_worker::firing::message::FiringMessage;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::fmt::Debug;
use std::str::FromStr;

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/`.
pub const TARGETS: [(&str, Target); 5] = [
    ("jobspec", jobspec),
    ("schedule", schedule),
    ("firing_headers", firing_headers),
    ("protocol", protocol),
    ("api_request", api_request),
];

/// How many instants the schedule targets follow from each start.
const INSTANTS_FOLLOWED: usize = 8;

/// Any bytes as a JobSpec: parsing never panics; an accepted spec is written
/// back and read again unchanged, and its schedule compiles.
pub fn jobspec(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if let Ok(spec) = JobSpec::from_json(&value, &Limits::default()) {
        accepted_spec_round_trips(&spec);
    }
}

fn accepted_spec_round_trips(spec: &JobSpec) {
    let written = spec.to_json();
    let again = JobSpec::from_json(&written, &Limits::default()).unwrap_or_else(|e| {
        panic!("the accepted spec {spec:?}, written as {written}, is refused: {e:?}")
    });
    assert_eq!(
        &again, spec,
        "the spec written as {written} reads back changed"
    );
    // A validated schedule compiles whenever the job is put (spec.rs).
    for anchor in [
        DateTime::<Utc>::MIN_UTC,
        DateTime::UNIX_EPOCH,
        DateTime::<Utc>::MAX_UTC,
    ] {
        if let Err(e) = Schedule::compile(&spec.schedule, anchor) {
            panic!("the accepted schedule {written} does not compile at {anchor}: {e}");
        }
    }
}

/// Any schedule from any instant: validation and compilation never panic,
/// the spec survives a round trip through JSON, and the instants that follow
/// each other strictly increase.
pub fn schedule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let Some(Ok(from_ms)) = lines.next().map(|l| i64::from_str(l.trim())) else {
        return;
    };
    let from = clamped_instant(from_ms);
    let expression = lines.next().unwrap_or("");
    let value = if expression.trim_start().starts_with('{') {
        match serde_json::from_str::<Value>(expression) {
            Ok(v) => v,
            Err(_) => return,
        }
    } else {
        match lines.next() {
            Some(tz) => serde_json::json!({"cron": expression, "tz": tz}),
            None => serde_json::json!({"cron": expression}),
        }
    };
    let Ok(spec) = ScheduleSpec::from_json(&value, "schedule") else {
        return;
    };
    let written = serde_json::to_value(&spec).expect("a schedule serialises");
    match ScheduleSpec::from_json(&written, "schedule") {
        Ok(again) => assert_eq!(
            again, spec,
            "the schedule written as {written} reads back changed"
        ),
        Err(e) => panic!("the accepted schedule {value}, written as {written}, is refused: {e:?}"),
    }
    let compiled = Schedule::compile(&spec, from).unwrap_or_else(|e| {
        panic!("the accepted schedule {written} does not compile at {from}: {e}")
    });
    let mut previous = from;
    for _ in 0..INSTANTS_FOLLOWED {
        let Some(next) = compiled.next_after(previous) else {
            break;
        };
        assert!(
            next > previous,
            "{written}: the instant after {previous} is {next}"
        );
        previous = next;
    }
}

/// An instant from milliseconds, held inside what chrono represents.
fn clamped_instant(ms: i64) -> DateTime<Utc> {
    let min = DateTime::<Utc>::MIN_UTC.timestamp_millis();
    let max = DateTime::<Utc>::MAX_UTC.timestamp_millis();
    DateTime::from_timestamp_millis(ms.clamp(min, max)).expect("clamped into chrono's range")
}

/// Any headers and body as a firing message, read as the worker reads one:
/// never a panic, and what is accepted is consistent (the firing id names
/// the job and attempt, the priority is 0–9).
pub fn firing_headers(data: &[u8]) {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    // The NATS client refuses a message whose headers are not UTF-8.
    let Ok(head) = std::str::from_utf8(head) else {
        return;
    };
    let headers = nats_headers(head);
    let Ok(message) = FiringMessage::parse(headers.as_ref(), body) else {
        return;
    };
    let firing = &message.firing;
    assert_eq!(firing.firing_id.job_id, firing.job_id, "{message:?}");
    assert_eq!(firing.firing_id.attempt, firing.attempt, "{message:?}");
    assert!(firing.priority <= 9, "{message:?}");
    assert!(!firing.handler.is_empty(), "{message:?}");
}

/// Header lines as async-nats reads them off the wire (`connection.rs`):
/// `Name: value`, the value trimmed, a repeated name appended. Lines the
/// client would refuse are left out; no lines at all is a message without
/// headers.
fn nats_headers(head: &str) -> Option<async_nats::HeaderMap> {
    if head.is_empty() {
        return None;
    }
    let mut headers = async_nats::HeaderMap::new();
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            async_nats::HeaderName::from_str(name),
            async_nats::HeaderValue::from_str(value.trim()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    Some(headers)
}

/// Any bytes as each message of the worker protocol: never a panic, and
/// what is accepted is written in a form that reads back to the same
/// writing (instants are written to the millisecond, so a finer one read
/// once is normalised, never changed again).
pub fn protocol(data: &[u8]) {
    rewrites_stably::<StartRequest>(data);
    rewrites_stably::<StartReply>(data);
    rewrites_stably::<Finished>(data);
    rewrites_stably::<CancelRequest>(data);
    rewrites_stably::<WorkerInfo>(data);
    rewrites_stably::<Alert>(data);
    let bands = doorbell_bands(data);
    assert!(!bands.is_empty(), "a doorbell names at least one band");
    assert_eq!(
        doorbell_bands(doorbell_body(bands.iter().copied()).as_bytes()),
        {
            let mut sorted = bands.clone();
            sorted.sort();
            sorted.dedup();
            sorted
        },
        "the doorbell of {bands:?}"
    );
}

fn rewrites_stably<T: Serialize + DeserializeOwned + PartialEq + Debug>(data: &[u8]) {
    let Ok(first) = serde_json::from_slice::<T>(data) else {
        return;
    };
    let written = serde_json::to_vec(&first).expect("a parsed message serialises");
    let read: T = serde_json::from_slice(&written).unwrap_or_else(|e| {
        panic!(
            "{} written as {} is refused: {e}",
            std::any::type_name::<T>(),
            String::from_utf8_lossy(&written)
        )
    });
    let rewritten = serde_json::to_vec(&read).expect("a parsed message serialises");
    assert_eq!(
        String::from_utf8_lossy(&rewritten),
        String::from_utf8_lossy(&written),
        "{} does not read back as written",
        std::any::type_name::<T>()
    );
    assert_eq!(
        serde_json::from_slice::<T>(&rewritten).ok().as_ref(),
        Some(&read)
    );
}

/// The instant API requests are checked at (the default `from` of a preview).
const API_NOW_MS: i64 = 1_774_661_400_000;

/// Any verb and body through the API's checks that need no store: never a
/// panic; a refusal is the client's fault (`invalid_argument`, or
/// `not_found` for an unknown verb), never `internal`; a preview answers at
/// most the instants asked for, increasing; an accepted put round-trips.
pub fn api_request(data: &[u8]) {
    let (verb, body) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(verb) = std::str::from_utf8(verb) else {
        return;
    };
    let config = ApiConfig::default();
    let now = clamped_instant(API_NOW_MS);
    match ApiRequest::parse(verb, body, &config, now) {
        Err(e) => assert!(
            matches!(e.code, ErrorCode::InvalidArgument | ErrorCode::NotFound),
            "{verb}: refused as {e:?}"
        ),
        Ok(ApiRequest::PutJob(spec, _)) => accepted_spec_round_trips(&spec),
        Ok(ApiRequest::Preview(preview)) => {
            let times: Vec<DateTime<Utc>> = preview.instants.iter().map(|(t, _)| *t).collect();
            assert!(
                times.len() <= config.max_preview as usize,
                "{verb}: {} instants",
                times.len()
            );
            for t in &times {
                let written = chime_common::duration::format_time(*t);
                chime_common::duration::parse_time_str(&written)
                    .unwrap_or_else(|e| panic!("{verb}: the preview wrote {written:?}: {e}"));
            }
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "{verb}: the preview is not increasing: {times:?}"
            );
        }
        Ok(
            ApiRequest::GetJob(id)
            | ApiRequest::DeleteJob(id)
            | ApiRequest::SetPaused(PauseTarget::One(id), _),
        ) => {
            assert_eq!(
                check_name(&id, MAX_ID_LEN),
                Ok(()),
                "{verb}: accepted id {id:?}"
            );
        }
        Ok(ApiRequest::Trigger(TriggerRequest { id, .. }))
        | Ok(ApiRequest::Backfill(BackfillRequest { id, .. })) => {
            assert_eq!(
                check_name(&id, MAX_ID_LEN),
                Ok(()),
                "{verb}: accepted id {id:?}"
            );
        }
        Ok(ApiRequest::ListJobs(JobFilter { limit, .. }))
        | Ok(ApiRequest::ListFirings(FiringFilter { limit, .. }))
        | Ok(ApiRequest::ListAudit(AuditFilter { limit, .. }))
        | Ok(ApiRequest::ListAlerts(ListAlertsRequest {
            limit: Some(limit), ..
        })) => {
            assert!(
                (1..=MAX_PAGE).contains(&limit),
                "{verb}: accepted limit {limit}"
            );
        }
        Ok(ApiRequest::ListAlerts(ListAlertsRequest { limit: None, .. })) => {
            panic!("{verb}: the alert page size was not settled")
        }
        Ok(ApiRequest::CancelFiring(id) | ApiRequest::GetFiring(id)) => {
            assert_eq!(
                check_name(&id.job_id, MAX_ID_LEN).err(),
                None::<String>,
                "{verb}: accepted firing id {id}"
            );
        }
        Ok(ApiRequest::ListWorkers(_) | ApiRequest::SetPaused(PauseTarget::Many(_), _)) => {}
        Ok(ApiRequest::PutCalendar(calendar)) => {
            let again = chime_common::calendars::Calendar::from_json(
                &serde_json::to_value(&calendar).expect("a calendar encodes"),
            );
            assert_eq!(
                again.as_ref(),
                Ok(&calendar),
                "{verb}: the calendar does not round-trip"
            );
        }
        Ok(ApiRequest::GetCalendar(id) | ApiRequest::DeleteCalendar(id)) => {
            assert_eq!(
                check_name(&id, MAX_ID_LEN),
                Ok(()),
                "{verb}: accepted id {id:?}"
            );
        }
        Ok(ApiRequest::PutGroup(limits)) => {
            let again = chime_common::concurrency::GroupLimits::from_json(
                &serde_json::to_value(&limits).expect("group limits encode"),
            );
            assert_eq!(
                again.as_ref(),
                Ok(&limits),
                "{verb}: the group limits do not round-trip"
            );
        }
        Ok(ApiRequest::GetGroup(name)) => {
            assert_eq!(
                chime_common::bounds::check_group(&name),
                Ok(()),
                "{verb}: accepted group {name:?}"
            );
        }
        Ok(ApiRequest::ListCalendars | ApiRequest::ListGroups) => {}
    }
}
