//! The transport floor: the least any design must do for a firing when
//! workers speak only NATS, whatever the scheduler keeps in SQL.
//!
//! Per firing: a publish with its id as `Nats-Msg-Id` to a work-queue
//! stream at its instant, by a publisher that holds the step's instants
//! (no SQL on the path); a pull delivery and its ack; a KV `create` on a
//! key named by the firing id in a bucket with a TTL, the start token
//! that lets each firing start at most once (a compare-and-swap, as
//! strong as the floor's conditional update); a finished event published
//! to an events stream; and that event appended to an append-only history
//! table once a second by one `COPY` (`history.rs`), then acked. The
//! steps, windows, lateness and CPU accounting are the floor's
//! (`yardstick.rs`), so Chime's cost can be read against both.

use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::{self, kv, Message};
use chrono::{TimeZone, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::env::Env;
use crate::history::{self, Appended};
use crate::load::{body, parse_body, Load};
use crate::report::Row;
use crate::steady::{window_row, Span};
use crate::yardstick::{step_through, stored, take_batches, threads, work_queue, Yardstick};
use crate::Args;

const FIRINGS: &str = "TRANSPORT_FIRINGS";
const FIRINGS_SUBJECT: &str = "transport.fire";
const EVENTS: &str = "TRANSPORT_EVENTS";
const EVENTS_SUBJECT: &str = "transport.finished";
/// The start tokens' bucket.
const STARTS: &str = "transport_starts";
/// How long a start token is kept: longer than any redelivery of its firing.
const START_TTL: Duration = Duration::from_secs(3600);

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    if args.backend != crate::Backend::Postgres {
        anyhow::bail!(
            "the transport floor appends its history to PostgreSQL: use --backend postgres"
        );
    }
    let bare = Args {
        workers: 0,
        ..args.clone()
    };
    // nats-server and a fresh database; no scheduler, no Chime worker.
    let env = Env::start(&bare, 0).await?;
    let pg = PgPoolOptions::new()
        .max_connections(4)
        .connect(&env.db.url())
        .await?;
    history::create_table(&pg).await?;
    let js = jetstream::new(env.nc.clone());
    let firings = work_queue(&js, FIRINGS, FIRINGS_SUBJECT).await?;
    let events = history::events_queue(&js, EVENTS, EVENTS_SUBJECT).await?;
    let starting = Starting {
        js: js.clone(),
        starts: start_tokens(&js).await?,
        recorder: env.recorder.clone(),
    };
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    tasks.spawn(take_batches(
        firings,
        stop.clone(),
        threads(args),
        move |batch| {
            let starting = starting.clone();
            async move { starting.start(batch).await }
        },
    ));
    tasks.spawn(history::append_every_second(
        pg.clone(),
        events,
        stop.clone(),
    ));
    let floor = TransportFloor {
        js,
        pg: pg.clone(),
        counted: Mutex::default(),
    };
    let rows = step_through(&env, args, &floor).await;
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    pg.close().await;
    env.stop().await;
    rows
}

/// The start tokens' bucket: one revision a key, kept [`START_TTL`].
async fn start_tokens(js: &jetstream::Context) -> anyhow::Result<kv::Store> {
    Ok(js
        .create_key_value(kv::Config {
            bucket: STARTS.to_owned(),
            history: 1,
            max_age: START_TTL,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await?)
}

/// The worker's side: each delivered firing's start token created; every
/// decided message acked; each started firing reports finished.
#[derive(Clone)]
struct Starting {
    js: jetstream::Context,
    starts: kv::Store,
    recorder: crate::record::Recorder,
}

impl Starting {
    /// Starts a batch: the tokens are created together (pipelined). A
    /// firing whose token exists already was started before and is only
    /// acked; one whose create failed otherwise is left for redelivery.
    async fn start(&self, batch: Vec<Message>) -> anyhow::Result<()> {
        let firings = batch
            .iter()
            .map(|message| parse_body(&message.payload))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let tokens = futures::future::join_all(
            firings
                .iter()
                .map(|(id, _)| self.starts.create(id, "transport".into())),
        )
        .await;
        let now = Utc::now();
        let mut reports = Vec::new();
        for ((message, (id, due_ms)), token) in batch.iter().zip(firings).zip(tokens) {
            let started = match token {
                Ok(_) => true,
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => false,
                Err(e) => {
                    eprintln!("  transport floor: the start token of {id}: {e}");
                    continue;
                }
            };
            message.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            if started {
                let due = Utc.timestamp_millis_opt(due_ms).single();
                let due = due.ok_or_else(|| anyhow::anyhow!("{id}: due instant out of range"))?;
                self.recorder.record_start(&id, due, due, 1, now);
                let event = body(&id, due_ms);
                reports.push(self.js.publish(EVENTS_SUBJECT, event.into()).await?);
            }
        }
        for report in reports {
            report.await?;
        }
        Ok(())
    }
}

/// The transport floor as a [`Yardstick`].
struct TransportFloor {
    js: jetstream::Context,
    pg: PgPool,
    /// Firings published and start tokens created before this step.
    counted: Mutex<(u64, u64)>,
}

impl Yardstick for TransportFloor {
    const SCENARIO: &'static str = "transport-floor";
    const PREFIX: &'static str = "tfloor";

    fn drive(&self, load: Load) -> Vec<JoinHandle<anyhow::Result<()>>> {
        vec![tokio::spawn(load.publish(self.js.clone(), FIRINGS_SUBJECT))]
    }

    /// Waits until every firing of the step is in the history, then counts
    /// the window's from there: succeeded is the distinct firings
    /// appended, and the step's figures say whether each firing was
    /// published, started and appended exactly once.
    async fn finish(&self, env: &Env, span: Span, load: &Load) -> anyhow::Result<Row> {
        let step = (load.start_ms, load.end_ms);
        let all = history::wait_for(
            &self.pg,
            &load.prefix,
            step,
            load.count(),
            Duration::from_secs(60),
        )
        .await?;
        let window = history::appended(&self.pg, &load.prefix, span.w0, span.w1).await?;
        let label = format!("{}/s", load.rate);
        let states = [("appended".to_owned(), window.rows)];
        let mut row = window_row(
            env,
            span,
            Self::SCENARIO,
            &label,
            load.rate,
            window.firings,
            states,
        )
        .await;
        row.note("history_duplicates", window.rows - window.firings);
        row.note("step", self.step_counts(load, all).await?);
        row.note(
            "transport_floor",
            "no scheduler, no Chime worker: see transport_floor.rs",
        );
        Ok(row)
    }
}

impl TransportFloor {
    /// The step's firings: due, published (stored by JetStream), start
    /// tokens created, history rows and distinct firings appended.
    async fn step_counts(&self, load: &Load, all: Appended) -> anyhow::Result<String> {
        let now = (
            stored(&self.js, FIRINGS).await?,
            stored(&self.js, &format!("KV_{STARTS}")).await?,
        );
        let before = std::mem::replace(&mut *self.counted.lock().unwrap(), now);
        Ok(format!(
            "due={},published={},start_tokens={},appended={},appended_firings={}",
            load.count(),
            now.0 - before.0,
            now.1 - before.1,
            all.rows,
            all.firings
        ))
    }
}
