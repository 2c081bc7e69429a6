//! Where each firing's cost goes: CPU seconds per 1,000 firings by process
//! (PostgreSQL, nats-server, each scheduler, this program's workers and
//! load); the database's rows written, WAL bytes, full-page images and
//! commits per firing, and the checkpoints the window held; the
//! messages nats-server received and sent per firing; the context
//! switches per firing, the machine's and each process's: every hop of a
//! firing from one process or thread to another costs a switch on each
//! side, so these count the hops that the CPU figures pay for; and the
//! bytes the machine's disks wrote per firing.
//!
//! A [`Cost`] is read at both ends of a window; [`Cost::note`] turns the
//! difference into a row's notes. PostgreSQL is every `postgres` process on
//! the machine (backends, WAL writer, checkpointer, autovacuum), so the
//! figures assume the quiet machine docs/PERFORMANCE.md asks for. The
//! database counters come from `pg_stat_database`, which backends flush at
//! most once a second, so a window's edges blur by about that much; SQLite
//! has none (its cost is the scheduler's own CPU and the disk's writes).
//!
//! Disk writes are the disks' own count (`/proc/diskstats`), not each
//! process's `write_bytes`: that counts a page of a file's cache each time
//! a write makes it dirty, in units of the cache's folio, which on a recent
//! kernel may be far larger than the write (PostgreSQL's commits, each a
//! small write and a sync of the log, counted at 226 KB per firing where
//! the disks wrote about 14).

use std::collections::BTreeMap;

use chime_tests::DatabaseKind;
use sqlx::AnyPool;

use crate::env::Env;
use crate::proc::{clock_ticks, proc_ticks};
use crate::report::{MachineCpu, Row};

/// The note with the machine's CPU seconds per 1,000 firings of a window.
pub const MACHINE_CPU_NOTE: &str = "cpu_s_per_1k_machine";

