//! Answers to requests: API verbs and worker starts.
//!
//! NATS never checks the reply subject a requester names, and the
//! scheduler's own user may publish anywhere (it publishes firings, claims
//! slices, administers JetStream). An answer sent wherever a request said
//! would let any client borrow those rights: fill a firing subject, plant a
//! slice claim, keep a dead worker's heartbeat alive. So every answer goes
//! through [`Replies`], which sends only to subjects in the requester's inbox
//! space (`_INBOX.…`) and drops, counts and logs anything else. With NATS
//! permissions the answers also leave over a connection of their own whose
//! user may publish to inboxes only (`--nats-reply-user`, docs/SECURITY.md),
//! so no bug here can reopen the hole.

use async_nats::Subject;
use bytes::Bytes;
use prometheus::IntCounterVec;

/// Where every client library puts its reply inboxes (`_INBOX` by default;
/// Chime's users narrow it to `_INBOX.<user>`, docs/SECURITY.md).
pub const INBOX_PREFIX: &str = "_INBOX.";

/// The longest reply subject answered; real inboxes are under 100 bytes.
const MAX_REPLY_SUBJECT: usize = 256;

/// What a reply answers, as the `kind` label of the refused-replies counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// An API verb (`chime.api.v1.<verb>`).
    Api,
    /// A worker's start request.
    Start,
}

impl ReplyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyKind::Api => "api",
            ReplyKind::Start => "start",
        }
    }
}

/// True for a subject in the inbox space: `_INBOX.` followed by literal
/// tokens (no wildcard, no empty token, printable ASCII only).
pub fn is_inbox(subject: &str) -> bool {
    let Some(rest) = subject.strip_prefix(INBOX_PREFIX) else {
        return false;
    };
    subject.len() <= MAX_REPLY_SUBJECT
        && rest.split('.').all(|token| {
            !token.is_empty()
                && token != "*"
                && token != ">"
                && token.bytes().all(|b| b.is_ascii_graphic())
        })
}

/// Sends answers to requesters' inboxes, and nowhere else.
#[derive(Clone)]
pub struct Replies {
    /// The connection answers leave over: the reply user's when one is
    /// configured, else the replica's own.
    nats: async_nats::Client,
    /// `chime_replies_refused_total{kind}`.
    refused: IntCounterVec,
}

impl Replies {
    pub fn new(nats: async_nats::Client, refused: IntCounterVec) -> Self {
        Replies { nats, refused }
    }

    /// Whether a request naming `reply` may be answered. A request that may
    /// not is counted and logged here, and its caller drops it unanswered
    /// and undone: nothing it asked for happens.
    pub fn accepts(&self, kind: ReplyKind, reply: &str) -> bool {
        if is_inbox(reply) {
            return true;
        }
        self.refused.with_label_values(&[kind.as_str()]).inc();
        let shown: String = reply.chars().take(64).collect();
        tracing::warn!(
            kind = kind.as_str(),
            reply = %shown,
            "dropped a request whose reply subject is not an inbox (_INBOX.…)"
        );
        false
    }

    /// Sends `body` to `reply`, if it is an inbox.
    pub async fn send(&self, kind: ReplyKind, reply: Subject, body: Bytes) {
        if !self.accepts(kind, &reply) {
            return;
        }
        if let Err(e) = self.nats.publish(reply, body).await {
            tracing::debug!(kind = kind.as_str(), error = %e, "cannot send a reply");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_literal_inbox_subjects_are_answered() {
        for (subject, ok) in [
            ("_INBOX.abc.def", true),
            ("_INBOX.chime-viewer.Xy7.1", true),
            ("_INBOX", false),
            ("_INBOX.", false),
            ("_INBOX..a", false),
            ("_INBOX.a.", false),
            ("_INBOX.*", false),
            ("_INBOX.a.>", false),
            ("_INBOX.a b", false),
            ("_inbox.a", false),
            ("chime.fire.default.normal", false),
            ("$KV.chime-slices.slice.1.0", false),
            ("$JS.API.STREAM.PURGE.KV_chime-workers", false),
            ("x._INBOX.a", false),
        ] {
            assert_eq!(is_inbox(subject), ok, "{subject:?}");
        }
        let long = format!("_INBOX.{}", "a".repeat(MAX_REPLY_SUBJECT));
        assert!(!is_inbox(&long));
    }
}
