//! W3C Trace Context `traceparent` values (<https://www.w3.org/TR/trace-context/>):
//! read once here, wherever one comes from (a `jobs.trigger` request, an
//! HTTP header, a submission's or a firing message's header), and the ids
//! Chime derives for a firing's trace.
//!
//! A firing's trace needs no shared state between the programs that record
//! it: its trace id is either the one its trigger or submission carried
//! (stored with the firing) or derived from its instant, and the span ids
//! of its scheduler spans are derived from its firing id, so any replica
//! that publishes, starts or finishes it names the same spans
//! (docs/OPERATIONS.md, "Traces").

use crate::FiringId;
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// The `traceparent` header, message header and request field.
pub const TRACEPARENT: &str = "traceparent";

/// The longest value read: version 00 is 55 characters; a later version
/// may append fields, which are ignored, but not without bound.
pub const MAX_TRACEPARENT_LEN: usize = 512;

/// The `sampled` trace flag.
pub const SAMPLED: u8 = 0x01;

/// One `traceparent`: which trace, which span is the parent, and whether
/// the caller samples it. Always written as version 00.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// Never all zero.
    pub trace_id: [u8; 16],
    /// The parent span; never all zero.
    pub parent_id: [u8; 8],
    /// Only the `sampled` bit (0x01) is kept; the others are undefined in
    /// version 00.
    pub flags: u8,
}

/// Why a value is not a `traceparent`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceParentError {
    #[error("is {0} characters long; a traceparent is 55 (00-<32 hex>-<16 hex>-<2 hex>)")]
    Length(usize),
    #[error("is not of the form 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, in lower-case hex")]
    Form,
    #[error("has version ff, which is never valid")]
    Version,
    #[error("has an all-zero trace id")]
    ZeroTraceId,
    #[error("has an all-zero parent id")]
    ZeroParentId,
}

impl TraceParent {
    /// Reads a value as the W3C recommendation says a receiver must: a
    /// version 00 value is exactly 55 characters; a later version's value
    /// may carry more fields after a `-`, which are ignored; version ff,
    /// upper-case hex and all-zero ids are refused.
    pub fn parse(text: &str) -> Result<TraceParent, TraceParentError> {
        if !text.is_ascii() {
            return Err(TraceParentError::Form);
        }
        let bytes = text.as_bytes();
        if bytes.len() < 55 || bytes.len() > MAX_TRACEPARENT_LEN {
            return Err(TraceParentError::Length(bytes.len()));
        }
        let version = hex_byte(&bytes[0..2]).ok_or(TraceParentError::Form)?;
        if version == 0xff {
            return Err(TraceParentError::Version);
        }
        if version == 0 && bytes.len() != 55 {
            return Err(TraceParentError::Length(bytes.len()));
        }
        if bytes.len() > 55 && bytes[55] != b'-' {
            return Err(TraceParentError::Form);
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return Err(TraceParentError::Form);
        }
        let mut trace_id = [0u8; 16];
        let mut parent_id = [0u8; 8];
        hex_into(&bytes[3..35], &mut trace_id).ok_or(TraceParentError::Form)?;
        hex_into(&bytes[36..52], &mut parent_id).ok_or(TraceParentError::Form)?;
        let flags = hex_byte(&bytes[53..55]).ok_or(TraceParentError::Form)?;
        if trace_id == [0; 16] {
            return Err(TraceParentError::ZeroTraceId);
        }
        if parent_id == [0; 8] {
            return Err(TraceParentError::ZeroParentId);
        }
        Ok(TraceParent {
            trace_id,
            parent_id,
            flags: flags & SAMPLED,
        })
    }

    /// A new trace: random ids, sampled.
    pub fn fresh() -> TraceParent {
        TraceParent {
            trace_id: nonzero(rand::random()),
            parent_id: nonzero(rand::random()),
            flags: SAMPLED,
        }
    }

