//! The publish transition: `staged` → `published`, recorded once JetStream
//! has the firing, with the stream sequence of its message.

use super::dialect::{Backend, BindRows, Col, JsonRows};
use super::error::StoreError;
use super::handle::Store;
use super::stage::BATCH_ROWS;
use super::states::{sources_sql, Transition};
use super::values::{id_batch, json_text, ms};
use chime_common::FiringId;
use chrono::{DateTime, Utc};

/// A firing JetStream acknowledged, and the `CHIME_FIRE` sequence its ack
/// named (0: not known). The republisher reads the message back by that
/// sequence to tell a firing whose message waits from one whose message is
/// gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedFiring {
    pub id: FiringId,
    pub stream_seq: u64,
}

/// One row of a mark batch, as the statement reads it.
#[derive(serde::Serialize)]
struct MarkRow {
    id: String,
    seq: i64,
}

/// The columns of a mark batch: the firing id, and its message's stream
/// sequence (0: not known, stored as NULL).
pub(crate) const MARK_COLUMNS: &[(&str, Col)] = &[("id", Col::Text), ("seq", Col::Int)];

impl Store {
    /// Records firings as published, their message's stream sequence not
    /// known. See [`Store::record_acked`].
    pub async fn record_published(
        &self,
        ids: &[FiringId],
        at: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let acked: Vec<AckedFiring> = ids
            .iter()
            .map(|id| AckedFiring {
                id: id.clone(),
                stream_seq: 0,
            })
            .collect();
        self.record_acked(&acked, at).await
    }

    /// Records firings as published, each with the stream sequence of its
    /// message, in one statement per batch. Only rows still `staged` change
    /// (one started, cancelled or already published stays as it is);
    /// returns how many did.
    pub async fn record_acked(
        &self,
        acked: &[AckedFiring],
        at: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        // Only rows no one else holds: a concurrent start batch locks firings
        // one by one, and waiting on each other's rows in different orders
        // would deadlock. A row skipped here is being started, which moves it
        // past `published` anyway, or is left `staged` for housekeeping,
        // whose republish JetStream drops as a duplicate. Only staged rows
        // are locked: most firings are started before their mark is written,
        // and locking those too would cost a heap write each.
        // A held firing is left alone: a limit stopped it after this
        // publish, and once released it waits for a publish of its own, so
        // this late mark must not say it has one.
        let mark_firings = format!(
            "UPDATE firings SET state = 'published', published_at = $1 \
             WHERE state IN {from} AND id IN (SELECT f.id FROM firings f \
             WHERE f.id IN (SELECT r.id FROM {}) AND f.state IN {from} \
                 AND NOT EXISTS (SELECT 1 FROM held h WHERE h.firing_id = f.id) \
             ORDER BY f.id{}) RETURNING id",
            self.backend.json_rows(2, MARK_COLUMNS),
            self.backend.for_update_skip_locked("f"),
            from = sources_sql(Transition::Publish),
        );
        let mut changed = 0;
        for chunk in acked.chunks(BATCH_ROWS) {
            let rows: Vec<MarkRow> = chunk
                .iter()
                .map(|a| MarkRow {
                    id: a.id.to_string(),
                    seq: i64::try_from(a.stream_seq).unwrap_or(0),
                })
                .collect();
            let batch = json_text(&rows)?;
            changed += self
                .retrying(|| self.mark_published_rows(&mark_firings, &batch, ms(at)))
                .await?;
        }
        Ok(changed)
    }
}

impl Store {
    /// Runs `mark_firings` (`$1` the instant, `$2` and `$3` the batch of ids, returning
    /// the ids it marked) and marks the same firings' `waiting` rows, as one
    /// unit; returns how many firings it marked.
    pub(crate) async fn mark_published_rows(
        &self,
        mark_firings: &str,
        batch: &JsonRows,
        at: i64,
    ) -> Result<u64, StoreError> {
        match self.backend {
            Backend::Postgres => record_published_postgres(self, mark_firings, batch, at).await,
            Backend::Sqlite => record_published_sqlite(self, mark_firings, batch, at).await,
        }
    }
}

/// Records a batch published in one statement: the `waiting` rows of exactly
/// the firings marked (not those skipped as locked), after them.
///
/// A mark is, with start and finish, a statement of every firing's path,
/// and like theirs it finds every row by its key (its generic plan probes
/// the primary keys of `firings`, `held` and `waiting`, driven by the
/// batch), so it runs on their held connections: planned once instead of
/// at each execution, where planning costs as much as running it.
async fn record_published_postgres(
    store: &Store,
    mark_firings: &str,
    batch: &JsonRows,
    at: i64,
) -> Result<u64, StoreError> {
    let sql = format!(
        "WITH marked AS ({mark_firings}), \
         published AS (UPDATE waiting SET published_at = $1, stream_seq = NULLIF(r.seq, 0) \
             FROM marked, {} \
             WHERE waiting.firing_id = marked.id AND r.id = marked.id) \
         SELECT COUNT(*) FROM marked",
        Backend::Postgres.json_rows(2, MARK_COLUMNS)
    );
    let query = sqlx::query_as(&sql).bind(at).bind_rows(batch);
    let counted: Vec<(i64,)> = match &store.fast_path_connections {
        Some(held) => held.fetch_all(query).await?,
        None => query.fetch_all(&store.write).await?,
    };
    let count = counted.first().map_or(0, |(count,)| *count);
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Records a batch published in one transaction. One writer: every staged
/// firing of the batch is marked, so the batch's waiting rows follow them.
async fn record_published_sqlite(
    store: &Store,
    mark_firings: &str,
    batch: &JsonRows,
    at: i64,
) -> Result<u64, StoreError> {
    let mut tx = store.begin().await?;
    let marked: Vec<String> = sqlx::query_scalar(mark_firings)
        .bind(at)
        .bind_rows(batch)
        .fetch_all(&mut *tx)
        .await?;
    // Exactly the firings marked: one the mark skipped (held by a limit,
    // say) keeps its waiting row as it is.
    // Its stream sequence from the whole batch (0: not known, NULL).
    sqlx::query(&format!(
        "UPDATE waiting SET published_at = $1, \
             stream_seq = (SELECT NULLIF(r.seq, 0) FROM {} WHERE r.id = waiting.firing_id) \
         WHERE published_at IS NULL AND firing_id IN (SELECT r.id FROM {})",
        Backend::Sqlite.json_rows(4, MARK_COLUMNS),
        Backend::Sqlite.json_rows(2, &[("id", Col::Text)])
    ))
    .bind(at)
    .bind_rows(&id_batch(&marked)?)
    .bind_rows(batch)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(marked.len() as u64)
}
