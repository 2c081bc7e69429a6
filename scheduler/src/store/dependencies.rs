//! The graph of jobs that start other jobs, checked at put so that no chain
//! leads back to where it started: a success starting its own job again,
//! directly or through others, would run forever. Two kinds of edge make
//! the graph: `on_success` (a success of A triggers B: A → B) and a fan-in
//! `schedule.after` (B waits for A's success: also A → B).
//!
//! The check walks forward from the job being put, level by level, through
//! the stored jobs' `on_success` lists and the stored fan-in rows (table
//! `fan_in`, by upstream), with the new spec's own edges in place of its
//! stored ones. Two puts that close a cycle between them at the same moment
//! are not caught (each sees the other's old spec); a put of either job
//! later is.

use super::dialect::{BindRows, Col};
use super::error::StoreError;
use super::handle::Store;
use super::values::{id_batch, RowExt};
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
    /// Refuses `spec` if the jobs it starts (its `on_success`, and the jobs
    /// whose `after` names it) lead back to it through stored `on_success`
    /// lists and fan-in schedules, or through its own `after`.
    pub(crate) async fn check_no_cycle(&self, spec: &JobSpec) -> Result<(), StoreError> {
        let after = spec.schedule.after();
        // A new cycle needs one of the edges this put changes.
        if spec.on_success.is_empty() && after.is_empty() {
            return Ok(());
        }
        let field = if after.is_empty() {
            "on_success"
        } else {
            "schedule.after"
        };
        // Each job reached, with the job it was reached from.
        let mut walk = Walk {
            start: &spec.id,
            reached_from: HashMap::new(),
            frontier: VecDeque::new(),
        };
        for next in &spec.on_success {
            walk.reach(next.clone(), &spec.id);
        }
        for (_, next) in self
            .fan_in_downstream(&[spec.id.as_str()], &spec.id)
            .await?
        {
            walk.reach(next, &spec.id);
        }
        let specs = format!(
            "SELECT id, spec FROM jobs WHERE id IN (SELECT r.id FROM {})",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        while !walk.frontier.is_empty() {
            let level: Vec<String> = walk.frontier.drain(..).collect();
            // The new spec's `after`: a job of it reached closes the loop.
            if let Some(last) = level.iter().find(|id| after.contains(id)) {
                return Err(walk.cycle(last, "schedule.after"));
            }
            let rows = sqlx::query(&specs)
                .bind_rows(&id_batch(&level)?)
                .fetch_all(&self.read)
                .await?;
            for row in rows {
                let id = row.text("dependency walk", "id")?;
                // A stored spec that does not read triggers nothing here;
                // staging reports it as corrupt.
                let triggers = serde_json::from_str::<Triggers>(&row.text(&id, "spec")?)
                    .map(|t| t.on_success)
                    .unwrap_or_default();
                for next in triggers {
                    if next == spec.id {
                        return Err(walk.cycle(&id, "on_success"));
                    }
                    walk.reach(next, &id);
                }
            }
            let level: Vec<&str> = level.iter().map(String::as_str).collect();
            for (from, next) in self.fan_in_downstream(&level, &spec.id).await? {
                walk.reach(next, &from);
            }
            if walk.reached_from.len() > MAX_CHAIN_JOBS {
                return Err(StoreError::invalid(
                    field,
                    format!(
                        "reaches more than {MAX_CHAIN_JOBS} jobs through on_success and \
                         fan-in schedules; split the chain"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The stored fan-in rows whose upstream is one of `upstreams`, as
    /// (upstream, downstream), leaving out those of job `except` (the job
    /// being put, whose rows its put replaces).
    async fn fan_in_downstream(
        &self,
        upstreams: &[&str],
        except: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let sql = format!(
            "SELECT upstream_id, job_id FROM fan_in \
             WHERE upstream_id IN (SELECT r.id FROM {}) AND job_id <> $3",
            self.backend.json_rows(1, &[("id", Col::Text)])
        );
        let rows = sqlx::query(&sql)
            .bind_rows(&id_batch(upstreams)?)
            .bind(except)
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.text("fan_in", "upstream_id")?,
                    row.text("fan_in", "job_id")?,
                ))
            })
            .collect()
    }
}

/// A walk forward from `start`, one level at a time.
struct Walk<'a> {
    start: &'a str,
    /// Each job reached, with the job it was reached from.
    reached_from: HashMap<String, String>,
    /// The jobs reached and not yet read.
    frontier: VecDeque<String>,
}

impl Walk<'_> {
    /// Records an edge `from → next`; `next` is read at the next level if
    /// it was not reached before.
    fn reach(&mut self, next: String, from: &str) {
        if next != self.start && !self.reached_from.contains_key(&next) {
            self.reached_from.insert(next.clone(), from.to_string());
            self.frontier.push_back(next);
        }
    }

    /// The refusal for a walk that came back to `start` from `last`, naming
    /// the whole loop (`a → b → c → a`) and the field of `start` that
    /// closes it.
    fn cycle(&self, last: &str, field: &str) -> StoreError {
        // Back from `last` to the first job after `start`.
        let mut back = vec![last.to_string()];
        let mut at = last;
        while let Some(from) = self.reached_from.get(at).filter(|from| *from != self.start) {
            back.push(from.clone());
            at = from;
        }
        let mut path = vec![self.start.to_string()];
        path.extend(back.into_iter().rev());
        path.push(self.start.to_string());
        cycle_error(field, &path)
    }
}

/// The refusal naming the loop `path`.
fn cycle_error(field: &str, path: &[String]) -> StoreError {
    StoreError::invalid(
        field,
        format!(
            "would make a cycle of triggers: {} (each job starts the next by on_success \
             or as a job its schedule.after waits for); a job must not start itself, \
             directly or through others",
            path.join(" → ")
        ),
    )
}