    /// The same trace with a new random span as the parent: the context a
    /// span of the caller's trace passes on.
    pub fn child(&self) -> TraceParent {
        self.child_of(nonzero(rand::random()))
    }

    /// The same trace with `span_id` as the parent: what a span passes on
    /// to its children.
    pub fn child_of(&self, span_id: [u8; 8]) -> TraceParent {
        TraceParent {
            parent_id: span_id,
            ..*self
        }
    }

    /// Whether the caller samples the trace: spans of an unsampled trace
    /// are not exported.
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The trace id as 32 lower-case hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

impl FromStr for TraceParent {
    type Err = TraceParentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TraceParent::parse(s)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.parent_id),
            self.flags
        )
    }
}

/// The scheduler's spans of one firing, each named by the span id
/// [`span_id`] derives for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiringSpan {
    /// From when the firing was written `staged` to its publish.
    Staged,
    /// Its publish: the parent id of its message's `traceparent`, so the
    /// worker's `handler` span is its child.
    Published,
    /// The scheduler's start decision.
    Started,
    /// The scheduler recording the finish.
    Finished,
}

impl FiringSpan {
    /// The span's name as exported.
    pub fn name(self) -> &'static str {
        match self {
            FiringSpan::Staged => "staged",
            FiringSpan::Published => "published",
            FiringSpan::Started => "started",
            FiringSpan::Finished => "finished",
        }
    }
}

/// The trace a firing's spans are in, and the span its trace began with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiringTrace {
    pub trace_id: [u8; 16],
    pub flags: u8,
    /// The span the firing's trace came from: the `trigger` or `put` span
    /// stored with it; `None` for a trace derived from its instant.
    pub origin: Option<[u8; 8]>,
}

impl FiringTrace {
    /// The trace of firing `id`: the one stored with it (`stored`), else
    /// the one derived from its instant (`<job id>@<scheduled ms>`, with
    /// `.<shard>` for a shard), so every attempt of the instant, and every
    /// copy of its message, is in one trace, the same on every replica.
    pub fn of(id: &FiringId, stored: Option<&TraceParent>) -> FiringTrace {
        match stored {
            Some(stored) => FiringTrace {
                trace_id: stored.trace_id,
                flags: stored.flags,
                origin: Some(stored.parent_id),
            },
            None => {
                let key = match id.shard {
                    Some(shard) => format!("{}@{}.{shard}", id.job_id, id.scheduled_ms),
                    None => format!("{}@{}", id.job_id, id.scheduled_ms),
                };
                let digest = Sha256::digest(key.as_bytes());
                let mut trace_id = [0u8; 16];
                trace_id.copy_from_slice(&digest[..16]);
                FiringTrace {
                    trace_id: nonzero(trace_id),
                    flags: SAMPLED,
                    origin: None,
                }
            }
        }
    }

    /// The `traceparent` of the firing's message: its trace, with its
    /// (first) `published` span as the parent.
    pub fn message(&self, id: &FiringId) -> TraceParent {
        self.with_parent(span_id(id, 0, FiringSpan::Published))
    }

    /// This trace with `parent` as the parent span.
    pub fn with_parent(&self, parent: [u8; 8]) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            parent_id: parent,
            flags: self.flags,
        }
    }

    /// The parent of `span` of attempt `id` (published the
    /// `publish_seq`-th time): `staged` is a child of the trace's origin,
    /// or, in a trace derived from the instant, of the first attempt's
    /// `staged` span (itself the root); `published` of `staged`, a later
    /// publish of a held firing of the first `published`; `started` and
    /// `finished` of the first `published`, as the worker's `handler` is.
    pub fn parent_of(&self, id: &FiringId, publish_seq: u32, span: FiringSpan) -> Option<[u8; 8]> {
        match span {
            FiringSpan::Staged => self.origin.or_else(|| {
                let first = FiringId {
                    attempt: 1,
                    ..id.clone()
                };
                (id.attempt > 1).then(|| span_id(&first, 0, FiringSpan::Staged))
            }),
            FiringSpan::Published if publish_seq == 0 => Some(span_id(id, 0, FiringSpan::Staged)),
            FiringSpan::Published | FiringSpan::Started | FiringSpan::Finished => {
                Some(span_id(id, 0, FiringSpan::Published))
            }
        }
    }

    /// Whether the trace is sampled: spans of an unsampled trace are not
    /// exported.
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }
}