/// Each process role's CPU and switches, the machine's, and the database's
/// counters, at one moment.
pub struct Cost {
    usage: BTreeMap<String, Usage>,
    machine: MachineCpu,
    /// Sectors of 512 bytes the machine's disks have written.
    disk_sectors: Option<u64>,
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

/// One process role's CPU ticks and context switches (every thread's,
/// voluntary and not), summed over its processes.
#[derive(Clone, Copy, Default)]
struct Usage {
    ticks: u64,
    switches: u64,
}

#[derive(Clone, Copy, sqlx::FromRow)]
struct DbCounters {
    rows_written: i64,
    commits: i64,
    wal_bytes: f64,
    /// Pages written whole to the WAL: the first change to a page after a
    /// checkpoint logs the page itself, so these follow the checkpoints.
    wal_fpi: i64,
    /// Checkpoints started, timed and requested.
    checkpoints: i64,
}

impl Cost {
    /// Reads every role's CPU ticks and switches and the database counters now.
    pub async fn read(env: &Env) -> Cost {
        let mut usage = BTreeMap::new();
        usage.insert("postgres".to_owned(), postgres_usage());
        if let Some(nats) = env.nats.pid().and_then(process_usage) {
            usage.insert("nats-server".to_owned(), nats);
        }
        for sched in &env.schedulers {
            if let Some(u) = sched.process.id().and_then(process_usage) {
                usage.insert(format!("scheduler-{}", sched.replica_id), u);
            }
        }
        if let Some(u) = process_usage(std::process::id()) {
            usage.insert("bench-workers-and-load".to_owned(), u);
        }
        Cost {
            usage,
            machine: MachineCpu::read(),
            disk_sectors: std::fs::read_to_string("/proc/diskstats")
                .ok()
                .and_then(|stats| sectors_written(&stats, &disks())),
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
        let per_1k = |cpu_s: f64| cpu_s / (firings / 1000.0);
        let by_process = |figure: &dyn Fn(Usage, Usage) -> String| -> String {
            later
                .usage
                .iter()
                .filter_map(|(role, &u1)| {
                    let u0 = *self.usage.get(role)?;
                    Some(format!("{role}={}", figure(u0, u1)))
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        row.note(
            "cpu_s_per_1k_by_process",
            by_process(&|u0, u1| {
                let ticks = u1.ticks.saturating_sub(u0.ticks);
                format!("{:.3}", per_1k(ticks as f64 / clock_ticks()))
            }),
        );
        row.note(
            "context_switches_per_firing_by_process",
            by_process(&|u0, u1| {
                format!(
                    "{:.1}",
                    u1.switches.saturating_sub(u0.switches) as f64 / firings
                )
            }),
        );
        row.note(
            MACHINE_CPU_NOTE,
            format!(
                "{:.3}",
                per_1k(later.machine.busy_seconds_since(&self.machine))
            ),
        );
        if let (Some(s0), Some(s1)) = (self.disk_sectors, later.disk_sectors) {
            row.note(
                "disk_kb_per_firing_machine",
                format!(
                    "{:.1}",
                    s1.saturating_sub(s0) as f64 * 512.0 / 1024.0 / firings
                ),
            );
        }
        if let (Some(c0), Some(c1)) = (
            self.machine.context_switches,
            later.machine.context_switches,
        ) {
            row.note(
                "context_switches_per_firing",
                format!("{:.1}", c1.saturating_sub(c0) as f64 / firings),
            );
        }
        if let (Some(d0), Some(d1)) = (self.db, later.db) {
            row.note(
                "db_per_firing",
                format!(
                    "rows_written={:.2},commits={:.2},wal_bytes={:.0},full_page_images={:.3}",
                    d1.rows_written.saturating_sub(d0.rows_written) as f64 / firings,
                    d1.commits.saturating_sub(d0.commits) as f64 / firings,
                    (d1.wal_bytes - d0.wal_bytes) / firings,
                    d1.wal_fpi.saturating_sub(d0.wal_fpi) as f64 / firings,
                ),
            );
            row.note("checkpoints", d1.checkpoints.saturating_sub(d0.checkpoints));
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

/// The machine's disks: the block devices of `/sys/block` but loop
/// devices, memory (`ram`, `zram`) and the devices built on other devices
/// (`dm-`, `md`), whose writes the devices under them count again.
/// Partitions are not listed there, so nothing is counted twice.
fn disks() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            !["loop", "ram", "zram", "dm-", "md"]
                .iter()
                .any(|p| name.starts_with(p))
        })
        .collect()
}

/// Sectors written by `disks`, from the text of `/proc/diskstats` (the
/// tenth field, in 512-byte sectors whatever the device's own size), or
/// `None` if none of them is there.
fn sectors_written(diskstats: &str, disks: &[String]) -> Option<u64> {
    diskstats
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let disk = fields.get(2)?;
            disks.iter().any(|d| d == disk).then_some(())?;
            fields.get(9)?.parse::<u64>().ok()
        })
        .reduce(u64::saturating_add)
}

/// CPU ticks and switches of every process named `postgres`.
fn postgres_usage() -> Usage {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Usage::default();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .filter_map(process_usage)
        .fold(Usage::default(), |sum, u| Usage {
            ticks: sum.ticks.saturating_add(u.ticks),
            switches: sum.switches.saturating_add(u.switches),
        })
}

/// One process's CPU ticks and its threads' context switches, or `None` if
/// it has exited. A thread that exits between the reads takes its switches
/// with it, which the bench's long-lived processes make rare.
fn process_usage(pid: u32) -> Option<Usage> {
    let ticks = proc_ticks(pid)?;
    let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|task| {
            let status = std::fs::read_to_string(task.ok()?.path().join("status")).ok()?;
            Some(
                status
                    .lines()
                    .filter_map(|line| {
                        line.strip_prefix("voluntary_ctxt_switches:")
                            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                    })
                    .filter_map(|n| n.trim().parse::<u64>().ok())
                    .sum::<u64>(),
            )
        })
        .sum();
    Some(Usage { ticks, switches })
}

/// This database's rows inserted, updated and deleted, its commits, and the
/// server's WAL position in bytes, full-page images and checkpoints (the
/// WAL is the server's, not the database's: the quiet machine has no other
/// writer). PostgreSQL 15 and 16 count checkpoints in `pg_stat_bgwriter`.
async fn db_counters(sql: &AnyPool) -> Option<DbCounters> {
    sqlx::query_as(
        "SELECT (d.tup_inserted + d.tup_updated + d.tup_deleted)::int8 AS rows_written, \
                d.xact_commit::int8 AS commits, \
                pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 AS wal_bytes, \
                w.wal_fpi::int8 AS wal_fpi, \
                (b.checkpoints_timed + b.checkpoints_req)::int8 AS checkpoints \
         FROM pg_stat_database d, pg_stat_wal w, pg_stat_bgwriter b \
         WHERE d.datname = current_database()",
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

#[cfg(test)]
mod tests {
    use chime_tests::PgDatabase;
    use sqlx::any::AnyPoolOptions;
    use sqlx::AnyPool;

    use super::{db_counters, sectors_written};

    /// The disks named are summed, partitions and the rest are not.
    #[test]
    fn sectors_written_are_the_named_disks() {
        let stats = "   8       0 sda 100 0 2000 10 300 0 4000 20 0 30 30\n\
                       8       1 sda1 90 0 1900 9 290 0 3900 19 0 29 29\n\
                       7       0 loop0 5 0 50 1 0 0 0 0 0 1 1\n\
                     253       0 vda 10 0 200 1 30 0 600 2 0 3 3\n";
        let disks = ["sda".to_owned(), "vda".to_owned()];
        assert_eq!(sectors_written(stats, &disks), Some(4600));
        assert_eq!(sectors_written(stats, &["nvme0n1".to_owned()]), None);
    }

    async fn run(sql: &AnyPool, statement: &str) {
        sqlx::query(statement)
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// The counters are read on this server, and they move: a checkpoint is
    /// counted, and the first change to a page after it logs the page whole.
    #[tokio::test]
    async fn a_checkpoint_and_the_full_page_image_after_it_are_counted() {
        sqlx::any::install_default_drivers();
        let db = PgDatabase::create().await;
        let sql = AnyPoolOptions::new()
            .max_connections(1)
            .connect(db.url())
            .await
            .expect("connect");
        run(
            &sql,
            "CREATE TABLE t (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        run(
            &sql,
            "INSERT INTO t SELECT i, 0 FROM generate_series(1, 100) i",
        )
        .await;
        run(&sql, "CHECKPOINT").await;
        let before = db_counters(&sql).await.expect("counters before");
        run(&sql, "CHECKPOINT").await;
        run(&sql, "UPDATE t SET n = 1 WHERE id = 1").await;
        // Backends hand their WAL counts to the statistics at most once a
        // second unless asked to at their next transaction's end.
        run(&sql, "SELECT pg_stat_force_next_flush()").await;
        let after = db_counters(&sql).await.expect("counters after");
        assert!(
            after.checkpoints > before.checkpoints,
            "checkpoints {} then {}",
            before.checkpoints,
            after.checkpoints
        );
        assert!(
            after.wal_fpi > before.wal_fpi,
            "full-page images {} then {}",
            before.wal_fpi,
            after.wal_fpi
        );
        assert!(after.wal_bytes > before.wal_bytes);
        assert!(after.rows_written > before.rows_written);
        assert!(after.commits > before.commits);
    }
}
