//! The graph of jobs that name other jobs (`on_success`), checked at put so
//! that no chain of triggers leads back to where it started: a success
//! triggering its own job, directly or through others, would run forever.
//!
//! The check reads the stored jobs the new spec reaches, level by level.
//! Two puts that close a cycle between them at the same moment are not
//! caught (each sees the other's old spec); a put of either job later is.

use super::dialect::Col;
use super::{id_batch, RowExt, Store, StoreError};
use chime_common::JobSpec;
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};

/// The most stored jobs one check reads; a graph larger than this is refused
/// rather than walked without end.
pub const MAX_CHAIN_JOBS: usize = 10_000;

/// The part of a stored spec the walk needs.
#[derive(Deserialize)]
struct Triggers {
    #[serde(default)]
    on_success: Vec<String>,
}

impl Store {
    /// Refuses `spec` if its `on_success` jobs lead back to it through the
    /// stored jobs' `on_success` lists.
    pub(crate) async fn check_no_cycle(&self, spec: &JobSpec) -> Result<(), StoreError> {
        if spec.on_success.is_empty() {
            return Ok(());
        }
        // Each job reached, with the job it was reached from.
        let mut reached_from: HashMap<String, String> = HashMap::new();
        let mut frontier: VecDeque<String> = VecDeque::new();
        for next in &spec.on_success {
            reached_from.insert(next.clone(), spec.id.clone());
            frontier.push_back(next.clone());
        }
        let sql = format!(
            "SELECT id, spec FROM jobs WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        while !frontier.is_empty() {
            let level: Vec<String> = frontier.drain(..).collect();
            let rows = sqlx::query(&sql)
                .bind(id_batch(&level)?)
                .fetch_all(&self.read)
                .await?;
            for row in rows {
                let id = row.text("on_success walk", "id")?;
                // A stored spec that does not read triggers nothing here;
                // staging reports it as corrupt.
                let triggers = serde_json::from_str::<Triggers>(&row.text(&id, "spec")?)
                    .map(|t| t.on_success)
                    .unwrap_or_default();
                for next in triggers {
                    if next == spec.id {
                        return Err(cycle(&reached_from, &spec.id, &id));
                    }
                    if !reached_from.contains_key(&next) {
                        reached_from.insert(next.clone(), id.clone());
                        frontier.push_back(next);
                    }
                }
            }
            if reached_from.len() > MAX_CHAIN_JOBS {
                return Err(StoreError::invalid(
                    "on_success",
                    format!(
                        "reaches more than {MAX_CHAIN_JOBS} jobs through on_success; \
                         split the chain"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The refusal for a walk that came back to `start` from `last`, naming the
/// whole loop (`a → b → c → a`).
fn cycle(reached_from: &HashMap<String, String>, start: &str, last: &str) -> StoreError {
    // Back from `last` to the first job after `start`.
    let mut back = vec![last.to_string()];
    let mut at = last;
    while let Some(from) = reached_from.get(at).filter(|from| *from != start) {
        back.push(from.clone());
        at = from;
    }
    let mut path = vec![start.to_string()];
    path.extend(back.into_iter().rev());
    path.push(start.to_string());
    StoreError::invalid(
        "on_success",
        format!(
            "would make a cycle of triggers: {}; a job must not trigger itself, \
             directly or through others",
            path.join(" → ")
        ),
    )
}
