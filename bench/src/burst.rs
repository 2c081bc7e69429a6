//! Aligned burst: `--burst-jobs` one-shot jobs `{"at": T}`, all due at the
//! same instant. Measures when the scheduler had published them all
//! (`chime_firings_published_total`) and when the workers had started them all.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cost::Cost;
use crate::env::{now_ms, rfc3339, second_after, sleep_until_ms, Env, GROUP};
use crate::report::{loadavg, Row};
use crate::steady::payload;
use crate::Args;

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, 1).await?;
    let n = u64::from(args.burst_jobs);
    // Leave room for seeding at ≥ 1,500 puts/s, plus the lookahead.
    let t = second_after(Duration::from_secs(15 + n / 1500));
    let prefix = "burst-";
    let body = payload(args.payload_bytes);
    let put_rate = env
        .seed(args.seed_concurrency, n, |i| {
            json!({
                "id": format!("{prefix}{i:07}"),
                "group": GROUP,
                "schedule": {"at": rfc3339(t)},
                "handler": "noop",
                "payload": body.clone(),
            })
        })
        .await?;
    let seeded_at = now_ms();
    anyhow::ensure!(
        seeded_at < t - 4000,
        "seeding ended {} ms before the instant, inside the lookahead; lower --burst-jobs",
        t - seeded_at
    );
    let window = env.recorder.add_window(t, t + 1000);
    let base = env.published_total().await;
    sleep_until_ms(t - 2000).await;
    env.sampler.reset_rss();
    let cpu0 = env.sampler.cpu_seconds();
    let cost0 = Cost::read(&env).await;
    let load0 = loadavg();
    // Poll the metrics and the recorder until both reach n.
    let started_poll = Instant::now();
    let (mut published_at, mut started_at) = (None, None);
    let mut published_seen = 0.0;
    while (published_at.is_none() || started_at.is_none())
        && started_poll.elapsed() < Duration::from_secs(120)
    {
        if published_at.is_none() {
            published_seen = env.published_total().await - base;
            if published_seen >= n as f64 {
                published_at = Some(now_ms());
            }
        }
        if started_at.is_none() && env.recorder.with(window, |w| w.started) >= n {
            started_at = Some(now_ms());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let polled_until = now_ms();
    let cpu = env.sampler.cpu_seconds() - cpu0;
    let cost1 = Cost::read(&env).await;
    let rss = env.sampler.max_rss_mib();
    let load1 = loadavg();
    let states = env
        .drain(prefix, t, t + 1000, Duration::from_secs(120))
        .await?;
    let succeeded = env.succeeded_instants(prefix, t, t + 1000).await?;
    // The stream keeps the last message's timestamp after the work queue drained.
    let js = async_nats::jetstream::new(env.nc.clone());
    let last_ts = match js.get_stream("CHIME_FIRE").await {
        Ok(mut stream) => match stream.info().await {
            Ok(info) => {
                Some((info.state.last_timestamp.unix_timestamp_nanos() / 1_000_000) as i64 - t)
            }
            Err(_) => None,
        },
        Err(_) => None,
    };
    let last_start = env
        .recorder
        .with(window, |w| w.start_times.iter().copied().max().unwrap_or(t));
    let mut row = env
        .recorder
        .with(window, |w| Row::from_window("burst", "burst", w));
    row.offered_per_s = n as f64;
    row.set_counts(n, succeeded, states);
    row.set_cpu(cpu);
    row.note("backend", env.db.kind());
    env.note_disk(t - 2000, polled_until, &mut row);
    cost0.note(&cost1, &mut row);
    row.rss_max_mib = Some(rss);
    row.note(
        "all_published_after_ms",
        published_at.map_or(format!("not within 120 s ({published_seen})"), |p| {
            (p - t).to_string()
        }),
    );
    row.note(
        "all_started_after_ms",
        started_at.map_or("not within 120 s".into(), |s| (s - t).to_string()),
    );
    row.note("last_start_after_ms", last_start - t);
    if let Some(ts) = last_ts {
        row.note("fire_stream_last_msg_after_ms", ts);
    }
    row.note("seed_puts_per_s", format!("{put_rate:.0}"));
    row.note("scheduler", env.scheduler_metrics().await.since(None));
    row.note("worker_start_decision", env.worker_start_decisions());
    row.note("load_before", format!("[{load0}]"));
    row.note("load_after", format!("[{load1}]"));
    env.stop().await;
    Ok(vec![row])
}
