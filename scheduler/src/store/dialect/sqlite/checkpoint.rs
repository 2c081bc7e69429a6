//! SQLite's checkpoint, on a connection of its own that also syncs the
//! database file after it.
//!
//! A passive checkpoint syncs the database file only when no commit landed
//! while it copied, and while commits keep coming one nearly always does
//! (`scheduler/src/ops/checkpoint.rs`): the pages it copied would stay in the
//! kernel's cache until the writer's own checkpoint synced the file, and
//! starts and finishes would wait for that sync, longer as the file grows.
//! Synced here, off the writer, they are on the disk before the writer's
//! sync comes.
//!
//! The sync goes through SQLite's own handle of the file
//! (`SQLITE_FCNTL_FILE_POINTER`). A descriptor of Chime's own would not do:
//! closing any descriptor of a file drops every POSIX lock the process
//! holds on it, SQLite's included
//! (<https://www.sqlite.org/howtocorrupt.html>, section 2.2).

use super::super::super::error::StoreError;
use super::PRAGMAS;
use libsqlite3_sys as ffi;
use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The checkpoints of one SQLite file, on a connection opened at the first.
#[derive(Clone)]
pub(crate) struct Checkpoints {
    url: String,
    connection: Arc<Mutex<Option<Checkpointing>>>,
}

/// The open connection, and how many of the log's pages the database file
/// held at the last sync.
struct Checkpointing {
    connection: SqliteConnection,
    synced: i64,
}

impl Checkpoints {
    /// Checkpoints of the file at `url` (one that exists).
    pub(crate) fn new(url: String) -> Self {
        Checkpoints {
            url,
            connection: Arc::new(Mutex::new(None)),
        }
    }

    /// A passive checkpoint: copies what no reader still needs and waits for
    /// nobody, then syncs the database file if it copied pages. SQLite
    /// synced the file too if no commit landed meanwhile, but does not say
    /// whether it did. Returns how many of the log's pages the database
    /// file holds.
    pub(crate) async fn run(&self) -> Result<u64, StoreError> {
        let slot = self.connection.clone().lock_owned().await;
        let mut checkpointing = match OwnedMutexGuard::try_map(slot, Option::as_mut) {
            Ok(open) => open,
            Err(empty) => {
                let connection = connect(&self.url).await?;
                OwnedMutexGuard::map(empty, |slot| {
                    slot.insert(Checkpointing {
                        connection,
                        synced: 0,
                    })
                })
            }
        };
        let (_busy, _log, copied): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&mut checkpointing.connection)
                .await?;
        if copied > 0 && copied != checkpointing.synced {
            // The guard moves into the blocking task: the sync blocks its
            // thread, and the connection must stay open until it returns,
            // even if this future is dropped meanwhile.
            tokio::task::spawn_blocking(move || {
                sync_database_file(&mut checkpointing.connection)?;
                checkpointing.synced = copied;
                Ok::<_, StoreError>(())
            })
            .await
            .map_err(|e| StoreError::Internal(format!("the database file's sync: {e}")))??;
        }
        Ok(u64::try_from(copied).unwrap_or(0))
    }

    /// Closes the connection, if one was opened.
    pub(crate) async fn close(&self) {
        if let Some(checkpointing) = self.connection.lock().await.take() {
            let _ = checkpointing.connection.close().await;
        }
    }
}

/// A connection with the store's settings.
async fn connect(url: &str) -> Result<SqliteConnection, StoreError> {
    let mut connection = SqliteConnection::connect(url).await?;
    for pragma in PRAGMAS {
        sqlx::query(pragma).execute(&mut connection).await?;
    }
    Ok(connection)
}

/// Syncs the main database file of `connection`, on the thread that calls
/// it (a blocking one, inside the runtime).
fn sync_database_file(connection: &mut SqliteConnection) -> Result<(), StoreError> {
    let runtime = tokio::runtime::Handle::current();
    let mut locked = runtime.block_on(connection.lock_handle())?;
    let db = locked.as_raw_handle();
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `db` is an open connection that `locked` keeps from every
    // other thread; this file control writes the pointer to its main
    // database's `sqlite3_file` into `file`, and nothing else.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            db.as_ptr(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if rc != ffi::SQLITE_OK || file.is_null() {
        return Err(unavailable(rc));
    }
    // SAFETY: `file` is SQLite's handle of the database file, open as long
    // as the connection is and used by no other thread while `locked`
    // holds the connection; its methods are null only for a file not open.
    let rc = unsafe {
        match (*file).pMethods.as_ref().and_then(|methods| methods.xSync) {
            Some(sync) => sync(file, ffi::SQLITE_SYNC_NORMAL),
            None => ffi::SQLITE_MISUSE,
        }
    };
    if rc != ffi::SQLITE_OK {
        return Err(unavailable(rc));
    }
    Ok(())
}

