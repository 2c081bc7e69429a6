//! One scheduler per SQLite file.
//!
//! SQLite has one writer and no lock a second process would see before it
//! claims slices: two schedulers on one file would both claim, stage and
//! publish. So a scheduler holds an exclusive lock on a file beside the
//! database (`<database>.holder`) for as long as it runs, and writes who it
//! is into it; a second one finds the lock taken and exits naming the
//! holder. The kernel drops the lock when the holder's process ends, even
//! by kill -9, so a crashed scheduler never blocks its successor.
//! PostgreSQL needs none of this: its replicas coordinate through claims.

use sqlx::sqlite::SqliteConnectOptions;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The lock a running scheduler holds on its SQLite file; released when
/// dropped.
#[derive(Debug)]
pub struct SqliteHolder {
    /// Kept open: closing it releases the lock.
    _file: File,
    path: PathBuf,
}

impl SqliteHolder {
    /// Takes the SQLite file `database_url` names for replica `replica_id`;
    /// `None` for PostgreSQL and in-memory databases. Fails, naming the
    /// holder, when another scheduler holds it.
    pub fn take(database_url: &str, replica_id: &str) -> Result<Option<SqliteHolder>, String> {
        let Some(database) = sqlite_file(database_url) else {
            return Ok(None);
        };
        let path = holder_path(&database);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| {
                format!(
                    "cannot open {} to hold the SQLite file: {e}",
                    path.display()
                )
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if holder.is_empty() {
                    "a scheduler that has not said who it is yet"
                } else {
                    holder
                };
                return Err(format!(
                    "the SQLite file {} is held by another scheduler ({holder}); one scheduler runs \
                     per SQLite file: stop that one, or give this one another --database-url \
                     (PostgreSQL runs several replicas)",
                    database.display()
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()));
            }
        }
        let who = format!(
            "replica {replica_id}, pid {} on {}, since {}",
            std::process::id(),
            host_name(),
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        let written = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(who.as_bytes()))
            .and_then(|()| file.flush());
        if let Err(e) = written {
            // The lock is held either way; only the name is missing.
            tracing::warn!(path = %path.display(), error = %e, "cannot write who holds the SQLite file");
        }
        Ok(Some(SqliteHolder { _file: file, path }))
    }

    /// The holder file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The file an `sqlite:` URL names; `None` for another database or an
/// in-memory one.
fn sqlite_file(database_url: &str) -> Option<PathBuf> {
    if !database_url.starts_with("sqlite:")
        || database_url.contains(":memory:")
        || database_url.contains("mode=memory")
    {
        return None;
    }
    let options = SqliteConnectOptions::from_str(database_url).ok()?;
    let file = options.get_filename();
    let name = file.to_string_lossy();
    if name.is_empty() {
        return None;
    }
    // The same file reached by another relative path is the same file.
    Some(std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf()))
}

fn holder_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".holder");
    PathBuf::from(name)
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unnamed host".into())
}

#[cfg(test)]
mod tests {
    use super::SqliteHolder;

    #[test]
    fn a_second_holder_is_refused_and_told_who_holds_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/chime.db?mode=rwc", dir.path().display());
        let first = SqliteHolder::take(&url, "one")
            .unwrap()
            .expect("a file to hold");
        let refused = SqliteHolder::take(&url, "two").unwrap_err();
        assert!(
            refused.contains("held by another scheduler (replica one, pid"),
            "{refused}"
        );
        assert!(refused.contains("--database-url"), "{refused}");
        drop(first);
        let second = SqliteHolder::take(&url, "two")
            .unwrap()
            .expect("free again");
        assert!(second.path().ends_with("chime.db.holder"));
    }

    #[test]
    fn postgres_and_memory_databases_need_no_holder() {
        assert!(SqliteHolder::take("postgres://localhost/chime", "r")
            .unwrap()
            .is_none());
        assert!(SqliteHolder::take("sqlite::memory:", "r")
            .unwrap()
            .is_none());
        assert!(SqliteHolder::take("sqlite://x.db?mode=memory", "r")
            .unwrap()
            .is_none());
    }
}
