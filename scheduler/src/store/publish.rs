//! The publish transition: `staged` → `published`, recorded once JetStream
//! has the firing. Also the read of published firings no worker started.

use super::dialect::Col;
use super::rows::{self, FIRING_COLUMNS};
use super::stage::BATCH_ROWS;
use super::states::{sources_sql, Transition};
use super::{id_batch, ms, Store, StoreError};
use chime_common::{Firing, FiringId};
use chrono::{DateTime, Utc};

impl Store {
    /// Records firings as published. Only rows still `staged` change (one
    /// started, cancelled or already published stays as it is); returns how
    /// many did.
    pub async fn record_published(
        &self,
        ids: &[FiringId],
        at: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        // Only rows no one else holds: a concurrent start batch locks firings
        // one by one, and waiting on each other's rows in different orders
        // deadlocked. A row skipped here is being started, which moves it
        // past `published` anyway, or is left `staged` for housekeeping,
        // whose republish JetStream drops as a duplicate. Only staged rows
        // are locked: most firings are started before their mark is written,
        // and locking those too cost a heap write each.
        // A held firing is left alone: a limit stopped it after this
        // publish, and once released it waits for a publish of its own, so
        // this late mark must not say it has one.
        let mark_firings = format!(
            "UPDATE firings SET state = 'published', published_at = $1 \
             WHERE state IN {from} AND id IN (SELECT f.id FROM firings f \
             WHERE f.id IN (SELECT r.id FROM {}) AND f.state IN {from} \
                 AND NOT EXISTS (SELECT 1 FROM held h WHERE h.firing_id = f.id) \
             ORDER BY f.id{}) RETURNING id",
            self.backend.json_rows(2, &[("id", Col::Text)]),
            self.backend.for_update_skip_locked("f"),
            from = sources_sql(Transition::Publish),
        );
        let mut changed = 0;
        for chunk in ids.chunks(BATCH_ROWS) {
            let texts: Vec<String> = chunk.iter().map(FiringId::to_string).collect();
            let batch = id_batch(&texts)?;
            changed += self
                .retrying(|| self.mark_published_rows(&mark_firings, &batch, ms(at)))
                .await?;
        }
        Ok(changed)
    }

    /// Published firings no worker started, published before
    /// `published_before`, oldest first (those a limit holds excluded: they wait
    /// on purpose). Corrupt rows are logged and left out.
    pub async fn unstarted(
        &self,
        published_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Firing>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {FIRING_COLUMNS} FROM firings WHERE id IN ( \
                 SELECT w.firing_id FROM waiting w \
                 WHERE w.published_at IS NOT NULL AND w.published_at < $1 \
                     AND NOT EXISTS (SELECT 1 FROM held h \
                         WHERE h.firing_id = w.firing_id AND h.released_at IS NULL) \
                 ORDER BY w.published_at, w.firing_id LIMIT $2) \
             ORDER BY published_at, id"
        ))
        .bind(ms(published_before))
        .bind(i64::from(limit))
        .fetch_all(&self.read)
        .await?;
        Ok(rows::readable(&rows, rows::firing, "published firing"))
    }
}
