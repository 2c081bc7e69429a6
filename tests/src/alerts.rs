//! Alerts as the scheduler published them on `CHIME_ALERTS`.

use crate::NatsServer;
use chime_common::protocol::Alert;
use std::time::Duration;

/// Every alert on the `CHIME_ALERTS` stream so far, oldest first.
pub async fn alerts_of(nats: &NatsServer) -> Vec<Alert> {
    let js = async_nats::jetstream::new(nats.connect().await);
    let mut stream = js.get_stream("CHIME_ALERTS").await.expect("alerts stream");
    let stored = stream.info().await.expect("stream info").state.messages;
    if stored == 0 {
        return Vec::new();
    }
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config::default())
        .await
        .expect("consumer");
    let mut alerts = Vec::new();
    let mut batch = consumer
        .fetch()
        .max_messages(usize::try_from(stored).unwrap_or(usize::MAX))
        .expires(Duration::from_secs(1))
        .messages()
        .await
        .expect("fetch");
    while let Some(Ok(message)) = futures::StreamExt::next(&mut batch).await {
        alerts.push(serde_json::from_slice::<Alert>(&message.payload).expect("alert JSON"));
    }
    alerts
}
