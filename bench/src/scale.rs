//! Scale: `--rate` firings/s from `--rate` jobs, plus idle jobs (a yearly
//! cron) so that `--sizes` active jobs are held; lateness and scheduler RSS
//! at each size.
//!
//! "Held" is the steady state of a large job set, not the minutes after a
//! bulk load: after seeding, the job tables are vacuumed and analyzed (what
//! autovacuum does soon after in production), a checkpoint writes the bulk
//! load's pages out (otherwise PostgreSQL spreads that over the next minutes,
//! the measurement window included), and the window waits until no
//! autovacuum worker is busy in the database (at most `MAX_SETTLE`). The row
//! notes how long that took.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::{second_after, Env, GROUP};
use crate::report::Row;
use crate::steady::{every_second, measure, payload};
use crate::Args;

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    let t0 = second_after(Duration::from_secs(5));
    let prefix = "scale-";
    let rate = u64::from(args.rate);
    env.seed(
        args.seed_concurrency,
        rate,
        every_second(prefix, args.rate, t0, None, payload(args.payload_bytes)),
    )
    .await?;
    let mut held = rate;
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let mut seeded = String::from("-");
        let mut settled = Duration::ZERO;
        if size > held {
            let more = size - held;
            let from = held;
            let started = Instant::now();
            let put_rate = env
                .seed(args.seed_concurrency, more, |i| {
                    json!({
                        "id": format!("idle-{:08}", from + i),
                        "group": GROUP,
                        "schedule": {"cron": "0 0 1 1 *"},
                        "handler": "noop",
                    })
                })
                .await?;
            seeded = format!(
                "{more} in {:.0} s ({put_rate:.0}/s)",
                started.elapsed().as_secs_f64()
            );
            eprintln!("  seeded {seeded}");
            held = size;
            settled = settle(&env).await?;
        }
        let w0 = second_after(Duration::from_secs(args.warmup));
        let w1 = w0 + args.scale_window as i64 * 1000;
        let mut row = measure(
            &env,
            "scale",
            &format!("{size} jobs"),
            prefix,
            args.rate,
            w0,
            w1,
        )
        .await?;
        row.note("jobs_held", held);
        row.note("seeded", seeded.replace(' ', "_"));
        row.note("settled_s", settled.as_secs());
        rows.push(row);
    }
    env.stop().await;
    Ok(rows)
}

/// The longest wait for the database to settle after seeding.
const MAX_SETTLE: Duration = Duration::from_secs(180);

/// Vacuums and analyzes the job tables and checkpoints, then waits until no
/// autovacuum worker is busy in the database; returns how long it all took.
async fn settle(env: &Env) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for statement in ["VACUUM ANALYZE jobs, job_schedule", "CHECKPOINT"] {
        sqlx::query(statement).execute(&env.sql).await?;
    }
    while started.elapsed() < MAX_SETTLE {
        let (vacuuming,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'autovacuum worker' AND datname = current_database()",
        )
        .fetch_one(&env.sql)
        .await?;
        if vacuuming == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("  settled after {:.0} s", started.elapsed().as_secs_f64());
    Ok(started.elapsed())
}
