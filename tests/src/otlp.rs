//! An OpenTelemetry collector's trace receiver, for the suites that check
//! what the programs export: OTLP over HTTP (`POST /v1/traces`, protobuf
//! `ExportTraceServiceRequest`), decoded with the `opentelemetry-proto`
//! types, the spans kept for the test to read. Every request to any path
//! is counted, so a test can also show that nothing was sent.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// One span as the receiver got it, ids in lower-case hex.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The exporting program's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for the root of a trace.
    pub parent_span_id: String,
    /// Every attribute, its value as text.
    pub attributes: BTreeMap<String, String>,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// Whether its status is an error.
    pub error: bool,
}

impl ReceivedSpan {
    /// The value of attribute `key`, if it has one.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct Received {
    /// Requests to any path, decodable or not.
    requests: usize,
    spans: Vec<ReceivedSpan>,
    /// Requests that were not OTLP protobuf traces, described.
    refused: Vec<String>,
}

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    stop: CancellationToken,
}

impl OtlpReceiver {
    /// A receiver on a free port of 127.0.0.1.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a port for the OTLP receiver");
        OtlpReceiver::serve(listener)
    }

    /// A receiver on `addr` (the OTLP default port, say), or `None` if it is taken.
    pub async fn start_on(addr: SocketAddr) -> Option<OtlpReceiver> {
        let listener = tokio::net::TcpListener::bind(addr).await.ok()?;
        Some(OtlpReceiver::serve(listener))
    }

    fn serve(listener: tokio::net::TcpListener) -> OtlpReceiver {
        let addr = listener.local_addr().expect("a bound listener's address");
        let received = Arc::new(Mutex::new(Received::default()));
        let stop = CancellationToken::new();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .fallback(other)
            .with_state(received.clone());
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await;
        });
        OtlpReceiver {
            addr,
            received,
            stop,
        }
    }

    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` is set to for a program to export here.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many requests arrived, to any path.
    pub fn requests(&self) -> usize {
        self.lock().requests
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.lock().spans.clone()
    }

    /// The spans of trace `trace_id` (hex).
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.lock()
            .spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Requests that were not OTLP protobuf traces.
    pub fn refused(&self) -> Vec<String> {
        self.lock().refused.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

type Shared = Arc<Mutex<Received>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Received> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

async fn traces(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    lock(&shared).requests += 1;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type != "application/x-protobuf" {
        lock(&shared)
            .refused
            .push(format!("content type {content_type:?}"));
        return StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response();
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(e) => {
            lock(&shared).refused.push(format!("not protobuf: {e}"));
            return StatusCode::BAD_REQUEST.into_response();
        }
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    // STATUS_CODE_ERROR
                    error: span.status.is_some_and(|s| s.code == 2),
                });
            }
        }
    }
    lock(&shared).spans.extend(spans);
    let reply = ExportTraceServiceResponse::default().encode_to_vec();
    ([(header::CONTENT_TYPE, "application/x-protobuf")], reply).into_response()
}

async fn other(State(shared): State<Shared>) -> StatusCode {
    lock(&shared).requests += 1;
    StatusCode::NOT_FOUND
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
