//! One step of a yardstick's load: `rate` firings a second, evenly spread,
//! and the publisher that holds their instants and publishes each at its
//! instant, as a scheduler that already knows them (no SQL on its path).

use anyhow::Context;
use async_nats::jetstream;
use async_nats::HeaderMap;
use tokio_util::task::TaskTracker;

use crate::env::{now_ms, sleep_until_ms};

/// One step's firings: `rate` a second, evenly spread, from `start_ms` to
/// `end_ms`; firing `i` is due at `start_ms + i * 1000 / rate`.
#[derive(Clone, Debug)]
pub struct Load {
    pub prefix: String,
    pub rate: u32,
    pub start_ms: i64,
    pub end_ms: i64,
}

impl Load {
    pub fn count(&self) -> i64 {
        (self.end_ms - self.start_ms) / 1000 * i64::from(self.rate)
    }

    pub fn due_ms(&self, i: i64) -> i64 {
        self.start_ms + i * 1000 / i64::from(self.rate)
    }

    pub fn id(&self, i: i64) -> String {
        format!("{}{i}", self.prefix)
    }

    /// Publishes each firing to `subject` at its instant, with its id as
    /// the message id (JetStream drops a copy) and `"{id} {due_ms}"` as its
    /// body, and awaits every ack.
    pub async fn publish(
        self,
        js: jetstream::Context,
        subject: &'static str,
    ) -> anyhow::Result<()> {
        let acks = TaskTracker::new();
        let mut next = 0;
        while next < self.count() {
            sleep_until_ms(self.due_ms(next)).await;
            let now = now_ms();
            while next < self.count() && self.due_ms(next) <= now {
                let id = self.id(next);
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", id.as_str());
                let ack = js
                    .publish_with_headers(subject, headers, body(&id, self.due_ms(next)).into())
                    .await
                    .context("publishing a firing")?;
                acks.spawn(async move {
                    if let Err(e) = ack.await {
                        eprintln!("  a firing's publish was not acked: {e}");
                    }
                });
                next += 1;
            }
        }
        acks.close();
        acks.wait().await;
        Ok(())
    }
}

/// A firing's message body: its id and due instant.
pub fn body(id: &str, due_ms: i64) -> String {
    format!("{id} {due_ms}")
}

/// The id and due instant of a firing's message body.
pub fn parse_body(payload: &[u8]) -> anyhow::Result<(String, i64)> {
    let body = std::str::from_utf8(payload).context("a firing's body is not UTF-8")?;
    let (id, due) = body
        .split_once(' ')
        .context("a firing's body has no due instant")?;
    Ok((
        id.to_owned(),
        due.parse().context("a firing's due instant")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::{body, parse_body, Load};

    fn load(rate: u32) -> Load {
        Load {
            prefix: "floor00-".to_owned(),
            rate,
            start_ms: 10_000,
            end_ms: 13_000,
        }
    }

    #[test]
    fn a_load_spreads_its_rate_evenly_over_each_second() {
        let load = load(4);
        assert_eq!(load.count(), 12);
        let due: Vec<i64> = (0..load.count()).map(|i| load.due_ms(i)).collect();
        assert_eq!(&due[..5], &[10_000, 10_250, 10_500, 10_750, 11_000]);
        assert_eq!(due[11], 12_750, "the last firing is due before end_ms");
        assert_eq!(load.id(7), "floor00-7");
    }

    #[test]
    fn a_rate_that_does_not_divide_a_second_still_fires_rate_times_a_second() {
        let load = load(3);
        let in_first_second = (0..load.count())
            .filter(|&i| load.due_ms(i) < 11_000)
            .count();
        assert_eq!(in_first_second, 3);
    }

    #[test]
    fn a_body_carries_the_id_and_due_instant_and_a_bad_one_is_an_error() {
        assert_eq!(
            parse_body(body("floor00-7", 10_250).as_bytes()).unwrap(),
            ("floor00-7".to_owned(), 10_250)
        );
        assert!(parse_body(b"floor00-7").is_err());
        assert!(parse_body(b"floor00-7 soon").is_err());
    }
}
