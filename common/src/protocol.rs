//! The worker protocol's messages (docs/PROTOCOL.md).
//!
//! A worker that receives a firing asks the scheduler to start it
//! ([`StartRequest`] → [`StartReply`], request/reply), acks the JetStream
//! message once the start is accepted, runs the handler, and reports a
//! [`Finished`] event on JetStream. It heartbeats a [`WorkerInfo`] into the
//! workers KV bucket and listens for [`CancelRequest`]s on its own subject.

use crate::band::Band;
use crate::duration::{rfc3339_ms, rfc3339_ms_opt};
use crate::firing::FiringId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The body of a doorbell (`chime.ready.<group>`): the bands that just got
/// firings, comma-separated (`"normal"`, `"high,low"`), so a worker fetches
/// only those instead of every band.
pub fn doorbell_body(bands: impl IntoIterator<Item = Band>) -> String {
    let bands: std::collections::BTreeSet<Band> = bands.into_iter().collect();
    let names: Vec<&str> = bands.into_iter().map(Band::as_str).collect();
    names.join(",")
}

/// The bands a doorbell names; every band for an empty body or one this
/// worker cannot read (an older or newer scheduler).
pub fn doorbell_bands(body: &[u8]) -> Vec<Band> {
    let named: Option<Vec<Band>> = std::str::from_utf8(body).ok().and_then(|text| {
        text.split(',')
            .map(|name| name.trim().parse::<Band>().ok())
            .collect()
    });
    match named {
        Some(bands) if !bands.is_empty() => bands,
        _ => Band::ALL.to_vec(),
    }
}

/// Sent by a worker on `chime.worker.v1.start.<group>.<worker id>` before
/// it runs a firing.
///
/// `handler` and `payload_sha256` say what the worker received; the
/// scheduler starts the firing only if they match what it staged, so a
/// message published on `chime.fire.>` by anyone else runs nothing. They are
/// optional on the wire for workers written before them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartRequest {
    pub firing_id: FiringId,
    pub worker_id: String,
    pub group: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_sha256: Option<String>,
}

/// The lower-case hex SHA-256 of a firing message's body, the digest a
/// worker sends in [`StartRequest::payload_sha256`].
pub fn payload_sha256(body: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(body))
}

/// Why a start was refused; the worker acks the message and does not run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartRefusal {
    /// Another worker already started this attempt.
    AlreadyStarted,
    /// The firing already reached a final state.
    AlreadyFinished,
    /// No such firing (e.g. history was pruned, or the job was deleted).
    UnknownFiring,
    /// `overlap: forbid`: the previous firing still runs; this one is recorded `skipped`.
    Skipped,
    /// Held by a concurrency limit (the job's `max_concurrent` under
    /// `overlap: queue` or `allow`, or its group's limits) until a slot
    /// frees, then published again.
    Queued,
    /// The firing was cancelled (job deleted or replaced).
    Cancelled,
    /// The firing belongs to another group than the requesting worker's.
    WrongGroup,
    /// The request's handler or payload digest differ from what was staged:
    /// the message was not the scheduler's.
    NotAsStaged,
    /// The request's subject names another worker or group than its body.
    WrongWorker,
}

impl StartRefusal {
    /// Every refusal.
    pub const ALL: [StartRefusal; 9] = [
        StartRefusal::AlreadyStarted,
        StartRefusal::AlreadyFinished,
        StartRefusal::UnknownFiring,
        StartRefusal::Skipped,
        StartRefusal::Queued,
        StartRefusal::Cancelled,
        StartRefusal::WrongGroup,
        StartRefusal::NotAsStaged,
        StartRefusal::WrongWorker,
    ];

    /// The wire name, also the `reason` label of the scheduler's and the
    /// worker's refusal metrics, which must agree.
    pub fn as_str(self) -> &'static str {
        match self {
            StartRefusal::AlreadyStarted => "already_started",
            StartRefusal::AlreadyFinished => "already_finished",
            StartRefusal::UnknownFiring => "unknown_firing",
            StartRefusal::Skipped => "skipped",
            StartRefusal::Queued => "queued",
            StartRefusal::Cancelled => "cancelled",
            StartRefusal::WrongGroup => "wrong_group",
            StartRefusal::NotAsStaged => "not_as_staged",
            StartRefusal::WrongWorker => "wrong_worker",
        }
    }
}

