//! Where each firing's cost goes: CPU seconds per 1,000 firings by process
//! (PostgreSQL, nats-server, each scheduler, this program's workers and
//! load) and the database's rows written, WAL bytes and commits per firing
//! (issue 25), and the messages nats-server received and sent per firing.
//!
//! A [`Cost`] is read at both ends of a window; [`Cost::notes`] turns the
//! difference into a row's notes. PostgreSQL is every `postgres` process on
//! the machine (backends, WAL writer, checkpointer, autovacuum), so the
//! figures assume the quiet machine BENCHMARKS.md asks for. The database
//! counters come from `pg_stat_database`, which backends flush at most once
//! a second, so a window's edges blur by about that much; SQLite has none
//! (its cost is the scheduler's own CPU).

use std::collections::BTreeMap;

use chime_tests::DatabaseKind;
use sqlx::AnyPool;

use crate::env::{clock_ticks, proc_ticks, Env};
use crate::report::{cpu_ticks, Row};

/// CPU ticks by process role and the database's counters, at one moment.
pub struct Cost {
    ticks: BTreeMap<String, u64>,
    machine_busy_ticks: u64,
    db: Option<DbCounters>,
    nats: Option<NatsCounters>,
}

/// nats-server's `/varz` message counters (every client, the scheduler's
/// and the workers', JetStream's own API and acks included).
#[derive(Clone, Copy, serde::Deserialize)]
struct NatsCounters {
    in_msgs: u64,
    out_msgs: u64,
}

#[derive(Clone, Copy, sqlx::FromRow)]
struct DbCounters {
    rows_written: i64,
    commits: i64,
    wal_bytes: f64,
}

impl Cost {
    /// Reads every role's CPU ticks and the database counters now.
    pub async fn read(env: &Env) -> Cost {
        let mut ticks = BTreeMap::new();
        ticks.insert("postgres".to_owned(), postgres_ticks());
        if let Some(ticks_of_nats) = env.nats.pid().and_then(proc_ticks) {
            ticks.insert("nats-server".to_owned(), ticks_of_nats);
        }
        for sched in &env.schedulers {
            if let Some(t) = sched.process.id().and_then(proc_ticks) {
                ticks.insert(format!("scheduler-{}", sched.replica_id), t);
            }
        }
        if let Some(t) = proc_ticks(std::process::id()) {
            ticks.insert("bench-workers-and-load".to_owned(), t);
        }
        Cost {
            ticks,
            machine_busy_ticks: cpu_ticks().0,
            db: match env.db.kind() {
                DatabaseKind::Postgres => db_counters(&env.sql).await,
                DatabaseKind::Sqlite => None,
            },
            nats: match env.nats.monitor_url() {
                Some(url) => nats_counters(&url).await,
                None => None,
            },
        }
    }

    /// Notes on `row` with the cost between `self` and `later` per firing,
    /// for the `row.succeeded` firings of the window. A process that was not
    /// running at both ends (a restarted scheduler) is left out.
    pub fn note(&self, later: &Cost, row: &mut Row) {
        let firings = row.succeeded as f64;
        if firings == 0.0 {
            return;
        }
        let per_1k = |ticks: u64| ticks as f64 / clock_ticks() / (firings / 1000.0);
        let by_process: Vec<String> = later
            .ticks
            .iter()
            .filter_map(|(role, &t1)| {
                let t0 = *self.ticks.get(role)?;
                Some(format!("{role}={:.3}", per_1k(t1.saturating_sub(t0))))
            })
            .collect();
        row.note("cpu_s_per_1k_by_process", by_process.join(","));
        row.note(
            "cpu_s_per_1k_machine",
            format!(
                "{:.3}",
                per_1k(
                    later
                        .machine_busy_ticks
                        .saturating_sub(self.machine_busy_ticks)
                )
            ),
        );
        if let (Some(d0), Some(d1)) = (self.db, later.db) {
            row.note(
                "db_per_firing",
                format!(
                    "rows_written={:.2},commits={:.2},wal_bytes={:.0}",
                    (d1.rows_written - d0.rows_written) as f64 / firings,
                    (d1.commits - d0.commits) as f64 / firings,
                    (d1.wal_bytes - d0.wal_bytes) / firings,
                ),
            );
        }
        if let (Some(n0), Some(n1)) = (self.nats, later.nats) {
            row.note(
                "nats_msgs_per_firing",
                format!(
                    "in={:.2},out={:.2}",
                    n1.in_msgs.saturating_sub(n0.in_msgs) as f64 / firings,
                    n1.out_msgs.saturating_sub(n0.out_msgs) as f64 / firings,
                ),
            );
        }
    }
}

/// CPU ticks of every process named `postgres`.
fn postgres_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .filter_map(proc_ticks)
        .sum()
}

/// This database's rows inserted, updated and deleted, its commits, and the
/// server's WAL position in bytes (the WAL is the server's, not the
/// database's: the quiet machine has no other writer).
async fn db_counters(sql: &AnyPool) -> Option<DbCounters> {
    sqlx::query_as(
        "SELECT (tup_inserted + tup_updated + tup_deleted)::int8 AS rows_written, \
                xact_commit::int8 AS commits, \
                pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 AS wal_bytes \
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(sql)
    .await
    .ok()
}

/// The server's message counters from `/varz`, or `None` if it does not answer.
async fn nats_counters(monitor_url: &str) -> Option<NatsCounters> {
    let body = reqwest::get(format!("{monitor_url}/varz"))
        .await
        .ok()?
        .bytes()
        .await
        .ok()?;
    serde_json::from_slice(&body).ok()
}
