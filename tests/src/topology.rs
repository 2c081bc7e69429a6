//! What a scheduler creates on NATS for a group, for suites that start
//! workers without a scheduler. Workers never create NATS objects; they wait
//! for a scheduler to create their group's consumers (docs/PROTOCOL.md).

use async_nats::jetstream::{self, consumer};
use chime_common::{Band, Subjects};
use chime_runtime::topology::TopologyConfig;

/// Creates `group`'s three firing consumers (one per band) with the
/// settings of docs/PROTOCOL.md, as a scheduler does for the groups it sees.
/// The stream `CHIME_FIRE` must exist. Idempotent.
pub async fn create_group_consumers(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    config: &TopologyConfig,
    group: &str,
) {
    let stream = jetstream
        .get_stream(subjects.fire_stream())
        .await
        .expect("the firing stream exists");
    for band in Band::ALL {
        let name = subjects.fire_consumer(group, band);
        stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: subjects.fire(group, band),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: config.fire_ack_wait,
                    max_ack_pending: config.fire_max_ack_pending,
                    max_deliver: -1,
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("create consumer {name}: {e}"));
    }
}