impl std::fmt::Display for StartRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The scheduler's answer to a [`StartRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartReply {
    /// Run it (true) or drop it (false).
    pub accepted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<StartRefusal>,
    /// When the run must be cut off (start + the job's timeout).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub deadline: Option<DateTime<Utc>>,
}

impl StartReply {
    /// Accepted, to finish by `deadline`.
    pub fn accepted(deadline: DateTime<Utc>) -> Self {
        StartReply {
            accepted: true,
            refusal: None,
            deadline: Some(deadline),
        }
    }

    /// Refused for `why`.
    pub fn refused(why: StartRefusal) -> Self {
        StartReply {
            accepted: false,
            refusal: Some(why),
            deadline: None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
}

impl Outcome {
    /// The wire name, also the `outcome` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Why a worker stopped a run that its handler did not end: a fault of the
/// infrastructure, not of the job. The scheduler runs such an attempt again
/// without spending the job's `max_attempts` (docs/PROTOCOL.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Interruption {
    /// The worker fenced itself: no heartbeat was acknowledged for its lease.
    Fenced,
    /// The worker shut down and the run outlived the drain grace.
    Shutdown,
    /// A name this scheduler does not know (a newer worker): still an
    /// interruption.
    #[serde(other)]
    Other,
}

impl Interruption {
    /// The wire name, also the `cause` label of the requeue metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Interruption::Fenced => "fenced",
            Interruption::Shutdown => "shutdown",
            Interruption::Other => "other",
        }
    }
}

/// Published by a worker on JetStream `chime.events.finished` when a run ends.
///
/// Its `Nats-Msg-Id` is `finished:<firing id>`, so a re-sent report is dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    pub firing_id: FiringId,
    pub worker_id: String,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set when the worker stopped the run for a fault of its own or of
    /// NATS (`failed` or `cancelled` outcome); absent for every other end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
    /// The tail of the run's output (bounded by the worker, 64 KiB by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(with = "rfc3339_ms")]
    pub started_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub finished_at: DateTime<Utc>,
}

/// Sent by the scheduler on core NATS `chime.cancel.<worker id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelRequest {
    pub firing_id: FiringId,
    /// Why, for the firing's recorded error (`replaced`, `job deleted`, ...).
    pub reason: String,
}

/// The most firing ids a heartbeat lists in `running`; a worker running
/// more leaves the field out (docs/PROTOCOL.md §7).
pub const MAX_LISTED_RUNNING: usize = 1_000;

/// The key of a worker's heartbeat in `chime-workers`: `<group>.<worker id>`.
/// The group in the key lets NATS permissions confine a group's workers to
/// their own group's keys (`$KV.chime-workers.<group>.*`), so no worker can
/// forge or delete a heartbeat of another group.
pub fn heartbeat_key(group: &str, worker_id: &str) -> String {
    format!("{group}.{worker_id}")
}

/// A heartbeat key read back: its group and worker id. Worker ids have no
/// dots, so the id is the last token and the group everything before it. A
/// key without a dot is the older form, the worker id alone, whose group
/// only the heartbeat's body names.
pub fn parse_heartbeat_key(key: &str) -> (Option<&str>, &str) {
    match key.rsplit_once('.') {
        Some((group, id)) => (Some(group), id),
        None => (None, key),
    }
}

/// Whether a heartbeat read under `key` may be believed: a body naming
/// another group than its key is a forgery (or a broken worker) and is not.
pub fn heartbeat_matches_key(key: &str, info: &WorkerInfo) -> bool {
    let (group, id) = parse_heartbeat_key(key);
    id == info.id && group.is_none_or(|group| group == info.group)
}

