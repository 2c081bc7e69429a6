//! Shards end to end: a job with `shards: 8` on three
//! workers runs 8 firings per instant, each exactly once, spread over the
//! workers, each shard seeing its `CHIME_SHARD`/`CHIME_SHARDS` and its
//! message the `Chime-Shard`/`Chime-Shards` headers. Real NATS, both
//! databases, the built scheduler and workers running `shell` jobs.

use chime_common::client::Client;
use chime_common::{headers, FiringState};
use chime_tests::*;
use futures::StreamExt;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

backend_tests! {
    /// `shards: 8`, three instants, three workers of four threads each (so
    /// no one worker can take an instant's eight alone).
    async fn eight_shards_run_once_each_per_instant_across_workers(db: TestDatabase) {
        init_tracing();
        let nats = NatsServer::start().await;
        let mut scheduler = start_scheduler(&nats.url(), &db.url(), "r1").await;
        let _w1 = start_worker(&nats.url(), "default", 4, "w1").await;
        let _w2 = start_worker(&nats.url(), "default", 4, "w2").await;
        let _w3 = start_worker(&nats.url(), "default", 4, "w3").await;
        let client = Client::new(nats.connect().await);
        // The firing messages as published (a core subscription sees them too).
        let mut messages = nats
            .connect()
            .await
            .subscribe("chime.fire.default.>")
            .await
            .expect("subscribe");
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("runs.log");
        let start = aligned_start(Duration::from_secs(2));
        let instants = 3;
        client
            .put_job(&json!({
                "id": "scan", "handler": "shell", "shards": 8,
                "payload": {"argv": ["/bin/sh", "-c", format!(
                    "echo \"$CHIME_SHARD $CHIME_SHARDS $CHIME_FIRING_ID\" >> {}; sleep 0.5",
                    log.display()
                )]},
                "schedule": {"every": "2s", "start_at": rfc3339(start), "count": instants},
            }))
            .await
            .expect("put");

        let expected = 8 * instants as usize;
        eventually(Duration::from_secs(60), "every shard of every instant final", || {
            let client = client.clone();
            async move {
                let all = firings_of(&client, "scan").await;
                all.len() == expected && all.iter().all(|f| f.state.is_final())
            }
        })
        .await;
        let all = firings_of(&client, "scan").await;
        assert!(all.iter().all(|f| f.state == FiringState::Succeeded), "{all:#?}");

        // 8 firings per instant, shards 0…7, distinct ids.
        let mut per_instant: BTreeMap<i64, BTreeSet<u32>> = BTreeMap::new();
        for f in &all {
            let shard = f.shard.expect("a sharded firing has a shard");
            assert_eq!(f.id.shard, Some(shard));
            assert!(per_instant.entry(f.id.scheduled_ms).or_default().insert(shard), "{}", f.id);
        }
        assert_eq!(per_instant.len(), instants as usize, "{per_instant:?}");
        for shards in per_instant.values() {
            assert_eq!(shards, &(0..8).collect::<BTreeSet<u32>>());
        }

        // Each ran exactly once, and saw its shard and the count.
        let text = std::fs::read_to_string(&log).expect("the log");
        let mut ran = HashSet::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [shard, shards, id] = parts[..] else {
                panic!("unexpected line {line:?}");
            };
            assert!(ran.insert(id.to_string()), "{id} ran twice");
            let id: chime_common::FiringId = id.parse().expect("a firing id");
            assert_eq!(Some(shard.parse::<u32>().expect("CHIME_SHARD")), id.shard, "{line}");
            assert_eq!(shards, "8", "{line}");
        }
        assert_eq!(ran.len(), expected, "{text}");

        // Spread over the workers.
        let workers: BTreeSet<&str> = all.iter().filter_map(|f| f.worker.as_deref()).collect();
        println!("{expected} shards ran on {workers:?}");
        assert!(workers.len() > 1, "one worker took every shard: {workers:?}");

        // The messages carried the shard headers, matching their ids.
        let mut headed = 0;
        while let Ok(Some(message)) =
            tokio::time::timeout(Duration::from_millis(200), messages.next()).await
        {
            let h = message.headers.expect("firing headers");
            let id: chime_common::FiringId = h
                .get(headers::FIRING_ID)
                .expect("Chime-Firing-Id")
                .as_str()
                .parse()
                .expect("a firing id");
            let shard = h.get(headers::SHARD).map(|v| v.as_str().to_string());
            assert_eq!(shard, id.shard.map(|s| s.to_string()), "{id}");
            assert_eq!(h.get(headers::SHARDS).map(|v| v.as_str()), Some("8"), "{id}");
            headed += 1;
        }
        assert!(headed >= expected, "saw {headed} firing messages");

        // chimectl's history table shows each firing's shard.
        let mut command = Binary::Ctl.command();
        command
            .args(["--nats-url", &nats.url(), "history", "scan", "--limit", "24"])
            .stdin(std::process::Stdio::null());
        let output = tokio::process::Command::from(command)
            .output()
            .await
            .expect("chimectl runs");
        assert!(output.status.success(), "{output:?}");
        let table = String::from_utf8_lossy(&output.stdout);
        let mut lines = table.lines();
        // One word per column, as in the rows below it.
        let header = lines.next().expect("a header").replace("FIRING ID", "FIRING_ID");
        let header: Vec<&str> = header.split_whitespace().collect();
        let column = header.iter().position(|h| *h == "SHARD").expect("a SHARD column");
        let shown: BTreeSet<u32> = lines
            .filter_map(|line| line.split_whitespace().nth(column)?.parse().ok())
            .collect();
        assert_eq!(shown, (0..8).collect::<BTreeSet<u32>>(), "{table}");
        scheduler.terminate(Duration::from_secs(10)).await;
    }
}
