//! Scale: `--rate` firings/s from `--rate` jobs, plus idle jobs (a yearly
//! cron) so that `--sizes` active jobs are held; lateness and scheduler RSS
//! at each size.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::{second_after, Env, GROUP};
use crate::report::Row;
use crate::steady::{every_second, measure};
use crate::Args;

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    let t0 = second_after(Duration::from_secs(5));
    let prefix = "scale-";
    let rate = u64::from(args.rate);
    env.seed(
        args.seed_concurrency,
        rate,
        every_second(prefix, args.rate, t0, None),
    )
    .await?;
    let mut held = rate;
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let mut seeded = String::from("-");
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
        rows.push(row);
    }
    env.stop().await;
    Ok(rows)
}
