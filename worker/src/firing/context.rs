//! What a handler sees of the firing it runs.

use crate::firing::message::FiringDetails;
use chime_common::traceparent::TraceParent;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// One firing, as handed to a [`Handler`](crate::Handler): the firing as
/// the scheduler published it, and what the worker decided when it started.
#[derive(Debug, Clone)]
pub struct FiringContext {
    /// Which firing: job, attempt, handler, payload.
    pub firing: FiringDetails,
    /// When the run is cut off. The worker enforces it: past it the token is
    /// cancelled and, a moment later, the handler's future is dropped.
    pub deadline: DateTime<Utc>,
    /// Cancelled on timeout, on a cancel request and at the end of a shutdown's
    /// drain grace. Long-running handlers should watch it and stop promptly.
    pub cancel: CancellationToken,
    /// The bound on the output tail the worker keeps; handlers that buffer
    /// output need keep no more than this.
    pub max_output_bytes: usize,
    /// The id of the worker running the firing.
    pub worker_id: String,
    /// The run's W3C trace context to pass on: the firing's trace (a fresh
    /// one when its message carried none, or a malformed one) with the
    /// worker's `handler` span as the parent, so what the handler calls
    /// (a shell job's `TRACEPARENT`, the http handler's `traceparent`
    /// header) joins the firing's trace.
    pub traceparent: TraceParent,
}
