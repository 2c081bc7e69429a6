//! The store's side of the republisher (`crate::recovery::republisher`): the published
//! firings no worker started, where their message was put, a copy published
//! again, and the end of a firing whose copies all went unstarted.
//!
//! A published firing's `waiting` row holds the stream sequence of its
//! message (written by the publish mark, `publish.rs`) and how many copies
//! were published since. The store still decides every start, so a copy of
//! a firing that already started is refused like any second delivery.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::rows::STAGED_COLUMNS;
use super::stage::decode_staged;
use super::states::{sources, Transition};
use super::types::StagedFiring;
use super::values::{id_batch, ms, RowExt};
use chime_common::protocol::{Alert, AlertKind};
use chime_common::FiringId;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// A published firing no worker has started.
#[derive(Debug, Clone)]
pub struct PublishedFiring {
    pub firing: StagedFiring,
    /// The `CHIME_FIRE` sequence of its latest message; `None` when not
    /// known (marked before the sequence was recorded).
    pub stream_seq: Option<u64>,
    /// Copies published after the first because the message was gone.
    pub republishes: u32,
    /// When its latest message was published.
    pub published_at: DateTime<Utc>,
}

impl Store {
    /// Published firings no worker started whose latest message was
    /// published before `published_before`, oldest first, at most `limit`
    /// (those a limit holds excluded: they wait on purpose). Corrupt rows
    /// are logged and left out.
    pub async fn published_unstarted(
        &self,
        published_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<PublishedFiring>, StoreError> {
        self.published_unstarted_after(published_before, None, limit)
            .await
    }

    /// [`Store::published_unstarted`] from after `cursor` (the published
    /// instant and id of the last one a previous call returned) on, so that
    /// a backlog that waits on purpose (a group without workers) does not
    /// hide the firings behind it.
    pub async fn published_unstarted_after(
        &self,
        published_before: DateTime<Utc>,
        cursor: Option<&(DateTime<Utc>, FiringId)>,
        limit: u32,
    ) -> Result<Vec<PublishedFiring>, StoreError> {
        let (after_ms, after_id) = match cursor {
            Some((at, id)) => (ms(*at), id.to_string()),
            None => (i64::MIN, String::new()),
        };
        let waiting = sqlx::query(
            "SELECT w.firing_id, w.stream_seq, w.republishes, w.published_at FROM waiting w \
             WHERE w.published_at IS NOT NULL AND w.published_at < $1 \
                 AND (w.published_at > $3 OR (w.published_at = $3 AND w.firing_id > $4)) \
                 AND NOT EXISTS (SELECT 1 FROM held h \
                     WHERE h.firing_id = w.firing_id AND h.released_at IS NULL) \
                 AND NOT EXISTS (SELECT 1 FROM firings f \
                     WHERE f.id = w.firing_id AND f.worker_id IS NOT NULL) \
             ORDER BY w.published_at, w.firing_id LIMIT $2",
        )
        .bind(ms(published_before))
        .bind(i64::from(limit))
        .bind(after_ms)
        .bind(after_id)
        .fetch_all(&self.read)
        .await?;
        if waiting.is_empty() {
            return Ok(Vec::new());
        }
        let mut found = HashMap::new();
        let mut order = Vec::with_capacity(waiting.len());
        for row in &waiting {
            let id = row.text("", "firing_id")?;
            let seq = row.opt_int(&id, "stream_seq")?;
            let republishes = row.int(&id, "republishes")?;
            let published_at = row.int(&id, "published_at")?;
            let Some(published_at) = DateTime::<Utc>::from_timestamp_millis(published_at) else {
                tracing::error!(firing_id = %id, published_at, "published instant out of range; left out");
                continue;
            };
            order.push(id.clone());
            found.insert(
                id,
                (
                    seq.and_then(|s| u64::try_from(s).ok()).filter(|s| *s > 0),
                    u32::try_from(republishes).unwrap_or(u32::MAX),
                    published_at,
                ),
            );
        }
        let rows = sqlx::query(&format!(
            "SELECT {STAGED_COLUMNS} FROM firings WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        ))
        .bind_rows(&id_batch(&order)?)
        .fetch_all(&self.read)
        .await?;
        let mut firings: HashMap<String, StagedFiring> = decode_staged(&rows)
            .0
            .into_iter()
            .map(|f| (f.id.to_string(), f))
            .collect();
        Ok(order
            .into_iter()
            .filter_map(|id| {
                let firing = firings.remove(&id)?;
                let (stream_seq, republishes, published_at) = found.remove(&id)?;
                Some(PublishedFiring {
                    firing,
                    stream_seq,
                    republishes,
                    published_at,
                })
            })
            .collect())
    }

    /// Whether firing `id` still waits for a start from its message
    /// (`staged` or `published`, and not held by a limit: a held firing is
    /// published again when released).
    pub async fn awaits_start(&self, id: &FiringId) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM waiting w WHERE w.firing_id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM held h \
                     WHERE h.firing_id = w.firing_id AND h.released_at IS NULL)",
        )
        .bind(id.to_string())
        .fetch_optional(&self.read)
        .await?;
        Ok(found.is_some())
    }

    /// Records a copy of published firing `id` acknowledged at `stream_seq`
    /// at `at`: one more republish, and the bound starts over. False when
    /// the firing no longer waits (a worker started it meanwhile).
    pub async fn record_republished(
        &self,
        id: &FiringId,
        stream_seq: u64,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE waiting SET stream_seq = $2, republishes = republishes + 1, published_at = $3 \
             WHERE firing_id = $1 AND published_at IS NOT NULL",
        )
        .bind(id.to_string())
        .bind(i64::try_from(stream_seq).unwrap_or(0))
        .bind(ms(at))
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Fails published firing `id`, which no worker started, with `error`;
    /// returns the `firing_failed` alert, or `None` when it no longer waits
    /// (started, cancelled, or still to be published meanwhile).
    pub async fn fail_unstarted_published(
        &self,
        id: &FiringId,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Alert>, StoreError> {
        let now_ms = ms(now);
        self.retrying(|| async {
            let mut tx = self.begin().await?;
            let Some(firing) = self.lock_firing(&mut tx, id).await? else {
                return Ok(None);
            };
            if firing.state != chime_common::FiringState::Published
                || !sources(Transition::Refuse).contains(&firing.state)
            {
                return Ok(None);
            }
            self.fail_unstarted(&mut tx, &firing.text, error, now_ms)
                .await?;
            tx.commit().await?;
            Ok(Some(firing.alert(
                AlertKind::FiringFailed,
                format!("firing {id} failed before it started: {error}"),
                now_ms,
            )))
        })
        .await
    }
}
