//! OpenTelemetry export of a firing's spans over OTLP (HTTP, protobuf),
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set; without it no exporter is built and [`record`] does nothing.
//!
//! Spans are recorded after the fact, with the ids and times the caller
//! gives (`chime_common::traceparent` derives them), rather than through
//! `tracing`: a firing's spans begin on one replica and end on another, and
//! every replica must name the same span for the same step without sharing
//! anything, which a span opened and closed in-process cannot express. The
//! programs' `tracing` logs stay logs and are not exported.
//!
//! Export runs on the batch span processor's own thread with its own HTTP
//! client: [`record`] only queues a finished span (bounded,
//! `OTEL_BSP_MAX_QUEUE_SIZE`, default 2048), and a full queue drops it,
//! which the SDK logs once and counts at shutdown. A collector that is down
//! or slow costs spans, never a firing. The standard variables
//! (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`,
//! `OTEL_TRACES_SAMPLER`, …) are read by the crates.

use chime_common::traceparent::TraceParent;
use chrono::{DateTime, Utc};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::OnceLock;

/// The variables that turn export on (either, non-empty).
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The tracer spans are recorded with, once export is set up.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The running export: shut it down at exit so the last spans are sent.
pub struct TraceExport {
    provider: SdkTracerProvider,
}

impl TraceExport {
    /// Sends what is queued and stops the export thread. Blocks (up to the
    /// SDK's shutdown timeout): call it off the async runtime's threads.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the trace export did not shut down cleanly");
        }
    }
}

/// Whether an endpoint variable is set.
pub fn configured() -> bool {
    ENDPOINT_VARIABLES
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// Sets up export if an endpoint is configured, naming the service
/// `default_service` unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) names it. `Ok(None)`: not configured,
/// nothing built. Err: the exporter cannot be built from the variables
/// (a malformed endpoint, an unknown compression).
pub fn init(default_service: &str) -> Result<Option<TraceExport>, String> {
    if !configured() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| format!("cannot set up the OTLP trace exporter: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource(default_service))
        .build();
    let tracer = provider.tracer("chime");
    if TRACER.set(tracer).is_err() {
        return Err("the trace export is set up already".into());
    }
    Ok(Some(TraceExport { provider }))
}

/// The process's resource: the variables' service name, else `default_service`.
fn resource(default_service: &str) -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(default_service.to_string())
            .build()
    }
}

/// Whether spans are exported: callers skip the work of describing one
/// when they are not.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// What a span says about its firing (absent ones are left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FiringAttributes {
    pub firing_id: Option<String>,
    pub job_id: Option<String>,
    pub group: Option<String>,
    pub attempt: Option<u32>,
    /// How the step ended: a finished firing's outcome, a start's decision.
    pub outcome: Option<String>,
    pub worker_id: Option<String>,
}

impl FiringAttributes {
    fn key_values(self) -> Vec<KeyValue> {
        let mut out = Vec::with_capacity(6);
        let mut text = |key: &'static str, value: Option<String>| {
            if let Some(value) = value {
                out.push(KeyValue::new(key, value));
            }
        };
        text("chime.firing.id", self.firing_id);
        text("chime.job.id", self.job_id);
        text("chime.group", self.group);
        text("chime.outcome", self.outcome);
        text("chime.worker.id", self.worker_id);
        if let Some(attempt) = self.attempt {
            out.push(KeyValue::new("chime.firing.attempt", i64::from(attempt)));
        }
        out
    }
}

/// What kind of work a span is, as OpenTelemetry sorts spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request the program answered (`trigger`, `put`).
    Server,
    /// A message the program sent (`published`).
    Producer,
    /// A message the program handled (`handler`, `finished`).
    Consumer,
    /// Anything else.
    Internal,
}

/// One finished span.
#[derive(Debug, Clone)]
pub struct SpanRecord {
    pub name: &'static str,
    pub trace_id: [u8; 16],
    /// The trace's flags: an unsampled trace's spans are not exported.
    pub flags: u8,
    pub span_id: [u8; 8],
    /// `None`: the root of its trace.
    pub parent: Option<[u8; 8]>,
    pub kind: Kind,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub attributes: FiringAttributes,
    /// Set when the step failed.
    pub error: Option<String>,
}

impl SpanRecord {
    /// A span `name` in the trace of `parent`, as its child.
    pub fn child_of(parent: &TraceParent, name: &'static str, span_id: [u8; 8]) -> SpanRecord {
        let now = Utc::now();
        SpanRecord {
            name,
            trace_id: parent.trace_id,
            flags: parent.flags,
            span_id,
            parent: Some(parent.parent_id),
            kind: Kind::Internal,
            start: now,
            end: now,
            attributes: FiringAttributes::default(),
            error: None,
        }
    }
}

/// Queues `span` for export; nothing when export is off.
pub fn record(span: SpanRecord) {
    let Some(tracer) = TRACER.get() else {
        return;
    };
    let trace_id = TraceId::from_bytes(span.trace_id);
    let flags = TraceFlags::new(span.flags & TraceFlags::SAMPLED.to_u8());
    let context = match span.parent {
        Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
            trace_id,
            SpanId::from_bytes(parent),
            flags,
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    };
    let kind = match span.kind {
        Kind::Server => SpanKind::Server,
        Kind::Producer => SpanKind::Producer,
        Kind::Consumer => SpanKind::Consumer,
        Kind::Internal => SpanKind::Internal,
    };
    // A root is sampled by the sampler (always, by default) unless its
    // trace says it is not.
    if span.parent.is_none() && !flags.is_sampled() {
        return;
    }
    let builder = tracer
        .span_builder(span.name)
        .with_trace_id(trace_id)
        .with_span_id(SpanId::from_bytes(span.span_id))
        .with_kind(kind)
        .with_start_time(span.start)
        .with_attributes(span.attributes.key_values());
    let builder = match span.error {
        Some(message) => builder.with_status(Status::error(message)),
        None => builder,
    };
    let mut live = tracer.build_with_context(builder, &context);
    live.end_with_timestamp(span.end.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_name_what_they_have() {
        let attributes = FiringAttributes {
            firing_id: Some("a@1#2".into()),
            job_id: Some("a".into()),
            attempt: Some(2),
            ..FiringAttributes::default()
        };
        let keys: Vec<String> = attributes
            .key_values()
            .into_iter()
            .map(|kv| kv.key.to_string())
            .collect();
        assert_eq!(
            keys,
            ["chime.firing.id", "chime.job.id", "chime.firing.attempt"]
        );
    }
}
