//! One replica cut from NATS but not from PostgreSQL, or from PostgreSQL
//! but not from NATS, while two others keep both (docs/ARCHITECTURE.md,
//! "Partitions"): the others take its work over, no instant is lost, no
//! attempt runs twice, and the cut replica claims and publishes slices
//! again once healed, without a restart.

use async_nats::jetstream::kv;
use chime_common::client::Client;
use chime_tests::guarantees::*;
use chime_tests::*;
use futures::StreamExt;
use std::net::SocketAddr;
use std::time::Duration;

/// Longer than a replica's liveness (1 s) and the NATS client's request
/// timeouts, so the cut replica's claims are taken over and its requests
/// fail, not merely wait.
const CUT: Duration = Duration::from_secs(8);

const SETTLE: Duration = Duration::from_secs(90);

/// The id of the replica the test cuts.
const VICTIM: &str = "scheduler-victim";

/// Final owner and state of every slice claim, by start instant (UTC ms).
async fn claims(kv: &kv::Store) -> Vec<(i64, String, String)> {
    let mut keys = kv.keys().await.expect("list claim keys");
    let mut out = Vec::new();
    while let Some(Ok(key)) = keys.next().await {
        let Some(start) = key
            .strip_prefix("slice.")
            .and_then(|k| k.split('.').next())
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        if let Ok(Some(value)) = kv.get(&key).await {
            let claim: serde_json::Value = serde_json::from_slice(&value).expect("claim JSON");
            out.push((
                start,
                claim["owner"].as_str().unwrap_or_default().to_string(),
                claim["state"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out.sort();
    out
}

/// Which link of the victim the test cuts.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    Nats,
    Postgres,
}

async fn cut_one_replica(link: Link) {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = PgDatabase::create().await;
    let proxy = match link {
        Link::Nats => Proxy::start(([127, 0, 0, 1], nats.port()).into()).await,
        Link::Postgres => {
            let upstream: SocketAddr = "127.0.0.1:5432".parse().expect("addr");
            Proxy::start(upstream).await
        }
    };
    let (victim_nats, victim_db) = match link {
        Link::Nats => (format!("nats://{}", proxy.addr()), db.url().to_string()),
        Link::Postgres => {
            let proxied = db
                .url()
                .replace("127.0.0.1:5432", &proxy.addr().to_string())
                .replace("localhost:5432", &proxy.addr().to_string());
            assert_ne!(
                proxied,
                db.url(),
                "the test database URL goes through 127.0.0.1:5432"
            );
            (nats.url(), proxied)
        }
    };
    let dir = tempfile::tempdir().expect("tmp");
    let runs = dir.path().join("runs.log");
    let mut cast = Cast::new(nats.url(), db.url().to_string(), runs.clone());
    let mut victim = start_scheduler(&victim_nats, &victim_db, VICTIM).await;
    cast.staff(2, &["alpha", "beta"]).await;
    let connection = nats.connect().await;
    let seen = watch_publishes(connection.clone());
    let client = Client::new(connection.clone());
    let kv = async_nats::jetstream::new(connection)
        .get_key_value("chime-slices")
        .await
        .expect("slices bucket");
    let seconds = 40;
    let start_ms = aligned_start(Duration::from_secs(3));
    let jobs = load(&runs, start_ms, seconds);
    let put_at = put_all(&client, &jobs).await;
    let until =
        |ms: i64| Duration::from_millis((ms - chrono::Utc::now().timestamp_millis()).max(0) as u64);
    tokio::time::sleep(until(start_ms + 6_000)).await;
    // Replicas race for each slice, so the victim's share is random.
    eventually(
        Duration::from_secs(20),
        "the victim claims slices before the cut",
        || {
            let kv = kv.clone();
            async move {
                claims(&kv)
                    .await
                    .iter()
                    .any(|(_, owner, _)| owner == VICTIM)
            }
        },
    )
    .await;

    let cut_ms = chrono::Utc::now().timestamp_millis();
    match link {
        // A silent network: the replica notices only by its timeouts.
        Link::Nats => proxy.block(),
        // The database host is gone: connections reset, new ones refused.
        Link::Postgres => proxy.cut(),
    }
    tokio::time::sleep(CUT).await;
    proxy.unblock();
    let heal_ms = chrono::Utc::now().timestamp_millis();

    // The victim recovers by itself: it wins and publishes slices again.
    eventually(
        Duration::from_secs(30),
        "the healed replica claims and publishes a slice",
        || {
            let kv = kv.clone();
            async move {
                claims(&kv).await.iter().any(|(start, owner, state)| {
                    *start > heal_ms && owner == VICTIM && state == "published"
                })
            }
        },
    )
    .await;
    assert!(
        victim.try_status().is_none(),
        "the cut replica kept running"
    );

    let end_ms = start_ms + seconds * 1000;
    tokio::time::sleep(until(end_ms)).await;
    let due = due_instants(&jobs, put_at, start_ms, end_ms);
    let verdict = verify(&client, &jobs, &due, &runs, &seen, SETTLE).await;
    let all = claims(&kv).await;
    let owners = |from: i64, to: i64, who: &str| {
        all.iter()
            .filter(|(s, o, _)| *s >= from && *s < to && o == who)
            .count()
    };
    // Slices the victim claimed ahead before it was cut begin up to the
    // lookahead after the cut; those beginning once its liveness lapsed
    // were taken over, so none in the cut is still its own, unpublished.
    let stuck: Vec<_> = all
        .iter()
        .filter(|(s, o, state)| {
            *s >= cut_ms + 1_500 && *s < heal_ms && o == VICTIM && state != "published"
        })
        .collect();
    assert!(
        stuck.is_empty(),
        "slices the cut replica kept without publishing: {stuck:?}"
    );
    // The effect of the cut on time: the latest start of an instant due in it.
    let firings = all_firings(&client, &jobs).await.expect("history");
    let latest = firings
        .iter()
        .filter(|f| {
            let at = f.scheduled_at.timestamp_millis();
            at >= cut_ms && at < heal_ms
        })
        .filter_map(|f| Some((f.started_at? - f.scheduled_at).num_milliseconds()))
        .max()
        .unwrap_or(0);
    let what = match link {
        Link::Nats => "cut from NATS",
        Link::Postgres => "cut from PostgreSQL",
    };
    println!(
        "one replica {what} for {CUT:?}: {verdict}; latest start of an instant due in the cut {latest} ms; slices in the cut owned by the victim {}, by the others {}",
        owners(cut_ms, heal_ms, VICTIM),
        all.iter()
            .filter(|(s, o, _)| *s >= cut_ms && *s < heal_ms && o != VICTIM)
            .count()
    );
    victim.terminate(Duration::from_secs(20)).await;
    cast.terminate_all(Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_from_nats_is_taken_over_and_rejoins_when_healed() {
    cut_one_replica(Link::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_from_postgres_is_taken_over_and_rejoins_when_healed() {
    cut_one_replica(Link::Postgres).await;
}
