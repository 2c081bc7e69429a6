//! An operator's cancel of one firing (`firings.cancel`): a firing that
//! waits to start ends `cancelled` here and now, so a later start is
//! refused (`start.rs` refuses cancelled firings); a running one is handed
//! back to be cancelled on its worker, which reports it `cancelled`.

use super::error::StoreError;
use super::handle::Store;
use super::locks::Tx;
use super::rows::{self, FIRING_COLUMNS};
use super::states::{sources, sources_sql, Transition};
use super::types::RunningFiring;
use super::values::ms;
use chime_common::{Firing, FiringId, FiringState};
use chrono::{DateTime, Utc};

/// The `error` of a firing an operator cancelled before it started.
pub const CANCELLED_BY_OPERATOR: &str = "cancelled by an operator";

/// What `cancel_firing` did.
#[derive(Debug, Clone, PartialEq)]
pub struct CancelOutcome {
    /// The firing afterwards: `cancelled`, or still `executing` until its
    /// worker reports.
    pub firing: Firing,
    /// The run to cancel on its worker, when the firing is executing.
    pub running: Option<RunningFiring>,
}

impl Store {
    /// Cancels firing `id`. `None` if there is no such firing; `Conflict`
    /// if it has already ended.
    pub async fn cancel_firing(
        &self,
        id: &FiringId,
        now: DateTime<Utc>,
    ) -> Result<Option<CancelOutcome>, StoreError> {
        let now_ms = ms(now);
        self.retrying(|| self.cancel_firing_once(id, now_ms)).await
    }

    async fn cancel_firing_once(
        &self,
        id: &FiringId,
        now_ms: i64,
    ) -> Result<Option<CancelOutcome>, StoreError> {
        let mut tx = self.begin().await?;
        let text = id.to_string();
        let Some(firing) = read_firing(&mut tx, &text, self.backend.for_update()).await? else {
            return Ok(None);
        };
        let running = match firing.state {
            state if sources(Transition::Cancel).contains(&state) => {
                sqlx::query(&format!(
                    "UPDATE firings SET state = 'cancelled', error = $2, finished_at = $3 \
                     WHERE id = $1 AND state IN {}",
                    sources_sql(Transition::Cancel)
                ))
                .bind(text.as_str())
                .bind(CANCELLED_BY_OPERATOR)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                self.remove_waiting(&mut tx, &[text.as_str()]).await?;
                self.unhold(&mut tx, &[text.as_str()]).await?;
                None
            }
            FiringState::Executing => {
                let worker: Option<String> =
                    sqlx::query_scalar("SELECT worker_id FROM executing WHERE firing_id = $1")
                        .bind(text.as_str())
                        .fetch_optional(&mut *tx)
                        .await?;
                worker.map(|worker_id| RunningFiring {
                    firing_id: id.clone(),
                    worker_id,
                })
            }
            ended => {
                return Err(StoreError::Conflict(format!(
                    "firing {text} has already ended {ended}; there is nothing to cancel"
                )))
            }
        };
        let firing = read_firing(&mut tx, &text, "")
            .await?
            .ok_or_else(|| StoreError::Internal(format!("firing {text} vanished mid-cancel")))?;
        tx.commit().await?;
        Ok(Some(CancelOutcome { firing, running }))
    }
}

/// Reads one firing (with `lock` appended: a row lock or nothing).
async fn read_firing(tx: &mut Tx, id: &str, lock: &str) -> Result<Option<Firing>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {FIRING_COLUMNS} FROM firings WHERE id = $1{lock}"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    row.as_ref().map(rows::firing).transpose()
}
