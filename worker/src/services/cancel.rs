//! Cancel requests: core NATS `chime.cancel.<worker id>`, a [`CancelRequest`] each.

use crate::running::Running;
use async_nats::{Client, Subscriber};
use chime_common::protocol::CancelRequest;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// The cancel listener of one worker, as started (and restarted) by its supervisor.
#[derive(Clone)]
pub(crate) struct CancelListener {
    pub(crate) client: Client,
    /// `chime.cancel.<worker id>` under the subject prefix.
    pub(crate) subject: String,
    pub(crate) running: Running,
}

impl CancelListener {
    /// Answers cancel requests until `stop`, read from `requests`
    /// (start-up's subscription) or, when `None` (a restart), from a
    /// subscription it makes itself.
    pub(crate) async fn run(
        self,
        requests: Option<Subscriber>,
        stop: CancellationToken,
    ) -> Result<(), async_nats::SubscribeError> {
        let requests = match requests {
            Some(requests) => requests,
            None => self.client.subscribe(self.subject).await?,
        };
        listen(self.client, requests, self.running, stop).await;
        Ok(())
    }
}

/// Listens for cancel requests until `stop`.
///
/// A request for a firing that runs here cancels it (outcome `cancelled`,
/// error = the reason). A request that carries a reply subject is answered
/// `{"running": true|false}`.
async fn listen(
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
