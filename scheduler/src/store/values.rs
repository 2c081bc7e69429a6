//! Values as the store keeps them: instants as milliseconds, batches as
//! JSON rows, typed reads of a row's columns that name the row when a
//! value does not fit, and the partition hash.

use super::dialect::JsonRows;
use super::error::StoreError;
use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
use sqlx::Row;

/// 32-bit FNV-1a.
pub fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 2_166_136_261;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(16_777_619);
    }
    hash
}

/// Milliseconds since the epoch.
pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// An instant from stored milliseconds; out of range is a corrupt row.
pub(super) fn instant(id: &str, column: &str, ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::corrupt(id, format!("{column} {ms} is not a valid instant")))
}

/// An instant for the API from milliseconds we computed ourselves.
pub(super) fn at_ms(ms: i64) -> DateTime<Utc> {
    chime_common::duration::from_millis(ms)
}

/// `now` truncated to the millisecond, as the store keeps it.
pub(super) fn truncate(now: DateTime<Utc>) -> DateTime<Utc> {
    at_ms(ms(now))
}

/// A batch as bound to [`Backend::json_rows`].
pub(super) fn json_text<T: serde::Serialize>(rows: &[T]) -> Result<JsonRows, StoreError> {
    let text = serde_json::to_string(rows)
        .map_err(|e| StoreError::Internal(format!("encoding a batch: {e}")))?;
    Ok(JsonRows::new(text, rows.len()))
}

/// A batch of ids as bound to `json_rows` with one `id` column.
pub(super) fn id_batch<S: AsRef<str>>(ids: &[S]) -> Result<JsonRows, StoreError> {
    #[derive(serde::Serialize)]
    struct Id<'a> {
        id: &'a str,
    }
    let rows: Vec<Id> = ids.iter().map(|id| Id { id: id.as_ref() }).collect();
    json_text(&rows)
}

/// Typed column access that names the row when a value does not fit.
pub(super) trait RowExt {
    fn text(&self, id: &str, column: &str) -> Result<String, StoreError>;
    fn opt_text(&self, id: &str, column: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, id: &str, column: &str) -> Result<i64, StoreError>;
    fn opt_int(&self, id: &str, column: &str) -> Result<Option<i64>, StoreError>;
}

impl RowExt for AnyRow {
    fn text(&self, id: &str, column: &str) -> Result<String, StoreError> {
        self.try_get::<String, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }

    fn opt_text(&self, id: &str, column: &str) -> Result<Option<String>, StoreError> {
        self.try_get::<Option<String>, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }

    fn int(&self, id: &str, column: &str) -> Result<i64, StoreError> {
        self.try_get::<i64, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }

    fn opt_int(&self, id: &str, column: &str) -> Result<Option<i64>, StoreError> {
        self.try_get::<Option<i64>, _>(column)
            .map_err(|e| StoreError::corrupt(id, format!("column {column}: {e}")))
    }
}
