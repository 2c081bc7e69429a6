//! Cancel requests: core NATS `chime.cancel.<worker id>`, a [`CancelRequest`] each.

use crate::running::Running;
use async_nats::{Client, Subscriber};
use chime_common::protocol::CancelRequest;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Listens for cancel requests until `stop`.
///
/// A request for a firing that runs here cancels it (outcome `cancelled`,
/// error = the reason). A request that carries a reply subject is answered
/// `{"running": true|false}`.
pub(crate) async fn listen(
    client: Client,
    mut requests: Subscriber,
    running: Running,
    stop: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            message = requests.next() => match message {
                Some(message) => message,
                None => return,
            },
            _ = stop.cancelled() => break,
        };
        let found = match serde_json::from_slice::<CancelRequest>(&message.payload) {
            Ok(request) => {
                let found = running.cancel(&request.firing_id, &request.reason);
                tracing::info!(firing_id = %request.firing_id, reason = %request.reason, found, "cancel request");
                found
            }
            Err(error) => {
                tracing::warn!(%error, "ignoring an unreadable cancel request");
                false
            }
        };
        if let Some(reply) = message.reply {
            let answer = serde_json::json!({ "running": found }).to_string();
            if let Err(error) = client.publish(reply, answer.into()).await {
                tracing::debug!(%error, "cannot answer a cancel request");
            }
        }
    }
    let _ = requests.unsubscribe().await;
}
