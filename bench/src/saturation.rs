//! Saturation: steps through `--rates`; each step's jobs fire only inside
//! their own `--warmup` + `--step` seconds (`start_at`/`end_at`), so the
//! steps follow each other open-loop. Stops after the first step whose p99
//! lateness passes `--p99-limit-ms` or that lost firings.
//!
//! Each row says whether its rate was `sustained` by Chime's design
//! target, whatever `--p99-limit-ms` is: nothing lost, lateness p99 at
//! most 100 ms, and the worst lateness per second not growing over the
//! window (its fitted rise, `worst_growth_ms`, at most 100 ms). A step past
//! a generous `--p99-limit-ms` still runs, and says it was not sustained.

use std::time::Duration;

use crate::env::{now_ms, second_after, Env};
use crate::report::Row;
use crate::steady::{every_second, finish, observe_with_metrics, payload};
use crate::Args;

/// The design target's bound for "sustained": lateness p99, and how far
/// the worst lateness per second may climb over the window.
const SUSTAINED_MS: f64 = 100.0;

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    let total: u64 = args.rates.iter().map(|r| u64::from(*r)).sum();
    let step_ms = ((args.warmup + args.step) * 1000) as i64;
    let t0 = second_after(Duration::from_secs(15 + total / 1500));
    for (k, rate) in args.rates.iter().enumerate() {
        let start = t0 + k as i64 * step_ms;
        let prefix = format!("sat{k:02}-");
        env.seed(
            args.seed_concurrency,
            u64::from(*rate),
            every_second(
                &prefix,
                *rate,
                start,
                Some(start + step_ms),
                payload(args.payload_bytes),
            ),
        )
        .await?;
    }
    anyhow::ensure!(now_ms() < t0 - 4000, "seeding took too long; lower --rates");
    let bounds = |k: usize| {
        let start = t0 + k as i64 * step_ms;
        (start + args.warmup as i64 * 1000, start + step_ms)
    };
    let windows: Vec<usize> = (0..args.rates.len())
        .map(|k| {
            let (w0, w1) = bounds(k);
            env.recorder.add_window(w0, w1)
        })
        .collect();
    let mut rows = Vec::new();
    for (k, rate) in args.rates.iter().enumerate() {
        let (w0, w1) = bounds(k);
        let prefix = format!("sat{k:02}-");
        let span = observe_with_metrics(&env, windows[k], w0, w1).await;
        let mut row = finish(
            &env,
            span,
            "saturation",
            &format!("{rate}/s"),
            &prefix,
            *rate,
        )
        .await?;
        let behind = row.lost > 0;
        let late = row.p99_ms > args.p99_limit_ms as f64;
        let growth = env.recorder.with(windows[k], |w| w.worst_growth_ms());
        let sustained = !behind && row.p99_ms <= SUSTAINED_MS && growth <= SUSTAINED_MS;
        row.note("sustained", sustained);
        eprintln!(
            "  {rate}/s: {:.0} fired/s, p99 {:.1} ms, lost {}",
            row.firings_per_s, row.p99_ms, row.lost
        );
        rows.push(row);
        if behind || late {
            break;
        }
    }
    env.stop().await;
    Ok(rows)
}