/// A worker's heartbeat, the value of its key in the `chime-workers` bucket
/// (also the `Worker` of `workers.list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkerInfo {
    pub id: String,
    pub group: String,
    pub threads: u32,
    pub in_flight: u32,
    pub version: String,
    #[serde(with = "rfc3339_ms")]
    pub started_at: DateTime<Utc>,
    /// The firings the worker runs now: each start it asked for and has not
    /// given up on, or was answered `accepted`, whose finished event
    /// JetStream has not yet acknowledged. Left out past
    /// [`MAX_LISTED_RUNNING`] ids, and by workers that do not list them;
    /// the scheduler then judges the worker by its key alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>)]
    pub running: Option<Vec<FiringId>>,
    /// The handlers the worker runs: those it would not refuse (a handler
    /// left out of `--handlers`, or `shell` without `--allow-shell`, is not
    /// listed). Absent from workers that do not say; the scheduler then
    /// takes them to offer any handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handlers: Option<Vec<String>>,
    /// The worker takes offers: it hears its offer subject and runs the
    /// firings of broadcast jobs addressed to it (docs/PROTOCOL.md §4,
    /// "Offers"). A worker that does not say gets no share of a broadcast.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offers: bool,
    /// When the bucket last received this heartbeat: filled in by
    /// `workers.list` from the key's write time (extension); workers leave
    /// it out.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::duration::rfc3339_ms_opt"
    )]
    #[schema(value_type = Option<String>)]
    pub heartbeat_at: Option<DateTime<Utc>>,
}

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A firing ended `failed` after its last attempt.
    FiringFailed,
    /// A firing ended `lost`: its worker vanished and no attempts remain.
    FiringLost,
    /// A job failed `alert_after_failures` times in a row.
    RepeatedFailures,
    /// A published firing was not started by any worker in time.
    NotStarted,
    /// A message (finished event, start request, submission) could not be
    /// applied after its retries and was moved to `chime.dead.<kind>`.
    DeadLetter,
    /// JetStream refused a firing because its stream reached a size limit;
    /// the firing stays staged and is retried.
    StreamFull,
    /// A replica's clock is off the database's by more than the limit; it
    /// claims no slices until fixed.
    ClockOffset,
    /// A firing started later than its instant by more than its job's
    /// `max_lateness` (`lateness_ms` says by how much).
    Late,
    /// An instant was recorded `skipped` by the misfire policy, or by a
    /// calendar of a job with `alert_on_excluded`.
    Missed,
    /// An executing firing was run again because its worker, heartbeating,
    /// did not list it as running (docs/PROTOCOL.md §7).
    NotRunning,
}

impl AlertKind {
    /// The wire name, also the `kind` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::FiringFailed => "firing_failed",
            AlertKind::FiringLost => "firing_lost",
            AlertKind::RepeatedFailures => "repeated_failures",
            AlertKind::NotStarted => "not_started",
            AlertKind::DeadLetter => "dead_letter",
            AlertKind::StreamFull => "stream_full",
            AlertKind::ClockOffset => "clock_offset",
            AlertKind::Late => "late",
            AlertKind::Missed => "missed",
            AlertKind::NotRunning => "not_running",
        }
    }
}

/// A JSON event on `chime.alerts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Alert {
    pub kind: AlertKind,
    pub job_id: String,
    pub group: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub firing_id: Option<FiringId>,
    pub message: String,
    #[serde(with = "rfc3339_ms")]
    pub at: DateTime<Utc>,
    /// For `repeated_failures`: how many in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
    /// For `repeated_failures` with `pause_after_alert`: the job was paused.
    #[serde(default)]
    pub paused: bool,
    /// For `late`: how much later than its instant the firing started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lateness_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_keys_name_group_and_worker() {
        assert_eq!(heartbeat_key("etl.nightly", "w-1"), "etl.nightly.w-1");
        assert_eq!(
            parse_heartbeat_key("etl.nightly.w-1"),
            (Some("etl.nightly"), "w-1")
        );
        assert_eq!(parse_heartbeat_key("w-1"), (None, "w-1"));
    }

    #[test]
    fn the_payload_digest_is_lower_case_hex_sha256() {
        assert_eq!(
            payload_sha256(b"test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        assert_eq!(payload_sha256(b"").len(), 64);
    }

    #[test]
    fn doorbells_name_their_bands_and_fall_back_to_all() {
        assert_eq!(
            doorbell_body([Band::Low, Band::High, Band::Low]),
            "high,low"
        );
        assert_eq!(doorbell_bands(b"high,low"), [Band::High, Band::Low]);
        assert_eq!(doorbell_bands(b"normal"), [Band::Normal]);
        assert_eq!(doorbell_bands(b""), Band::ALL);
        assert_eq!(doorbell_bands(b"urgent"), Band::ALL);
        assert_eq!(doorbell_bands(&[0xff, 0xfe]), Band::ALL);
    }

    #[test]
    fn refusal_labels_are_the_wire_names() {
        for refusal in StartRefusal::ALL {
            let wire = serde_json::to_value(refusal).unwrap();
            assert_eq!(wire.as_str(), Some(refusal.as_str()));
            assert_eq!(refusal.to_string(), refusal.as_str());
        }
    }
}
