//! Floor: what the durable minimum of a firing costs on this machine, with
//! no scheduler and no Chime worker running.
//!
//! Every design that keeps Chime's guarantees on a SQL store and
//! JetStream pays, per firing: its row inserted (here one statement per
//! second of firings, as staging batches them); a JetStream publish with a
//! message id, its ack awaited before the firing counts; a pull delivery;
//! a conditional update that lets each firing start at most once (one
//! statement for the firings delivered together, up to [`START_BATCH`]);
//! the message's ack; a finished event published to a second work-queue
//! stream and acked by JetStream; its delivery, applied with those behind it
//! (up to [`FINISH_BATCH`], waiting [`FINISH_LINGER`]) in one update, and
//! acked. This scenario runs only that, at each of `--rates` for `--step`
//! seconds, on the same nats-server, database and cost report as the other
//! scenarios, so its per-process CPU per firing is a lower bound for
//! Chime's. Chime adds what the floor leaves out: the doorbell, the start
//! request and its reply, the `waiting` and `executing` rows, the job's
//! schedule, history and metrics. With `--floor-bookkeeping` (PostgreSQL)
//! the floor also writes the `waiting` and `executing` rows, in the same
//! statements as Chime's fast paths do, to show what those rows cost.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{self, consumer, stream, Message};
use async_nats::HeaderMap;
use chrono::{TimeZone, Utc};
use futures::{FutureExt, StreamExt};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row as _};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::env::{now_ms, second_after, sleep_until_ms, Env, GROUP};
use crate::report::Row;
use crate::steady::{finish, observe_with_metrics};
use crate::Args;

const FIRINGS: &str = "FLOOR_FIRINGS";
const FIRINGS_SUBJECT: &str = "floor.fire";
const FINISHED: &str = "FLOOR_FINISHED";
const FINISHED_SUBJECT: &str = "floor.finished";
/// Most finished events applied by one update (the scheduler's default).
const FINISH_BATCH: usize = 500;
/// How long the first finished event of a batch waits for others (the
/// scheduler's default).
const FINISH_LINGER: Duration = Duration::from_millis(5);
/// Most firings started by one update (the scheduler's default).
const START_BATCH: usize = 500;

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let bare = Args {
        workers: 0,
        ..args.clone()
    };
    if args.floor_bookkeeping && args.backend != crate::Backend::Postgres {
        anyhow::bail!("--floor-bookkeeping writes PostgreSQL's statements: use --backend postgres");
    }
    // nats-server and a fresh database with Chime's schema; no scheduler, no worker.
    let env = Env::start(&bare, 0).await?;
    let sql = AnyPoolOptions::new()
        .max_connections(16)
        .connect(&env.db.url())
        .await?;
    let js = jetstream::new(env.nc.clone());
    let firings = work_queue(&js, FIRINGS, FIRINGS_SUBJECT).await?;
    let finished = work_queue(&js, FINISHED, FINISHED_SUBJECT).await?;
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let starting = Starting {
        sql: sql.clone(),
        bookkeeping: args.floor_bookkeeping,
        js: js.clone(),
        recorder: env.recorder.clone(),
        // As many firings in flight as the other scenarios' two workers run.
        threads: Arc::new(Semaphore::new(
            args.threads.saturating_mul(args.workers.max(1)),
        )),
    };
    tasks.spawn(starting.run(firings, stop.clone()));
    tasks.spawn(apply_finished(
        sql.clone(),
        args.floor_bookkeeping,
        finished,
        stop.clone(),
    ));

    let step_ms = ((args.warmup + args.step) * 1000) as i64;
    let mut rows = Vec::new();
    for (k, &rate) in args.rates.iter().enumerate() {
        anyhow::ensure!(rate > 0, "--rates: a rate must be at least 1");
        let start = second_after(Duration::from_secs(3));
        let (w0, w1) = (start + args.warmup as i64 * 1000, start + step_ms);
        let load = Load {
            prefix: format!("floor{k:02}-"),
            bookkeeping: args.floor_bookkeeping,
            rate,
            start_ms: start,
            end_ms: w1,
        };
        let window = env.recorder.add_window(w0, w1);
        let staging = tokio::spawn(load.clone().stage(sql.clone()));
        let publishing = tokio::spawn(load.clone().publish(js.clone()));
        let span = observe_with_metrics(&env, window, w0, w1).await;
        staging.await.context("staging task")??;
        publishing.await.context("publishing task")??;
        let mut row = finish(
            &env,
            span,
            "floor",
            &format!("{rate}/s"),
            &load.prefix,
            rate,
        )
        .await?;
        eprintln!(
            "  {rate}/s: {:.0} fired/s, p99 {:.1} ms, lost {}",
            row.firings_per_s, row.p99_ms, row.lost
        );
        row.note("floor", "no scheduler, no Chime worker: see floor.rs");
        row.note("floor_bookkeeping", args.floor_bookkeeping);
        rows.push(row);
    }
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    sql.close().await;
    env.stop().await;
    Ok(rows)
}

