//! Immediate: work that can run the moment it is stored, measured to its
//! handler's start. Three kinds, one after the other, each at
//! `--trigger-rate` `jobs.trigger` requests a second for `--duration` s:
//!
//! - `trigger`: a triggered firing, from the instant the store gave it (its
//!   scheduled instant);
//! - `retry`: the retry of a failed first attempt, with no backoff, from
//!   when it was due (its `Chime-Due-At`: when the failure was applied);
//! - `release`: a firing queued behind a run of the same job
//!   (`overlap: queue`), from when that run's end released it (its
//!   `Chime-Due-At`).
//!
//! All three leave through `scheduler/src/firing/immediate.rs`, not the next slice
//! claim.

use std::time::Duration;

use chime_common::client::Client;
use serde_json::{json, Value};

use crate::env::{second_after, sleep_until_ms, Env, FAIL_FIRST, GROUP, HOLD};
use crate::report::Row;
use crate::steady::{finish, observe_with_metrics};
use crate::Args;

/// Jobs each kind goes round; none fires by its schedule during the run.
const JOBS: u64 = 100;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Trigger,
    Retry,
    Release,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Trigger, Kind::Retry, Kind::Release];

    fn label(self) -> &'static str {
        match self {
            Kind::Trigger => "trigger",
            Kind::Retry => "retry",
            Kind::Release => "release",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::Trigger => "imm-trigger-",
            Kind::Retry => "imm-retry-",
            Kind::Release => "imm-queue-",
        }
    }

    fn job_id(self, i: u64) -> String {
        format!("{}{i:03}", self.prefix())
    }

    fn spec(self, i: u64) -> Value {
        let mut spec = json!({
            "id": self.job_id(i),
            "group": GROUP,
            "handler": "noop",
            "schedule": {"every": "24h", "start_at": "2099-01-01T00:00:00Z"},
        });
        match self {
            Kind::Trigger => {}
            Kind::Retry => {
                spec["handler"] = json!(FAIL_FIRST);
                spec["retry"] = json!({"max_attempts": 2, "initial": "0s"});
            }
            Kind::Release => {
                spec["handler"] = json!(HOLD);
                spec["overlap"] = json!("queue");
            }
        }
        spec
    }

    /// The job the `n`th trigger asks for. A release needs two triggers of
    /// one job back to back: the second waits for the first's run to end.
    fn job_of_trigger(self, n: u64) -> String {
        match self {
            Kind::Release => self.job_id((n / 2) % JOBS),
            Kind::Trigger | Kind::Retry => self.job_id(n % JOBS),
        }
    }
}

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    for kind in Kind::ALL {
        env.seed(args.seed_concurrency, JOBS, |i| kind.spec(i))
            .await?;
    }
    let mut rows = Vec::new();
    for kind in Kind::ALL {
        rows.push(measure(&env, args, kind).await?);
    }
    env.stop().await;
    Ok(rows)
}

async fn measure(env: &Env, args: &Args, kind: Kind) -> anyhow::Result<Row> {
    let client = Client::new(env.nc.clone());
    let rate = args.trigger_rate.max(1);
    let w0 = second_after(Duration::from_secs(2));
    let w1 = w0 + args.duration as i64 * 1000;
    let window = env.recorder.add_window(w0, w1);
    let count = u64::from(rate) * args.duration;
    // A release's pair of triggers goes out together, at the pair's turn.
    let per_turn: u64 = if kind == Kind::Release { 2 } else { 1 };
    let triggers = async {
        let mut refused = 0u64;
        for n in 0..count {
            if n % per_turn == 0 {
                sleep_until_ms(w0 + (n * 1000 / u64::from(rate)) as i64).await;
            }
            if client
                .trigger_job(&kind.job_of_trigger(n), None)
                .await
                .is_err()
            {
                refused += 1;
            }
        }
        refused
    };
    let (refused, span) = tokio::join!(triggers, observe_with_metrics(env, window, w0, w1));
    let mut row = finish(env, span, "immediate", kind.label(), kind.prefix(), rate).await?;
    row.note("triggers_refused", refused);
    if kind != Kind::Trigger {
        env.recorder.with(window, |w| {
            row.set_lateness(&w.due_lateness);
            row.note("lateness_from", "due_at");
            row.note("runs_due_later", w.due_lateness.len());
        });
    }
    Ok(row)
}
