//! The traces stored with firings, read for the spans of the scheduler's
//! start decisions and finishes (`scheduler/src/ops/traces.rs`). Only read
//! while spans are exported, and never by the start or finish itself:
//! those decide without it.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::stage::stored_trace;
use super::values::id_batch;
use chime_common::traceparent::TraceParent;
use std::collections::HashMap;

/// What a firing's spans need of its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedFiring {
    pub group: String,
    /// The trace it keeps (a trigger's, or a submitted one-shot job's);
    /// `None`: its trace is its instant's.
    pub traceparent: Option<TraceParent>,
}

impl Store {
    /// The group and stored trace of each of `ids` that exists, by firing
    /// id text.
    pub async fn traced_firings<S: AsRef<str>>(
        &self,
        ids: &[S],
    ) -> Result<HashMap<String, TracedFiring>, StoreError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(&format!(
            "SELECT id, group_name, traceparent FROM firings \
             WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        ))
        .bind_rows(&id_batch(ids)?)
        .fetch_all(&self.read)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, group, text)| {
                let traceparent = stored_trace(text.as_deref());
                (id, TracedFiring { group, traceparent })
            })
            .collect())
    }
}