/// A file-storage work-queue stream on `subject` and its one pull consumer.
async fn work_queue(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
) -> anyhow::Result<consumer::PullConsumer> {
    let stream = js
        .create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec![subject.to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    Ok(stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?)
}

/// One step's firings: `rate` a second, evenly spread, from `start_ms` to
/// `end_ms`; firing `i` is due at `start_ms + i * 1000 / rate`.
#[derive(Clone)]
struct Load {
    prefix: String,
    /// Also Chime's `waiting` row per staged firing (`--floor-bookkeeping`).
    bookkeeping: bool,
    rate: u32,
    start_ms: i64,
    end_ms: i64,
}

impl Load {
    fn count(&self) -> i64 {
        (self.end_ms - self.start_ms) / 1000 * i64::from(self.rate)
    }

    fn due_ms(&self, i: i64) -> i64 {
        self.start_ms + i * 1000 / i64::from(self.rate)
    }

    fn id(&self, i: i64) -> String {
        format!("{}{i}", self.prefix)
    }

    /// Inserts each second's firings one second before it, one statement each.
    async fn stage(self, sql: AnyPool) -> anyhow::Result<()> {
        let per_second = i64::from(self.rate);
        let firings = format!(
            "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, \
                 handler, payload, timeout_ms, due_at, state, created_at) \
             SELECT $3 || i, $3 || i, $4 + i * 1000 / $5, 1, '{GROUP}', 5, 'noop', '{{}}', \
                 30000, $4 + i * 1000 / $5, 'staged', $6 FROM n"
        );
        let numbers =
            "WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $2)";
        let insert = if self.bookkeeping {
            format!(
                "{numbers}, staged AS ({firings} RETURNING id, group_name, due_at) \
                 INSERT INTO waiting (firing_id, group_name, part, due_at, slice) \
                 SELECT id, group_name, 0, due_at, 'floor' FROM staged"
            )
        } else {
            format!("{numbers} {firings}")
        };
        let mut first = 0;
        while first < self.count() {
            sleep_until_ms(self.due_ms(first) - 1000).await;
            sqlx::query(&insert)
                .bind(first)
                .bind(first + per_second)
                .bind(&self.prefix)
                .bind(self.start_ms)
                .bind(per_second)
                .bind(now_ms())
                .execute(&sql)
                .await
                .context("staging a second of firings")?;
            first += per_second;
        }
        Ok(())
    }

    /// Publishes each firing at its instant, with its id as the message id
    /// (JetStream drops a copy), and awaits every ack.
    async fn publish(self, js: jetstream::Context) -> anyhow::Result<()> {
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
                    .publish_with_headers(
                        FIRINGS_SUBJECT,
                        headers,
                        format!("{id} {}", self.due_ms(next)).into(),
                    )
                    .await
                    .context("publishing a firing")?;
                acks.spawn(async move {
                    if let Err(e) = ack.await {
                        eprintln!("  floor: a firing's publish was not acked: {e}");
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

/// The worker's side of the floor: each delivered firing started through
/// the conditional update, acked, and reported finished.
#[derive(Clone)]
struct Starting {
    sql: AnyPool,
    /// Also Chime's `executing` row, and the `waiting` row deleted.
    bookkeeping: bool,
    js: jetstream::Context,
    recorder: crate::record::Recorder,
    threads: Arc<Semaphore>,
}

impl Starting {
    /// Takes delivered firings as they come; those already delivered
    /// together are started by one update, as the scheduler decides the
    /// start requests waiting together in one store call.
    async fn run(self, consumer: consumer::PullConsumer, stop: CancellationToken) {
        let mut messages = match consumer.messages().await {
            Ok(messages) => messages,
            Err(e) => return eprintln!("  floor: cannot pull firings: {e}"),
        };
        while let Some(first) = next_message(&mut messages, &stop, "firings").await {
            let mut batch = vec![first];
            while batch.len() < START_BATCH {
                match messages.next().now_or_never() {
                    Some(Some(Ok(message))) => batch.push(message),
                    _ => break,
                }
            }
            let Ok(permits) = self
                .threads
                .clone()
                .acquire_many_owned(batch.len() as u32)
                .await
            else {
                return;
            };
            let this = self.clone();
            tokio::spawn(async move {
                if let Err(e) = this.start(batch).await {
                    eprintln!("  floor: {e:#}");
                }
                drop(permits);
            });
        }
    }

    /// Starts a batch: one conditional update lets each firing through at
    /// most once; every message is acked, and each started firing reports
    /// finished.
    async fn start(&self, batch: Vec<Message>) -> anyhow::Result<()> {
        let mut firings = Vec::with_capacity(batch.len());
        for message in &batch {
            let body = std::str::from_utf8(&message.payload)?;
            let (id, due) = body.split_once(' ').context("a firing's body")?;
            firings.push((id.to_owned(), due.parse::<i64>()?));
        }
        let started = format!(
            "UPDATE firings SET state = 'executing', worker = 'floor', started_at = $1, \
                 published_at = COALESCE(published_at, $1) \
             WHERE id IN ({}) AND state IN ('staged', 'published')",
            placeholders(2, firings.len())
        );
        let update = if self.bookkeeping {
            format!(
                "WITH started AS ({started} RETURNING id, job_id, group_name, attempt, timeout_ms), \
                 executing_rows AS (INSERT INTO executing (firing_id, job_id, group_name, \
                     worker_id, attempt, started_at, deadline_at) \
                     SELECT id, job_id, group_name, 'floor', attempt, $1, $1 + timeout_ms \
                     FROM started), \
                 no_longer_waiting AS (DELETE FROM waiting w USING started \
                     WHERE w.firing_id = started.id) \
                 SELECT id FROM started"
            )
        } else {
            format!("{started} RETURNING id")
        };
        let mut query = sqlx::query(&update).bind(now_ms());
        for (id, _) in &firings {
            query = query.bind(id.as_str());
        }
        let started: HashSet<String> = query
            .fetch_all(&self.sql)
            .await?
            .iter()
            .map(|row| row.try_get::<String, _>(0))
            .collect::<Result<_, _>>()?;
        for message in &batch {
            message.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let now = Utc::now();
        let mut reports = Vec::new();
        for (id, due_ms) in firings {
            if !started.contains(&id) {
                continue;
            }
            let due = Utc.timestamp_millis_opt(due_ms).single().context("due")?;
            self.recorder.record_start(&id, due, due, 1, now);
            reports.push(self.js.publish(FINISHED_SUBJECT, id.into()).await?);
        }
        for report in reports {
            report.await?;
        }
        Ok(())
    }
}

/// The next message of `messages`, or `None` once `stop` is cancelled or
/// the stream ended; a failed pull is reported and skipped (the client
/// pulls again).
async fn next_message(
    messages: &mut consumer::pull::Stream,
    stop: &CancellationToken,
    what: &str,
) -> Option<Message> {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            next = messages.next() => match next? {
                Ok(message) => return Some(message),
                Err(e) => eprintln!("  floor: pulling {what}: {e}"),
            },
        }
    }
}

/// `$first, $first+1, …`: `count` numbered parameters.
fn placeholders(first: usize, count: usize) -> String {
    let marks: Vec<String> = (first..first + count).map(|i| format!("${i}")).collect();
    marks.join(", ")
}

/// The scheduler's side: finished events applied in batches, one update
/// each (with `bookkeeping`, the executing rows deleted by the same statement).
async fn apply_finished(
    sql: AnyPool,
    bookkeeping: bool,
    consumer: consumer::PullConsumer,
    stop: CancellationToken,
) {
    let mut messages = match consumer.messages().await {
        Ok(messages) => messages,
        Err(e) => return eprintln!("  floor: cannot pull finished events: {e}"),
    };
    while let Some(first) = next_message(&mut messages, &stop, "finished events").await {
        let mut batch = vec![first];
        let linger = tokio::time::sleep(FINISH_LINGER);
        tokio::pin!(linger);
        while batch.len() < FINISH_BATCH {
            tokio::select! {
                _ = &mut linger => break,
                next = messages.next() => match next {
                    Some(Ok(message)) => batch.push(message),
                    _ => break,
                },
            }
        }
        let ids: Vec<&str> = batch
            .iter()
            .filter_map(|m| std::str::from_utf8(&m.payload).ok())
            .collect();
        let succeeded = format!(
            "UPDATE firings SET state = 'succeeded', finished_at = $1 \
             WHERE state = 'executing' AND id IN ({})",
            placeholders(2, ids.len())
        );
        let update = if bookkeeping {
            format!(
                "WITH succeeded AS ({succeeded} RETURNING id) \
                 DELETE FROM executing e USING succeeded s WHERE e.firing_id = s.id"
            )
        } else {
            succeeded
        };
        let mut query = sqlx::query(&update).bind(now_ms());
        for id in &ids {
            query = query.bind(*id);
        }
        match query.execute(&sql).await {
            Ok(_) => {
                for message in &batch {
                    let _ = message.ack().await;
                }
            }
            Err(e) => eprintln!("  floor: applying finished events: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{placeholders, Load};

    fn load(rate: u32) -> Load {
        Load {
            prefix: "floor00-".to_owned(),
            bookkeeping: false,
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
    fn placeholders_number_from_the_first() {
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
        assert_eq!(placeholders(1, 1), "$1");
    }
}
