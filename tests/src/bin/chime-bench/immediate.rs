//! Immediate: `jobs.trigger` through the NATS API at `--trigger-rate` per
//! second for `--duration` s, each measured from the instant the store gave
//! it (its `scheduled_at`) to its handler's start: how long work that is due
//! the moment it is stored waits (issue 25). A due retry and a released
//! held firing take the same path (`scheduler/src/immediate.rs`).

use std::time::Duration;

use chime_common::client::Client;
use serde_json::json;

use crate::env::{second_after, sleep_until_ms, Env, GROUP};
use crate::report::Row;
use crate::steady::{finish, observe_with_metrics};
use crate::Args;

/// Jobs the triggers go round; none fires by its schedule during the run.
const JOBS: u64 = 100;

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    let prefix = "imm-";
    env.seed(args.seed_concurrency, JOBS, |i| {
        json!({
            "id": format!("{prefix}{i:03}"),
            "group": GROUP,
            "handler": "noop",
            "schedule": {"every": "24h", "start_at": "2099-01-01T00:00:00Z"},
        })
    })
    .await?;
    let client = Client::new(env.nc.clone());
    let rate = args.trigger_rate.max(1);
    let w0 = second_after(Duration::from_secs(2));
    let w1 = w0 + args.duration as i64 * 1000;
    let window = env.recorder.add_window(w0, w1);
    let count = u64::from(rate) * args.duration;
    let triggers = async {
        let mut refused = 0u64;
        for n in 0..count {
            sleep_until_ms(w0 + (n * 1000 / u64::from(rate)) as i64).await;
            if client
                .trigger_job(&format!("{prefix}{:03}", n % JOBS), None)
                .await
                .is_err()
            {
                refused += 1;
            }
        }
        refused
    };
    let (refused, span) = tokio::join!(triggers, observe_with_metrics(&env, window, w0, w1));
    let mut row = finish(&env, span, "immediate", "trigger", prefix, rate).await?;
    row.note("triggers_refused", refused);
    env.stop().await;
    Ok(vec![row])
}
