//! The limit: what each operation of a firing costs on this machine, on
//! its own and flat out, and so how many firings a second the machine's
//! cores could carry at 100 % if a firing did nothing but those
//! operations. Each operation runs for `--step` seconds on fresh services
//! (the transport floor's: nats-server with file storage, PostgreSQL) and
//! is charged the machine's busy CPU over that time, all processes, the
//! way the floors are.
//!
//! A firing's operations are those of the transport floor: two JetStream
//! publishes with a message id and their acks (the firing, its finished
//! event), two pull deliveries and acks, one KV create, one row of a `COPY`.

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use async_nats::HeaderMap;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::env::Env;
use crate::history::{create_table, push_copy_row};
use crate::load::body;
use crate::report::{cpus, MachineCpu, Row};
use crate::yardstick::work_queue;
use crate::Args;

const STREAM: &str = "LIMIT_FIRINGS";
const SUBJECT: &str = "limit.fire";
/// The note with the firings a second the machine's cores could carry.
pub const LIMIT_NOTE: &str = "limit_firings_per_s";
/// The label of the row with a firing's summed cost and the limit.
pub const FIRING_LABEL: &str = "a firing";

/// One operation measured flat out.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub name: &'static str,
    /// How many times one firing does it.
    pub per_firing: f64,
    pub ops: u64,
    pub seconds: f64,
    /// The machine's busy CPU seconds over the run, all processes.
    pub cpu_s: f64,
}

impl Op {
    pub fn per_s(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }

    pub fn cpu_s_per_1k(&self) -> f64 {
        self.cpu_s / (self.ops.max(1) as f64 / 1000.0)
    }
}

/// A firing's CPU seconds per 1,000 firings (each operation as many times
/// as a firing does it), and the firings a second `cores` carry at 100 %.
pub fn firing_cost(ops: &[Op], cores: usize) -> (f64, f64) {
    let per_1k: f64 = ops.iter().map(|op| op.per_firing * op.cpu_s_per_1k()).sum();
    let rate = if per_1k > 0.0 {
        cores as f64 * 1000.0 / per_1k
    } else {
        0.0
    };
    (per_1k, rate)
}

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    if args.backend != crate::Backend::Postgres {
        anyhow::bail!("the limit measures PostgreSQL's COPY: use --backend postgres");
    }
    let env = Env::start(
        &Args {
            workers: 0,
            ..args.clone()
        },
        0,
    )
    .await?;
    let pg = PgPoolOptions::new()
        .max_connections(1)
        .connect(&env.db.url())
        .await?;
    create_table(&pg).await?;
    let js = jetstream::new(env.nc.clone());
    let for_each = Duration::from_secs(args.step.max(1));
    let in_flight = args.limit_in_flight.max(1);
    let consumer = work_queue(&js, STREAM, SUBJECT).await?;
    let publish = measure("JetStream publish+ack", 2.0, || {
        publish(&js, for_each, in_flight)
    })
    .await?;
    let published = publish.ops;
    let consume = measure("consume+ack", 2.0, || {
        consume(consumer, published, for_each)
    })
    .await?;
    let kv = start_tokens(&js).await?;
    let create = measure("KV create", 1.0, || create(&kv, for_each, in_flight)).await?;
    let rows = args.limit_copy_rows.max(1);
    let copy = measure("PostgreSQL COPY row", 1.0, || copy(&pg, for_each, rows)).await?;
    let ops = [publish, consume, create, copy];
    print(&ops, in_flight, rows);
    pg.close().await;
    env.stop().await;
    Ok(rows_of(&ops))
}

/// Runs `op` and charges it the machine's busy CPU over its time.
async fn measure<F, Fut>(name: &'static str, per_firing: f64, op: F) -> anyhow::Result<Op>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<u64>>,
{
    let (cpu0, started) = (MachineCpu::read(), Instant::now());
    let ops = op().await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_s = MachineCpu::read().busy_seconds_since(&cpu0);
    eprintln!("  {name}: {ops} in {seconds:.1} s");
    Ok(Op {
        name,
        per_firing,
        ops,
        seconds,
        cpu_s,
    })
}

/// Publishes with a message id for `time`, `in_flight` acks outstanding.
async fn publish(js: &jetstream::Context, time: Duration, in_flight: usize) -> anyhow::Result<u64> {
    let until = Instant::now() + time;
    let mut acks = VecDeque::with_capacity(in_flight);
    let mut n = 0u64;
    while Instant::now() < until {
        let id = format!("limit-{n}");
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.as_str());
        let payload = body(&id, 0).into();
        acks.push_back(js.publish_with_headers(SUBJECT, headers, payload).await?);
        n += 1;
        if acks.len() >= in_flight {
            acks.pop_front().expect("an ack in flight").await?;
        }
    }
    for ack in acks {
        ack.await?;
    }
    Ok(n)
}

/// Pulls (in the client's batches) and acks `count` messages, or as many
/// as come within `time` and a second.
async fn consume(
    consumer: jetstream::consumer::PullConsumer,
    count: u64,
    time: Duration,
) -> anyhow::Result<u64> {
    let until = tokio::time::Instant::now() + time + Duration::from_secs(1);
    let mut messages = consumer.messages().await?;
    let mut n = 0u64;
    while n < count {
        match tokio::time::timeout_at(until, messages.next()).await {
            Ok(Some(message)) => {
                message?.ack().await.map_err(|e| anyhow::anyhow!("{e}"))?;
                n += 1;
            }
            Ok(None) | Err(_) => break,
        }
    }
    Ok(n)
}

