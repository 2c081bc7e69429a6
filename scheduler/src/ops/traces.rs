//! The scheduler's spans of a firing (docs/OPERATIONS.md, "Traces"):
//! `trigger` or `put` (the API request a firing's trace came from),
//! `staged`, `published`, `started` (the start decision) and `finished`
//! (recording the finish), all in the firing's trace
//! (`chime_common::traceparent::FiringTrace`), exported by
//! `chime_runtime::traces` when an OTLP endpoint is configured.
//!
//! Every function returns at once when nothing is exported. The starts'
//! and finishes' spans need the trace stored with each firing, which the
//! start and finish paths do not read: it is read afterwards, in a task of
//! its own, so no worker waits for a span.

use crate::store::{StagedFiring, StartOutcome, Store};
use chime_common::protocol::{Finished, StartRequest};
use chime_common::traceparent::{span_id, FiringSpan, FiringTrace, TraceParent};
use chime_runtime::traces::{self, FiringAttributes, Kind, SpanRecord};
use chrono::{DateTime, Utc};

/// What the spans of attempt `firing` say about it.
fn attributes(firing: &StagedFiring) -> FiringAttributes {
    FiringAttributes {
        firing_id: Some(firing.id.to_string()),
        job_id: Some(firing.job_id.clone()),
        group: Some(firing.group.clone()),
        attempt: Some(firing.attempt),
        ..FiringAttributes::default()
    }
}

/// One of the scheduler's spans of a firing in `trace`.
fn firing_span(
    trace: &FiringTrace,
    id: &chime_common::FiringId,
    publish_seq: u32,
    span: FiringSpan,
    kind: Kind,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    attributes: FiringAttributes,
) -> SpanRecord {
    SpanRecord {
        name: span.name(),
        trace_id: trace.trace_id,
        flags: trace.flags,
        span_id: span_id(id, publish_seq, span),
        parent: trace.parent_of(id, publish_seq, span),
        kind,
        start,
        end,
        attributes,
        error: None,
    }
}

/// `firing` was handed to JetStream at `sent_at`, the publish returning at
/// `returned_at`: its `staged` span (from when it was staged; only for its
/// first publish) and its `published` span.
pub fn published(firing: &StagedFiring, sent_at: DateTime<Utc>, returned_at: DateTime<Utc>) {
    if !traces::enabled() {
        return;
    }
    let trace = FiringTrace::of(&firing.id, firing.traceparent.as_ref());
    let seq = firing.publish_seq;
    if seq == 0 {
        traces::record(firing_span(
            &trace,
            &firing.id,
            0,
            FiringSpan::Staged,
            Kind::Internal,
            (firing.staged_at.min(sent_at), sent_at),
            attributes(firing),
        ));
    }
    traces::record(firing_span(
        &trace,
        &firing.id,
        seq,
        FiringSpan::Published,
        Kind::Producer,
        (sent_at, returned_at),
        attributes(firing),
    ));
}

/// An API request a firing's trace begins with: `trigger`, or `put` (a
/// submission). `trace` names the request's span as its parent (what is
/// stored with the firings); `given` is the caller's `traceparent`, whose
/// span is the request's parent (`None`: the request is the root).
pub fn request(
    name: &'static str,
    trace: &TraceParent,
    given: Option<&TraceParent>,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    attributes: FiringAttributes,
    error: Option<String>,
) {
    if !traces::enabled() {
        return;
    }
    traces::record(SpanRecord {
        name,
        trace_id: trace.trace_id,
        flags: trace.flags,
        span_id: trace.parent_id,
        parent: given.map(|g| g.parent_id),
        kind: Kind::Server,
        start,
        end,
        attributes,
        error,
    });
}

/// The `started` spans of the firings a batch of start requests started,
/// decided between `asked_at` and `decided_at`.
pub fn started(
    store: &Store,
    started: &[(StartRequest, StartOutcome)],
    asked_at: DateTime<Utc>,
    decided_at: DateTime<Utc>,
) {
    if !traces::enabled() || started.is_empty() {
        return;
    }
    let requests: Vec<StartRequest> = started.iter().map(|(r, _)| r.clone()).collect();
    let store = store.clone();
    tokio::spawn(async move {
        let ids: Vec<String> = requests.iter().map(|r| r.firing_id.to_string()).collect();
        let stored = match store.traced_firings(&ids).await {
            Ok(stored) => stored,
            Err(error) => {
                tracing::debug!(%error, "cannot read the traces of started firings; no spans");
                return;
            }
        };
        for (request, text) in requests.iter().zip(&ids) {
            let id = &request.firing_id;
            let traceparent = stored.get(text).and_then(|f| f.traceparent);
            let trace = FiringTrace::of(id, traceparent.as_ref());
            traces::record(firing_span(
                &trace,
                id,
                0,
                FiringSpan::Started,
                Kind::Internal,
                (asked_at, decided_at),
                FiringAttributes {
                    firing_id: Some(text.clone()),
                    job_id: Some(id.job_id.clone()),
                    group: Some(request.group.clone()),
                    attempt: Some(id.attempt),
                    outcome: Some("started".into()),
                    worker_id: Some(request.worker_id.clone()),
                },
            ));
        }
    });
}

/// The `finished` spans of the finished events a batch applied, each from
/// when its run ended to `applied_at`.
pub fn finished(store: &Store, events: Vec<Finished>, applied_at: DateTime<Utc>) {
    if !traces::enabled() || events.is_empty() {
        return;
    }
    let store = store.clone();
    tokio::spawn(async move {
        let ids: Vec<String> = events.iter().map(|e| e.firing_id.to_string()).collect();
        let stored = match store.traced_firings(&ids).await {
            Ok(stored) => stored,
            Err(error) => {
                tracing::debug!(%error, "cannot read the traces of finished firings; no spans");
                return;
            }
        };
        for (event, text) in events.iter().zip(&ids) {
            let id = &event.firing_id;
            let row = stored.get(text);
            let trace = FiringTrace::of(id, row.and_then(|f| f.traceparent.as_ref()));
            let mut span = firing_span(
                &trace,
                id,
                0,
                FiringSpan::Finished,
                Kind::Consumer,
                (event.finished_at.min(applied_at), applied_at),
                FiringAttributes {
                    firing_id: Some(text.clone()),
                    job_id: Some(id.job_id.clone()),
                    group: row.map(|f| f.group.clone()),
                    attempt: Some(id.attempt),
                    outcome: Some(event.outcome.as_str().into()),
                    worker_id: Some(event.worker_id.clone()),
                },
            );
            span.error = event.error.clone();
            traces::record(span);
        }
    });
}
