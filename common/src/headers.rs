//! Header names of firing messages (CONTRACT.md, "Firing messages").

/// JetStream's deduplication id; Chime sets it to the firing id.
pub const NATS_MSG_ID: &str = "Nats-Msg-Id";
/// The firing id, `<job id>@<scheduled ms>#<attempt>`.
pub const FIRING_ID: &str = "Chime-Firing-Id";
/// The job id.
pub const JOB_ID: &str = "Chime-Job-Id";
/// The handler name the worker dispatches on.
pub const HANDLER: &str = "Chime-Handler";
/// The scheduled instant, RFC 3339 with milliseconds, UTC.
pub const SCHEDULED_AT: &str = "Chime-Scheduled-At";
/// When the firing was due for publishing (differs from the scheduled instant for retries).
pub const DUE_AT: &str = "Chime-Due-At";
/// The attempt, 1, 2, …
pub const ATTEMPT: &str = "Chime-Attempt";
/// The job's priority, 0–9.
pub const PRIORITY: &str = "Chime-Priority";
/// When the run is cut off if it starts at once; the start reply carries the authoritative deadline.
pub const DEADLINE: &str = "Chime-Deadline";
/// The job's execution limit in milliseconds, so a worker can compute its own deadline.
pub const TIMEOUT_MS: &str = "Chime-Timeout-Ms";
/// A sharded job's firing: its shard, 0…`Chime-Shards`-1 (absent when unsharded).
pub const SHARD: &str = "Chime-Shard";
/// A sharded job's firing: how many shards its instant has (absent when unsharded).
pub const SHARDS: &str = "Chime-Shards";
/// An offer (a broadcast job's firing): the worker it is addressed to.
pub const WORKER_ID: &str = "Chime-Worker-Id";
/// W3C Trace Context: the firing's trace, with its `published` span as the
/// parent (docs/PROTOCOL.md); on a submission, the trace a one-shot job's
/// firings keep (docs/API.md).
pub const TRACEPARENT: &str = crate::traceparent::TRACEPARENT;
/// On `chime.submit.rejected`: the error JSON.
pub const ERROR: &str = "Chime-Error";