/// A failed sync: the disk or the file, so retried at the next checkpoint.
fn unavailable(rc: i32) -> StoreError {
    // SAFETY: for any code, SQLite returns a static text that ends in NUL.
    let text = unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errstr(rc)) };
    StoreError::Unavailable(format!(
        "syncing the SQLite database file: {} (code {rc})",
        text.to_string_lossy()
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use crate::store::{Store, StoreOptions};
    use sqlx::sqlite::SqliteConnection;
    use sqlx::Connection;
    use std::os::fd::RawFd;
    use std::path::Path;

    /// How many of a file's pages in the kernel's cache are dirty or being
    /// written back, by Linux's `cachestat` (6.5 and later).
    fn unsynced_pages(fd: RawFd) -> u64 {
        #[repr(C)]
        struct Range {
            offset: u64,
            length: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            cached: u64,
            dirty: u64,
            writeback: u64,
            evicted: u64,
            recently_evicted: u64,
        }
        // The same on every architecture; the libc crate does not name it.
        const SYS_CACHESTAT: libc::c_long = 451;
        // A length of 0: to the end of the file.
        let range = Range {
            offset: 0,
            length: 0,
        };
        let mut stat = Stat::default();
        // SAFETY: both pointers are to live values of the layouts the
        // kernel's `struct cachestat_range` and `struct cachestat` have.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                fd,
                &raw const range,
                &raw mut stat,
                0 as libc::c_uint,
            )
        };
        assert_eq!(
            rc,
            0,
            "cachestat (Linux 6.5 or later): {}",
            std::io::Error::last_os_error()
        );
        stat.dirty + stat.writeback
    }

    /// A descriptor SQLite holds on `path`: the test must not open one of
    /// its own, whose closing would drop SQLite's locks.
    fn sqlite_descriptor(path: &Path) -> RawFd {
        let path = path.canonicalize().expect("the database file");
        for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
            let entry = entry.expect("a descriptor");
            if std::fs::read_link(entry.path()).is_ok_and(|target| target == path) {
                if let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                    return fd;
                }
            }
        }
        panic!("no descriptor of {}", path.display())
    }

    /// Commits `rows` pages' worth of rows.
    async fn fill(writer: &mut SqliteConnection, rows: u32) {
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
             INSERT INTO filler SELECT randomblob(4000) FROM n",
        )
        .bind(rows)
        .execute(writer)
        .await
        .expect("rows written");
    }

    /// Takes a snapshot of the log as it is now and keeps it.
    async fn hold_snapshot(reader: &mut SqliteConnection) {
        sqlx::query("BEGIN")
            .execute(&mut *reader)
            .await
            .expect("begin");
        sqlx::query("SELECT count(*) FROM filler")
            .fetch_one(&mut *reader)
            .await
            .expect("a read");
    }

    /// A passive checkpoint on `conn`: the log's pages, and how many of them
    /// the database file holds.
    async fn passive(conn: &mut SqliteConnection) -> (i64, i64) {
        let (_busy, log, copied): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(conn)
                .await
                .expect("a checkpoint");
        (log, copied)
    }

    /// While a reader holds an old snapshot, a passive checkpoint copies only
    /// the log's pages before it, and SQLite leaves those unsynced; the
    /// store's checkpoint syncs them.
    #[tokio::test]
    async fn a_checkpoint_that_copies_part_of_the_log_syncs_what_it_copied() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("chime.db");
        let url = format!("sqlite://{}", path.display());
        let store = Store::connect(&url, StoreOptions::default())
            .await
            .expect("a SQLite store");
        let mut writer = SqliteConnection::connect(&url).await.expect("a writer");
        let mut reader = SqliteConnection::connect(&url).await.expect("a reader");
        sqlx::query("CREATE TABLE filler (b BLOB)")
            .execute(&mut writer)
            .await
            .expect("a table");
        fill(&mut writer, 100).await;
        hold_snapshot(&mut reader).await;
        fill(&mut writer, 100).await;

        let (log, copied) = passive(&mut writer).await;
        assert!(copied > 0 && copied < log, "copied {copied} of {log}");
        let fd = sqlite_descriptor(&path);
        assert!(
            unsynced_pages(fd) > 0,
            "SQLite's own partial checkpoint leaves what it copied unsynced"
        );

        sqlx::query("COMMIT")
            .execute(&mut reader)
            .await
            .expect("commit");
        hold_snapshot(&mut reader).await;
        fill(&mut writer, 100).await;
        let held = store.checkpoint().await.expect("the store's checkpoint");
        assert_eq!(unsynced_pages(fd), 0, "what it copied is on the disk");
        // The same snapshot still stops a checkpoint where the store's did.
        let (log, again) = passive(&mut writer).await;
        assert_eq!(u64::try_from(again).ok(), Some(held));
        assert!(
            again > copied && again < log,
            "the store's checkpoint copied more, not the whole log: {held} of {log}"
        );

        sqlx::query("COMMIT")
            .execute(&mut reader)
            .await
            .expect("commit");
        store.close().await;
    }
}
