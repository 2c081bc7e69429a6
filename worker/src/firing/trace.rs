//! The worker's span of a firing: `handler`, around the run, a child of
//! the scheduler's `published` span named by the message's `traceparent`
//! (docs/PROTOCOL.md, "Traces"). Exported only when the worker has an OTLP
//! endpoint (`chime_runtime::traces`); the context it passes on to the
//! handler exists either way.

use crate::firing::message::FiringDetails;
use crate::firing::run::RunReport;
use chime_common::traceparent::TraceParent;
use chime_runtime::traces::{self, FiringAttributes, Kind, SpanRecord};

/// The context a run passes on: the message's trace with a new span (the
/// `handler` span) as the parent, or a fresh trace when the message
/// carried none or a malformed one.
pub(crate) fn run_context(firing: &FiringDetails) -> TraceParent {
    firing
        .traceparent
        .as_ref()
        .map_or_else(TraceParent::fresh, TraceParent::child)
}

/// The `handler` span of one run, taken before the run (only while spans
/// are exported) and recorded once it ended.
pub(crate) struct HandlerSpan {
    firing_id: String,
    job_id: String,
    attempt: u32,
    /// The message's trace context: its parent id is this span's parent.
    message: Option<TraceParent>,
    /// What the run passes on: this span's trace and id.
    context: TraceParent,
}

impl HandlerSpan {
    /// The span of a run of `firing` that passes on `context`; `None` when
    /// nothing is exported.
    pub(crate) fn of(firing: &FiringDetails, context: TraceParent) -> Option<HandlerSpan> {
        traces::enabled().then(|| HandlerSpan {
            firing_id: firing.firing_id.to_string(),
            job_id: firing.job_id.clone(),
            attempt: firing.attempt,
            message: firing.traceparent,
            context,
        })
    }

    /// Records the span of the run `report` describes.
    pub(crate) fn record(self, report: &RunReport, group: &str, worker_id: &str) {
        traces::record(SpanRecord {
            name: "handler",
            trace_id: self.context.trace_id,
            flags: self.context.flags,
            span_id: self.context.parent_id,
            parent: self.message.map(|message| message.parent_id),
            kind: Kind::Consumer,
            start: report.started_at,
            end: report.finished_at,
            attributes: FiringAttributes {
                firing_id: Some(self.firing_id),
                job_id: Some(self.job_id),
                group: Some(group.to_string()),
                attempt: Some(self.attempt),
                outcome: Some(report.outcome.as_str().to_string()),
                worker_id: Some(worker_id.to_string()),
            },
            error: report.error.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_common::FiringId;

    fn details(traceparent: Option<TraceParent>) -> FiringDetails {
        let now = chrono::Utc::now();
        FiringDetails {
            firing_id: FiringId::new("j", 1_000, 1),
            job_id: "j".into(),
            handler: "echo".into(),
            scheduled_at: now,
            due_at: now,
            attempt: 1,
            priority: 5,
            payload: serde_json::Value::Null,
            shard: None,
            traceparent,
        }
    }

    #[test]
    fn a_run_passes_on_the_message_s_trace_under_a_span_of_its_own() {
        let message: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .expect("valid");
        let context = run_context(&details(Some(message)));
        assert_eq!(context.trace_id, message.trace_id);
        assert_eq!(context.flags, message.flags);
        assert_ne!(context.parent_id, message.parent_id);
    }

    #[test]
    fn a_run_without_a_trace_starts_one() {
        let a = run_context(&details(None));
        let b = run_context(&details(None));
        assert_ne!(a.trace_id, b.trace_id);
        assert!(a.sampled());
    }
}
