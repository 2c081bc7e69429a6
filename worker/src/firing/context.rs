//! What a handler sees of the firing it runs.

use chime_common::FiringId;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// One firing, as handed to a [`Handler`](crate::Handler).
#[derive(Debug, Clone)]
pub struct FiringContext {
    /// `<job id>@<scheduled ms>#<attempt>`.
    pub firing_id: FiringId,
    pub job_id: String,
    /// The handler name the firing asked for.
    pub handler: String,
    /// The instant the schedule produced.
    pub scheduled_at: DateTime<Utc>,
    /// When the firing was due for publishing: the scheduled instant, or later for a retry.
    pub due_at: DateTime<Utc>,
    /// 1, 2, …
    pub attempt: u32,
    /// 0–9.
    pub priority: u8,
    /// When the run is cut off. The worker enforces it: past it the token is
    /// cancelled and, a moment later, the handler's future is dropped.
    pub deadline: DateTime<Utc>,
    /// The job's payload (JSON `null` when the message had no body).
    pub payload: serde_json::Value,
    /// Cancelled on timeout, on a cancel request and at the end of a shutdown's
    /// drain grace. Long-running handlers should watch it and stop promptly.
    pub cancel: CancellationToken,
    /// The bound on the output tail the worker keeps; handlers that buffer
    /// output need keep no more than this.
    pub max_output_bytes: usize,
    /// The id of the worker running the firing.
    pub worker_id: String,
}
