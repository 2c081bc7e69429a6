//! Floor: what the durable minimum of a firing costs on this machine, with
//! no scheduler and no Chime worker running.
//!
//! Every design that keeps Chime's guarantees on a SQL store and
//! JetStream pays, per firing: its row inserted (here one statement per
//! second of firings, as staging batches them); a JetStream publish with a
//! message id, its ack awaited before the firing counts; a pull delivery;
//! a conditional update that lets each firing start at most once (one
//! statement for the firings delivered together, up to [`START_BATCH`](crate::yardstick::START_BATCH));
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
use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{self, consumer, Message};
use chrono::{TimeZone, Utc};
use futures::StreamExt;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row as _};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::env::{now_ms, sleep_until_ms, Env, GROUP};
use crate::load::{parse_body, Load};
use crate::report::Row;
use crate::steady::{finish, Span};
use crate::yardstick::{next_message, step_through, take_batches, threads, work_queue, Yardstick};
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
    };
    tasks.spawn(take_batches(
        firings,
        stop.clone(),
        threads(args),
        move |batch| {
            let starting = starting.clone();
            async move { starting.start(batch).await }
        },
    ));
    tasks.spawn(apply_finished(
        sql.clone(),
        args.floor_bookkeeping,
        finished,
        stop.clone(),
    ));
    let floor = Floor {
        sql: sql.clone(),
        js,
        bookkeeping: args.floor_bookkeeping,
    };
    let rows = step_through(&env, args, &floor).await;
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    sql.close().await;
    env.stop().await;
    rows
}

/// The architecture's floor as a [`Yardstick`]: staging rows and a
/// publisher per step, Chime's SQL accounting of the window.
struct Floor {
    sql: AnyPool,
    js: jetstream::Context,
    /// Also Chime's `waiting` row per staged firing (`--floor-bookkeeping`).
    bookkeeping: bool,
}

impl Yardstick for Floor {
    const SCENARIO: &'static str = "floor";
    const PREFIX: &'static str = "floor";

    fn drive(&self, load: Load) -> Vec<JoinHandle<anyhow::Result<()>>> {
        vec![
            tokio::spawn(stage(load.clone(), self.bookkeeping, self.sql.clone())),
            tokio::spawn(load.publish(self.js.clone(), FIRINGS_SUBJECT)),
        ]
    }

    async fn finish(&self, env: &Env, span: Span, load: &Load) -> anyhow::Result<Row> {
        let label = format!("{}/s", load.rate);
        let mut row = finish(env, span, Self::SCENARIO, &label, &load.prefix, load.rate).await?;
        row.note("floor", "no scheduler, no Chime worker: see floor.rs");
        row.note("floor_bookkeeping", self.bookkeeping);
        Ok(row)
    }
}

/// Inserts each second's firings one second before it, one statement each
/// (with `bookkeeping`, their `waiting` rows too).
async fn stage(load: Load, bookkeeping: bool, sql: AnyPool) -> anyhow::Result<()> {
    let per_second = i64::from(load.rate);
    let firings = format!(
        "INSERT INTO firings (id, job_id, scheduled_at, attempt, group_name, priority, \
             handler, payload, timeout_ms, due_at, state, created_at) \
         SELECT $3 || i, $3 || i, $4 + i * 1000 / $5, 1, '{GROUP}', 5, 'noop', '{{}}', \
             30000, $4 + i * 1000 / $5, 'staged', $6 FROM n"
    );
    let numbers =
        "WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $2)";
    let insert = if bookkeeping {
        format!(
            "{numbers}, staged AS ({firings} RETURNING id, group_name, due_at) \
             INSERT INTO waiting (firing_id, group_name, part, due_at, slice) \
             SELECT id, group_name, 0, due_at, 'floor' FROM staged"
        )
    } else {
        format!("{numbers} {firings}")
    };
    let mut first = 0;
    while first < load.count() {
        sleep_until_ms(load.due_ms(first) - 1000).await;
        sqlx::query(&insert)
            .bind(first)
            .bind(first + per_second)
            .bind(&load.prefix)
            .bind(load.start_ms)
            .bind(per_second)
            .bind(now_ms())
            .execute(&sql)
            .await
            .context("staging a second of firings")?;
        first += per_second;
    }
    Ok(())
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
}

impl Starting {
    /// Starts a batch: one conditional update lets each firing through at
    /// most once; every message is acked, and each started firing reports
    /// finished.
    async fn start(&self, batch: Vec<Message>) -> anyhow::Result<()> {
        let firings = batch
            .iter()
            .map(|message| parse_body(&message.payload))
            .collect::<anyhow::Result<Vec<_>>>()?;
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
    use super::placeholders;

    #[test]
    fn placeholders_number_from_the_first() {
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
        assert_eq!(placeholders(1, 1), "$1");
    }
}
