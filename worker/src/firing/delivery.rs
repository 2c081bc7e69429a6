//! How a firing reached this worker: pulled from its group's consumers, a
//! JetStream message to acknowledge, or offered (a broadcast job's firing
//! addressed to this worker, a core NATS message), with nothing to
//! acknowledge: the scheduler offers it again until it starts
//! (docs/PROTOCOL.md §4, "Offers").

use async_nats::jetstream::{self, AckKind};
use async_nats::HeaderMap;

/// One firing as delivered.
// Moved once, into its firing's task: boxing the larger variant would cost
// every pulled firing an allocation to save bytes nobody keeps.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Delivery {
    Pulled(jetstream::Message),
    Offered(async_nats::Message),
}

impl Delivery {
    pub(crate) fn headers(&self) -> Option<&HeaderMap> {
        match self {
            Delivery::Pulled(m) => m.headers.as_ref(),
            Delivery::Offered(m) => m.headers.as_ref(),
        }
    }

    pub(crate) fn payload(&self) -> &bytes::Bytes {
        match self {
            Delivery::Pulled(m) => &m.payload,
            Delivery::Offered(m) => &m.payload,
        }
    }

    pub(crate) fn subject(&self) -> &str {
        match self {
            Delivery::Pulled(m) => m.subject.as_str(),
            Delivery::Offered(m) => m.subject.as_str(),
        }
    }

    /// How often JetStream has delivered it; an offer counts once.
    pub(crate) fn delivered(&self) -> u64 {
        match self {
            Delivery::Pulled(m) => m
                .info()
                .ok()
                .and_then(|info| u64::try_from(info.delivered).ok())
                .unwrap_or(1),
            Delivery::Offered(_) => 1,
        }
    }

    /// Acknowledges a pulled message as `kind`; an offer has nothing to
    /// acknowledge (not taking it is dropping it).
    pub(crate) async fn ack(&self, kind: AckKind) {
        let Delivery::Pulled(message) = self else {
            return;
        };
        let what = match kind {
            AckKind::Ack => "ack",
            AckKind::Nak(_) => "nak",
            AckKind::Term => "terminate",
            _ => "acknowledge",
        };
        if let Err(error) = message.ack_with(kind).await {
            tracing::warn!(%error, "cannot {what} the firing message; JetStream will redeliver it");
        }
    }
}