/// The span id of `span` of attempt `id` as published the `publish_seq`-th
/// time (0: its first publish; a firing a limit held is published again
/// with the next number).
pub fn span_id(id: &FiringId, publish_seq: u32, span: FiringSpan) -> [u8; 8] {
    let key = format!("{id}~{publish_seq}/{}", span.name());
    let digest = Sha256::digest(key.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    nonzero(out)
}

/// `bytes` with its last byte set when all are zero: W3C ids are never all zero.
fn nonzero<const N: usize>(mut bytes: [u8; N]) -> [u8; N] {
    if bytes.iter().all(|b| *b == 0) {
        bytes[N - 1] = 1;
    }
    bytes
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// One lower-case hex digit's value.
fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    Some(hex_digit(two[0])? << 4 | hex_digit(two[1])?)
}

fn hex_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = hex_byte(&text[2 * i..2 * i + 2])?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_w3c_example_round_trips() {
        let tp = TraceParent::parse(EXAMPLE).expect("valid");
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            tp.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert!(tp.sampled());
        assert_eq!(tp.to_string(), EXAMPLE);
        let unsampled = TraceParent::parse(&EXAMPLE.replace("-01", "-00")).expect("valid");
        assert!(!unsampled.sampled());
    }

    #[test]
    fn bad_values_are_refused_with_their_reason() {
        let cases = [
            ("", TraceParentError::Length(0)),
            (&EXAMPLE[..54], TraceParentError::Length(54)),
            // Version 00 has exactly four fields.
            (&format!("{EXAMPLE}-00"), TraceParentError::Length(58)),
            (&EXAMPLE.replace("4bf9", "4BF9"), TraceParentError::Form),
            (&EXAMPLE.replace("4bf9", "4bg9"), TraceParentError::Form),
            (&EXAMPLE.replacen('-', "_", 1), TraceParentError::Form),
            (
                &EXAMPLE.replacen("00-", "ff-", 1),
                TraceParentError::Version,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                TraceParentError::ZeroTraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                TraceParentError::ZeroParentId,
            ),
            (&"x".repeat(600), TraceParentError::Length(600)),
            (&EXAMPLE.replace("-01", "-\u{e9}"), TraceParentError::Form),
        ];
        for (text, expected) in cases {
            assert_eq!(TraceParent::parse(text), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-ever";
        let tp = TraceParent::parse(later).expect("a later version is read");
        assert_eq!(tp.to_string(), EXAMPLE, "written back as version 00");
        let glued = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x";
        assert_eq!(TraceParent::parse(glued), Err(TraceParentError::Form));
    }

    #[test]
    fn an_instant_is_one_trace_whatever_the_attempt() {
        let first = FiringId::new("nightly", 1_774_661_400_250, 1);
        let retry = first.next_attempt();
        let trace = FiringTrace::of(&first, None);
        assert_eq!(trace, FiringTrace::of(&retry, None));
        assert!(trace.sampled() && trace.origin.is_none());
        let other = FiringId::new("nightly", 1_774_661_400_251, 1);
        assert_ne!(trace.trace_id, FiringTrace::of(&other, None).trace_id);
        let shard = FiringId::of_shard("nightly", 1_774_661_400_250, 1, 4, 1);
        assert_ne!(trace.trace_id, FiringTrace::of(&shard, None).trace_id);

        let message = trace.message(&retry);
        assert_eq!(message.trace_id, trace.trace_id);
        assert_eq!(message.parent_id, span_id(&retry, 0, FiringSpan::Published));
        assert_eq!(TraceParent::parse(&message.to_string()), Ok(message));
        assert_ne!(
            span_id(&first, 0, FiringSpan::Published),
            span_id(&retry, 0, FiringSpan::Published)
        );
        assert_ne!(
            span_id(&first, 0, FiringSpan::Published),
            span_id(&first, 1, FiringSpan::Published)
        );
    }

    #[test]
    fn the_spans_of_an_instant_form_one_tree() {
        let first = FiringId::new("nightly", 1_000, 1);
        let retry = first.next_attempt();
        let trace = FiringTrace::of(&first, None);
        let staged = |id| span_id(id, 0, FiringSpan::Staged);
        let published = |id| span_id(id, 0, FiringSpan::Published);
        assert_eq!(
            trace.parent_of(&first, 0, FiringSpan::Staged),
            None,
            "the root"
        );
        assert_eq!(
            trace.parent_of(&retry, 0, FiringSpan::Staged),
            Some(staged(&first))
        );
        assert_eq!(
            trace.parent_of(&retry, 0, FiringSpan::Published),
            Some(staged(&retry))
        );
        assert_eq!(
            trace.parent_of(&retry, 2, FiringSpan::Published),
            Some(published(&retry))
        );
        for span in [FiringSpan::Started, FiringSpan::Finished] {
            assert_eq!(trace.parent_of(&retry, 0, span), Some(published(&retry)));
        }
    }

    #[test]
    fn a_stored_trace_is_kept_in_the_message() {
        let stored = TraceParent::parse(EXAMPLE).expect("valid");
        let id = FiringId::new("report", 1_000, 2);
        let trace = FiringTrace::of(&id, Some(&stored));
        let message = trace.message(&id);
        assert_eq!(message.trace_id, stored.trace_id);
        assert_eq!(message.flags, stored.flags);
        assert_ne!(message.parent_id, stored.parent_id);
        assert_eq!(
            trace.parent_of(&id, 0, FiringSpan::Staged),
            Some(stored.parent_id),
            "every attempt's staged span is a child of the trigger's"
        );
    }

    #[test]
    fn fresh_traces_differ() {
        let a = TraceParent::fresh();
        let b = TraceParent::fresh();
        assert_ne!(a.trace_id, b.trace_id);
        assert!(a.sampled());
        assert_eq!(TraceParent::parse(&a.to_string()), Ok(a));
    }

    proptest! {
        /// Whatever a caller sends, reading it never panics, and what is
        /// read is written back as a value that reads the same.
        #[test]
        fn hostile_strings_never_panic(text in ".{0,600}") {
            if let Ok(tp) = TraceParent::parse(&text) {
                prop_assert_eq!(TraceParent::parse(&tp.to_string()), Ok(tp));
            }
        }

        /// Near misses of a valid value: every single-character change is
        /// either refused or read as a valid traceparent.
        #[test]
        fn near_misses_are_read_or_refused(at in 0usize..55, c in any::<char>()) {
            let mut chars: Vec<char> = EXAMPLE.chars().collect();
            chars[at] = c;
            let text: String = chars.into_iter().collect();
            if let Ok(tp) = TraceParent::parse(&text) {
                prop_assert_eq!(TraceParent::parse(&tp.to_string()), Ok(tp));
            }
        }

        /// Any ids and flags make a value that reads back the same (the
        /// flags cut to the sampled bit).
        #[test]
        fn written_values_read_back(trace in any::<[u8; 16]>(), parent in any::<[u8; 8]>(), flags in any::<u8>()) {
            prop_assume!(trace != [0; 16] && parent != [0; 8]);
            let tp = TraceParent { trace_id: trace, parent_id: parent, flags: flags & SAMPLED };
            prop_assert_eq!(TraceParent::parse(&tp.to_string()), Ok(tp));
        }
    }
}
