//! The NATS handles a replica's services share.

use async_nats::jetstream;
use chime_common::Subjects;

/// One connection, its JetStream context and the subjects of this
/// deployment, cloned into each service that publishes or reads streams.
#[derive(Clone)]
pub struct Nats {
    pub client: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
}