async fn start_tokens(js: &jetstream::Context) -> anyhow::Result<kv::Store> {
    Ok(js
        .create_key_value(kv::Config {
            bucket: "limit_starts".to_owned(),
            history: 1,
            max_age: Duration::from_secs(3600),
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await?)
}

/// Creates new keys for `time`, `in_flight` creates outstanding.
async fn create(kv: &kv::Store, time: Duration, in_flight: usize) -> anyhow::Result<u64> {
    let until = Instant::now() + time;
    let mut pending = FuturesUnordered::new();
    let mut n = 0u64;
    while Instant::now() < until {
        if pending.len() >= in_flight {
            pending.next().await.expect("a create in flight")?;
        }
        pending.push(kv.create(format!("limit-{n}"), "limit".into()));
        n += 1;
    }
    while let Some(created) = pending.next().await {
        created?;
    }
    Ok(n)
}

/// Appends `rows` rows by one `COPY` after another for `time`.
async fn copy(pg: &PgPool, time: Duration, rows: u64) -> anyhow::Result<u64> {
    let until = Instant::now() + time;
    let mut conn = pg.acquire().await?;
    let mut n = 0u64;
    while Instant::now() < until {
        let mut text = String::with_capacity(rows as usize * 40);
        for i in n..n + rows {
            push_copy_row(&mut text, &format!("limit-{i}"), i as i64, i as i64)?;
        }
        let mut copy = conn
            .copy_in_raw("COPY history_appended (firing_id, due_ms, finished_ms) FROM STDIN")
            .await?;
        copy.send(text.into_bytes()).await?;
        copy.finish().await?;
        n += rows;
    }
    Ok(n)
}

/// The limit's table: each operation, then a firing's sum and the limit.
fn print(ops: &[Op], in_flight: usize, copy_rows: u64) {
    println!();
    println!("### limit ({in_flight} publishes or creates in flight, {copy_rows} rows a COPY)");
    println!(
        "| {:<22} | {:>10} | {:>10} | {:>12} | {:>18} |",
        "operation", "per firing", "ops/s", "CPU s/1k ops", "CPU s/1k firings"
    );
    println!("|{}|", ["---"; 5].join("|"));
    for op in ops {
        println!(
            "| {:<22} | {:>10} | {:>10.0} | {:>12.4} | {:>18.4} |",
            op.name,
            op.per_firing,
            op.per_s(),
            op.cpu_s_per_1k(),
            op.per_firing * op.cpu_s_per_1k()
        );
    }
    let (per_1k, rate) = firing_cost(ops, cpus());
    println!(
        "| {:<22} | {:>10} | {:>10} | {:>12} | {:>18.4} |",
        FIRING_LABEL, "", "", "", per_1k
    );
    println!(
        "limit: {} cores at 100 % carry {rate:.0} firings/s of these operations",
        cpus()
    );
}

/// A row per operation and one for a firing (its summed cost and the
/// limit), for the JSON output and the summary of `--runs`.
fn rows_of(ops: &[Op]) -> Vec<Row> {
    let mut rows: Vec<Row> = ops
        .iter()
        .map(|op| {
            let mut row = Row {
                scenario: "limit".to_owned(),
                label: op.name.to_owned(),
                window_s: op.seconds,
                ..Row::default()
            };
            row.note("ops", op.ops);
            row.note("ops_per_s", format!("{:.0}", op.per_s()));
            row.note(
                "cpu_s_per_1k_ops_machine",
                format!("{:.4}", op.cpu_s_per_1k()),
            );
            row.note("per_firing", op.per_firing);
            row
        })
        .collect();
    let (per_1k, rate) = firing_cost(ops, cpus());
    let mut firing = Row {
        scenario: "limit".to_owned(),
        label: FIRING_LABEL.to_owned(),
        ..Row::default()
    };
    firing.note("cpu_s_per_1k_firings_machine", format!("{per_1k:.4}"));
    firing.note("cores", cpus());
    firing.note(LIMIT_NOTE, format!("{rate:.0}"));
    rows.push(firing);
    rows
}

#[cfg(test)]
mod tests {
    use super::{firing_cost, Op};

    fn op(per_firing: f64, ops: u64, cpu_s: f64) -> Op {
        Op {
            name: "op",
            per_firing,
            ops,
            seconds: 10.0,
            cpu_s,
        }
    }

    #[test]
    fn a_firings_cost_sums_each_operation_as_often_as_it_does_it() {
        // 0.1 and 0.05 CPU s per 1,000 ops; the first twice a firing.
        let ops = [op(2.0, 10_000, 1.0), op(1.0, 20_000, 1.0)];
        let (per_1k, rate) = firing_cost(&ops, 2);
        assert!((per_1k - 0.25).abs() < 1e-9, "{per_1k}");
        assert!((rate - 8_000.0).abs() < 1e-6, "{rate}");
        assert_eq!(ops[0].per_s(), 1_000.0);
    }

    #[test]
    fn nothing_measured_carries_nothing() {
        assert_eq!(firing_cost(&[op(1.0, 0, 0.0)], 2), (0.0, 0.0));
        assert_eq!(firing_cost(&[], 2), (0.0, 0.0));
    }
}
