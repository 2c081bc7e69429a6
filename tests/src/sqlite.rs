//! A fresh SQLite database file per test.
//!
//! SQLite is Chime's single-replica store and needs no server, so each test
//! gets its own file in its own temporary directory (the directory also holds
//! the `-wal` and `-shm` files SQLite creates beside it).

use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// A database file path in a temporary directory that lives as long as this
/// value. The file itself is created by the first connection (`mode=rwc`).
#[derive(Debug)]
pub struct SqliteDatabase {
    dir: TempDir,
    path: PathBuf,
}

impl SqliteDatabase {
    /// A new, empty temporary directory for `chime.db`.
    pub fn create() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("chime-sqlite-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory for SQLite: {e}"));
        let path = dir.path().join("chime.db");
        SqliteDatabase { dir, path }
    }

    /// `sqlite://<path>?mode=rwc`: read-write, create if missing.
    pub fn url(&self) -> String {
        format!("sqlite://{}?mode=rwc", self.path.display())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary directory holding the file; removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
