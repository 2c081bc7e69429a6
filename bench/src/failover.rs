//! Failover: `--replicas` schedulers on one database at `--rate` firings/s;
//! every `--kill-every` s, kill -9 the replica owning the next slice and
//! start a replacement (a new replica id, same slot).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::env::{now_ms, second_after, sleep_until_ms, Env};
use crate::report::Row;
use crate::steady::{every_second, finish, observe, payload};
use crate::Args;

/// The owner of the earliest claimed slice starting after now.
async fn next_slice_owner(env: &Env) -> anyhow::Result<Option<(String, i64)>> {
    let js = async_nats::jetstream::new(env.nc.clone());
    let kv = js.get_key_value("chime-slices").await?;
    let now = now_ms();
    let mut keys = kv.keys().await?;
    let mut best: Option<(i64, String)> = None;
    while let Some(key) = keys.next().await {
        let key = key?;
        let Some(start) = key
            .strip_prefix("slice.")
            .and_then(|r| r.split('.').next())
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        if start > now && best.as_ref().is_none_or(|(b, _)| start < *b) {
            best = Some((start, key));
        }
    }
    let Some((start, key)) = best else {
        return Ok(None);
    };
    let Some(value) = kv.get(&key).await? else {
        return Ok(None);
    };
    let value: Value = serde_json::from_slice(&value)?;
    Ok(value["owner"].as_str().map(|o| (o.to_owned(), start)))
}

pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    let env = Env::start(args, args.replicas).await?;
    let t0 = second_after(Duration::from_secs(5));
    let prefix = "failover-";
    env.seed(
        args.seed_concurrency,
        u64::from(args.rate),
        every_second(prefix, args.rate, t0, None, payload(args.payload_bytes)),
    )
    .await?;
    let w0 = t0 + args.warmup as i64 * 1000;
    let w1 = w0 + args.duration as i64 * 1000;
    let env = tokio::sync::Mutex::new(env);
    let killer = async {
        let mut kills = Vec::new();
        let mut generation = 1;
        let mut at = w0 + 2000;
        while at < w1 - 2000 {
            sleep_until_ms(at).await;
            let mut env = env.lock().await;
            match next_slice_owner(&env).await {
                Ok(Some((owner, slice))) => {
                    if let Some(idx) = env.schedulers.iter().position(|s| s.replica_id == owner) {
                        let killed_at = now_ms();
                        env.schedulers[idx].process.kill9();
                        let old = env.schedulers.remove(idx);
                        env.keep_log(&old);
                        let slot = old.replica_id.split('-').next().unwrap_or("r").to_owned();
                        // Keep the process until the end so its log survives.
                        let replacement = format!("{slot}-{generation}");
                        generation += 1;
                        env.spawn_scheduler(&replacement).await;
                        eprintln!(
                            "  killed {owner} (next slice {slice}, {} ms ahead) at {killed_at}; started {replacement} after {} ms",
                            slice - killed_at,
                            now_ms() - killed_at
                        );
                        kills.push(format!("{owner}@{}", killed_at - w0));
                        drop(old);
                    } else {
                        eprintln!("  next slice owner {owner} is not a running replica");
                    }
                }
                Ok(None) => eprintln!("  no claimed slice ahead"),
                Err(e) => eprintln!("  reading chime-slices failed: {e:#}"),
            }
            drop(env);
            at += args.kill_every as i64 * 1000;
        }
        kills
    };
    let (recorder, sampler) = {
        let env = env.lock().await;
        (env.recorder.clone(), env.sampler.clone())
    };
    let (kills, span) = tokio::join!(killer, observe(&recorder, &sampler, w0, w1));
    let env = env.into_inner();
    let mut row = finish(&env, span, "failover", "failover", prefix, args.rate).await?;
    row.note("kills", kills.join(","));
    row.note("replicas", args.replicas);
    env.stop().await;
    Ok(vec![row])
}
