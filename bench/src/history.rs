//! History appended once a second: the finished events of a second are
//! written to an append-only table by one `COPY` and acked only after it
//! commits, the least a design that keeps a durable history can do per
//! firing. A failed `COPY` keeps its events for the next second (nothing
//! is acked that was not written).

use std::time::{Duration, Instant};

use anyhow::Context;
use async_nats::jetstream::{self, consumer, Message};
use futures::StreamExt;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::env::now_ms;
use crate::load::parse_body;
use crate::yardstick::work_queue_with;

/// How often the appender writes what it gathered.
pub const EVERY: Duration = Duration::from_secs(1);

/// The append-only history: no key, no index, no update.
pub async fn create_table(pg: &PgPool) -> anyhow::Result<()> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS history_appended \
         (firing_id TEXT NOT NULL, due_ms BIGINT NOT NULL, finished_ms BIGINT NOT NULL)",
    )
    .execute(pg)
    .await
    .context("creating the history table")?;
    Ok(())
}

/// The finished events' work-queue stream and its consumer, with room for
/// a whole second of them unacked.
pub async fn events_queue(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
) -> anyhow::Result<consumer::PullConsumer> {
    let config = consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        ack_policy: consumer::AckPolicy::Explicit,
        max_ack_pending: 1_000_000,
        ..Default::default()
    };
    work_queue_with(js, name, subject, config).await
}

/// Gathers finished events and appends them every [`EVERY`] until `stop`.
pub async fn append_every_second(
    pg: PgPool,
    consumer: consumer::PullConsumer,
    stop: CancellationToken,
) {
    let mut messages = match consumer.messages().await {
        Ok(messages) => messages,
        Err(e) => return eprintln!("  cannot pull finished events: {e}"),
    };
    let mut gathered: Vec<Message> = Vec::new();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => match append(&pg, &gathered).await {
                Ok(()) => gathered.clear(),
                Err(e) => eprintln!("  appending history: {e:#}"),
            },
            next = messages.next() => match next {
                Some(Ok(message)) => gathered.push(message),
                Some(Err(e)) => eprintln!("  pulling finished events: {e}"),
                None => return,
            },
        }
    }
}

/// One `COPY` of `events`, then each event acked (a work-queue stream
/// takes no cumulative ack).
async fn append(pg: &PgPool, events: &[Message]) -> anyhow::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let rows = copy_rows(events, now_ms())?;
    let mut conn = pg.acquire().await?;
    let mut copy = conn
        .copy_in_raw("COPY history_appended (firing_id, due_ms, finished_ms) FROM STDIN")
        .await?;
    copy.send(rows.into_bytes()).await?;
    copy.finish().await?;
    for event in events {
        event
            .ack()
            .await
            .map_err(|e| anyhow::anyhow!("acking a finished event: {e}"))?;
    }
    Ok(())
}

/// `COPY`'s text rows for `events`, each finished at `finished_ms`.
fn copy_rows(events: &[Message], finished_ms: i64) -> anyhow::Result<String> {
    let mut rows = String::with_capacity(events.len() * 40);
    for event in events {
        let (id, due_ms) = parse_body(&event.payload)?;
        push_copy_row(&mut rows, &id, due_ms, finished_ms)?;
    }
    Ok(rows)
}

/// Appends one `COPY` text row; an id that the text format would have to
/// escape is refused rather than written wrong.
pub fn push_copy_row(
    rows: &mut String,
    id: &str,
    due_ms: i64,
    finished_ms: i64,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !id.contains(['\t', '\n', '\r', '\\']),
        "a firing id with a tab, line break or backslash: {id:?}"
    );
    rows.push_str(&format!("{id}\t{due_ms}\t{finished_ms}\n"));
    Ok(())
}

/// History rows of the firings starting with `prefix`, due in `[from_ms,
/// to_ms)`: all of them, and how many distinct firings they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    pub rows: i64,
    pub firings: i64,
}

pub async fn appended(
    pg: &PgPool,
    prefix: &str,
    from_ms: i64,
    to_ms: i64,
) -> anyhow::Result<Appended> {
    let (rows, firings): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT firing_id) FROM history_appended \
         WHERE firing_id LIKE $1 AND due_ms >= $2 AND due_ms < $3",
    )
    .bind(format!("{prefix}%"))
    .bind(from_ms)
    .bind(to_ms)
    .fetch_one(pg)
    .await?;
    Ok(Appended { rows, firings })
}

/// Waits (at most `timeout`) until `count` firings of `prefix` due in
/// `[from_ms, to_ms)` are in the history; returns what is there then.
pub async fn wait_for(
    pg: &PgPool,
    prefix: &str,
    (from_ms, to_ms): (i64, i64),
    count: i64,
    timeout: Duration,
) -> anyhow::Result<Appended> {
    let deadline = Instant::now() + timeout;
    loop {
        let now = appended(pg, prefix, from_ms, to_ms).await?;
        if now.firings >= count || Instant::now() >= deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::push_copy_row;

    #[test]
    fn a_copy_row_is_tab_separated_and_an_id_to_escape_is_refused() {
        let mut rows = String::new();
        push_copy_row(&mut rows, "tfloor00-7", 10_250, 10_300).unwrap();
        assert_eq!(rows, "tfloor00-7\t10250\t10300\n");
        assert!(push_copy_row(&mut rows, "a\tb", 1, 2).is_err());
        assert!(push_copy_row(&mut rows, "a\\N", 1, 2).is_err());
        assert_eq!(
            rows, "tfloor00-7\t10250\t10300\n",
            "nothing written for a refused id"
        );
    }
}
