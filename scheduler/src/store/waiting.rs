//! The `waiting` table: which firings wait for a worker to start them.
//!
//! Every search for staged or published firings (adoption, takeover, the
//! overdue safety net, the not-started alert, the gauges) runs on this small
//! table, so `firings` keeps no index on a column that changes after insert
//! and PostgreSQL updates its rows in place (HOT). A firing has a row here
//! exactly while its state is `staged` or `published`: whatever writes that
//! state writes the row in the same transaction or statement, `firings`
//! row first (see the migration `20261123120000_waiting.sql`).

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::values::{id_batch, json_text};
use serde::Serialize;
use sqlx::{Any, Transaction};

/// Columns of a batch of new waiting rows, as [`Waiting`] serializes them.
const WAITING_COLUMNS: [(&str, Col); 5] = [
    ("id", Col::Text),
    ("group_name", Col::Text),
    ("part", Col::Int),
    ("due_at", Col::Int),
    ("slice", Col::Text),
];

/// A firing that starts waiting: staged, due at `due_at`, owned by `slice`
/// (`None`: the slice that stages its partition's instant adopts it).
#[derive(Serialize)]
pub(crate) struct Waiting<'a> {
    pub id: &'a str,
    pub group_name: &'a str,
    pub part: u32,
    pub due_at: i64,
    pub slice: Option<&'a str>,
}

impl Store {
    /// Records newly staged firings as waiting.
    pub(crate) async fn add_waiting(
        &self,
        tx: &mut Transaction<'static, Any>,
        rows: &[Waiting<'_>],
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "INSERT INTO waiting (firing_id, group_name, part, due_at, slice) \
             SELECT r.id, r.group_name, r.part, r.due_at, r.slice FROM {} WHERE true",
            self.backend.json_rows(1, &WAITING_COLUMNS)
        );
        sqlx::query(&sql)
            .bind_rows(&json_text(rows)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Forgets firings that no longer wait (started, skipped, cancelled).
    pub(crate) async fn remove_waiting(
        &self,
        tx: &mut Transaction<'static, Any>,
        ids: &[impl AsRef<str>],
    ) -> Result<(), StoreError> {
        self.delete_rows_of(tx, "waiting", ids).await
    }

    /// Deletes the rows of `table` (keyed by `firing_id`) of firings `ids`.
    pub(crate) async fn delete_rows_of(
        &self,
        tx: &mut Transaction<'static, Any>,
        table: &str,
        ids: &[impl AsRef<str>],
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "DELETE FROM {table} WHERE firing_id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        sqlx::query(&sql)
            .bind_rows(&id_batch(ids)?)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}
