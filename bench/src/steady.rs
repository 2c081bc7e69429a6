//! Steady: `--rate` firings/s spread evenly over each second, for `--duration` s.
//! Also the building blocks the other scenarios share.

use std::time::Duration;

use serde_json::{json, Value};

use crate::cost::Cost;
use crate::env::{
    now_ms, rfc3339, second_after, sleep_until_ms, Env, Sampler, SchedulerMetrics, GROUP,
};
use crate::record::Recorder;
use crate::report::{loadavg, MachineCpu, Row};
use crate::Args;

/// A job payload of about `bytes` encoded bytes: an object of 32-byte
/// string fields (each field a node to copy and encode, as in a real
/// payload); `null` for 0.
pub fn payload(bytes: usize) -> Value {
    const FIELD: usize = 32;
    // `"f0000":"…",` is the field's 32 bytes and 11 more.
    let fields = bytes.div_ceil(FIELD + 11);
    match fields {
        0 => Value::Null,
        n => (0..n)
            .map(|k| (format!("f{k:04}"), Value::String("x".repeat(FIELD))))
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

/// Job `i` of `rate` firing every second at `t0 + i*1000/rate` ms, with
/// `payload` (`null`: none).
pub fn every_second(
    prefix: &str,
    rate: u32,
    t0: i64,
    end_ms: Option<i64>,
    payload: Value,
) -> impl Fn(u64) -> Value + '_ {
    move |i| {
        let offset = (i as i64 * 1000) / i64::from(rate.max(1));
        let mut schedule = json!({"every": "1s", "start_at": rfc3339(t0 + offset)});
        if let Some(end) = end_ms {
            schedule["end_at"] = json!(rfc3339(end));
        }
        json!({
            "id": format!("{prefix}{i:07}"),
            "group": GROUP,
            "schedule": schedule,
            "handler": "noop",
            "payload": payload.clone(),
        })
    }
}

/// One window and what was sampled over it.
pub struct Span {
    pub window: usize,
    pub w0: i64,
    pub w1: i64,
    /// When the sampling began: late when the step before was still
    /// draining as this window opened.
    pub began_ms: i64,
    /// `None` when the sampling began too far into the window
    /// ([`stands_for_window`]): its CPU and cost would be of another span
    /// of time.
    pub sampled: Option<Sampled>,
}

/// How far into a window its sampling may begin and still stand for it: a
/// tenth of the window, and no more than a second (by which its edges
/// already blur, `cost.rs`).
fn stands_for_window(w0: i64, w1: i64, began_ms: i64) -> bool {
    began_ms - w0 <= ((w1 - w0) / 10).min(1_000)
}

/// What was sampled over a window.
pub struct Sampled {
    pub cpu: f64,
    pub rss: f64,
    pub load0: String,
    pub load1: String,
    /// The fraction of the machine's CPU (all processes) busy over the window.
    pub machine_busy: f64,
    /// The scheduler's counters at `w0`, when the caller took them.
    pub metrics0: Option<SchedulerMetrics>,
    /// The cost counters at `w0` and `w1`, when the caller took them.
    pub cost: Option<(Cost, Cost)>,
}

/// Registers the window `[w0, w1)` at once, then samples the schedulers'
/// CPU and RSS over it.
pub async fn observe(recorder: &Recorder, sampler: &Sampler, w0: i64, w1: i64) -> Span {
    let window = recorder.add_window(w0, w1);
    observe_registered(window, sampler, w0, w1).await
}

/// [`observe`] for a window already registered as `window`.
pub async fn observe_registered(window: usize, sampler: &Sampler, w0: i64, w1: i64) -> Span {
    sleep_until_ms(w0).await;
    let began_ms = now_ms();
    let sampled = if stands_for_window(w0, w1, began_ms) {
        Some(sample_until(sampler, w1).await)
    } else {
        sleep_until_ms(w1).await;
        None
    };
    Span {
        window,
        w0,
        w1,
        began_ms,
        sampled,
    }
}

/// Samples the schedulers' CPU and RSS and the machine's CPU from now to `w1`.
async fn sample_until(sampler: &Sampler, w1: i64) -> Sampled {
    sampler.reset_rss();
    let cpu0 = sampler.cpu_seconds();
    let load0 = loadavg();
    let machine0 = MachineCpu::read();
    sleep_until_ms(w1).await;
    Sampled {
        cpu: sampler.cpu_seconds() - cpu0,
        rss: sampler.max_rss_mib(),
        load0,
        load1: loadavg(),
        machine_busy: MachineCpu::read().busy_share_since(&machine0),
        metrics0: None,
        cost: None,
    }
}

/// [`observe_registered`], with the scheduler's counters taken at `w0` and
/// the cost counters at both ends, so that the row reports what happened
/// within the window and what it cost.
pub async fn observe_with_metrics(env: &Env, window: usize, w0: i64, w1: i64) -> Span {
    sleep_until_ms(w0).await;
    if !stands_for_window(w0, w1, now_ms()) {
        // Too late to sample: reported as not sampled.
        return observe_registered(window, &env.sampler, w0, w1).await;
    }
    let metrics0 = env.scheduler_metrics().await;
    let cost0 = Cost::read(env).await;
    let span = observe_registered(window, &env.sampler, w0, w1).await;
    let cost1 = Cost::read(env).await;
    Span {
        sampled: span.sampled.map(|sampled| Sampled {
            metrics0: Some(metrics0),
            cost: Some((cost0, cost1)),
            ..sampled
        }),
        ..span
    }
}

/// Drains the window's firings and builds its row.
pub async fn finish(
    env: &Env,
    span: Span,
    scenario: &str,
    label: &str,
    prefix: &str,
    rate: u32,
) -> anyhow::Result<Row> {
    let (w0, w1) = (span.w0, span.w1);
    let states = env.drain(prefix, w0, w1, Duration::from_secs(60)).await?;
    let succeeded = env.succeeded_instants(prefix, w0, w1).await?;
    let mut row = window_row(env, span, scenario, label, rate, succeeded, states).await;
    if let Ok(split) = env.phase_split(prefix, w0, w1).await {
        row.note("db_ms_p50/p99/max", split);
    }
    Ok(row)
}

/// A window's row: the lateness the recorder saw, `succeeded` of the
/// instants due at `rate`, the firings by state, and what was sampled
/// over the window (CPU, cost, the scheduler's counters, RSS).
pub async fn window_row(
    env: &Env,
    span: Span,
    scenario: &str,
    label: &str,
    rate: u32,
    succeeded: i64,
    states: impl IntoIterator<Item = (String, i64)>,
) -> Row {
    let (w0, w1) = (span.w0, span.w1);
    let expected = u64::from(rate) * ((w1 - w0) as u64 / 1000);
    let mut row = env.recorder.with(span.window, |w| {
        let mut row = Row::from_window(scenario, label, w);
        row.note("longest_silence_ms", w.longest_silence_ms());
        let per_second: Vec<String> = w
            .max_by_second
            .values()
            .map(|us| (us / 1000).to_string())
            .collect();
        row.note("max_ms_by_second", per_second.join(","));
        row.note("worst_growth_ms", format!("{:.0}", w.worst_growth_ms()));
        row
    });
    row.offered_per_s = f64::from(rate);
    row.set_counts(expected, succeeded, states);
    row.note("backend", env.db.kind());
    env.note_disk(w0, w1, &mut row);
    row.note("worker_start_decision", env.worker_start_decisions());
    match &span.sampled {
        Some(sampled) => {
            if let Some((cost0, cost1)) = &sampled.cost {
                cost0.note(cost1, &mut row);
            }
            row.note(
                "scheduler",
                env.scheduler_metrics()
                    .await
                    .since(sampled.metrics0.as_ref()),
            );
            row.set_cpu(sampled.cpu);
            row.rss_max_mib = Some(sampled.rss);
            row.note("load_before", format!("[{}]", sampled.load0));
            row.note("load_after", format!("[{}]", sampled.load1));
            row.note("machine_cpu_busy", format!("{:.2}", sampled.machine_busy));
        }
        None => row.note(
            "not_sampled",
            format!(
                "sampling began {} ms into the window (the step before was still \
                 draining): no CPU, cost, scheduler counter or RSS figures",
                span.began_ms - w0
            ),
        ),
    }
    row
}

/// Measures the window `[w0, w1)` of the `prefix` jobs firing at `rate`/s.
pub async fn measure(
    env: &Env,
    scenario: &str,
    label: &str,
    prefix: &str,
    rate: u32,
    w0: i64,
    w1: i64,
) -> anyhow::Result<Row> {
    let window = env.recorder.add_window(w0, w1);
    let span = observe_with_metrics(env, window, w0, w1).await;
    finish(env, span, scenario, label, prefix, rate).await
}

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    let t0 = second_after(Duration::from_secs(5));
    let prefix = "steady-";
    let put_rate = env
        .seed(
            args.seed_concurrency,
            u64::from(args.rate),
            every_second(prefix, args.rate, t0, None, payload(args.payload_bytes)),
        )
        .await?;
    anyhow::ensure!(now_ms() < t0, "seeding took past the first instant");
    let w0 = t0 + args.warmup as i64 * 1000;
    let w1 = w0 + args.duration as i64 * 1000;
    let mut row = measure(&env, "steady", "steady", prefix, args.rate, w0, w1).await?;
    row.note("seed_puts_per_s", format!("{put_rate:.0}"));
    env.stop().await;
    Ok(vec![row])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step that fell behind is still draining when the next window
    /// opens; what is sampled from then on is of a shorter, later span.
    #[test]
    fn sampling_stands_for_a_window_only_from_near_its_start() {
        assert!(stands_for_window(0, 20_000, 0));
        assert!(stands_for_window(0, 20_000, 1_000));
        assert!(!stands_for_window(0, 20_000, 1_001));
        assert!(stands_for_window(0, 5_000, 500));
        assert!(!stands_for_window(0, 5_000, 501));
        assert!(!stands_for_window(0, 20_000, 25_000));
    }

    #[tokio::test]
    async fn a_window_that_began_before_sampling_could_has_no_sampled_figures() {
        let sampler = Sampler::start();
        let now = now_ms();
        let span = observe_registered(0, &sampler, now - 5_000, now - 1_000).await;
        sampler.stop();
        assert!(span.sampled.is_none());
        assert!(span.began_ms >= now);
    }

    #[test]
    fn a_payload_is_about_the_size_asked() {
        assert_eq!(payload(0), Value::Null);
        for bytes in [1, 100, 1024, 64 * 1024] {
            let encoded = serde_json::to_string(&payload(bytes)).unwrap().len();
            assert!(
                encoded >= bytes && encoded <= bytes + 64,
                "asked {bytes}, encoded {encoded}"
            );
        }
    }
}
