//! Firings that end without starting: skipped by the overlap policy or a
//! full queue, or
//! failed because they cannot start (refused `already_finished`), or lost
//! because the one worker they were addressed to is gone (`offers.rs`).

use super::error::StoreError;
use super::finish::end_firing;
use super::handle::Store;
use super::locks::Tx;
use chime_common::FiringState;

impl Store {
    /// Skips a waiting firing because its job's limit is reached (others
    /// run, or its queue is full), saying why in `reason`.
    pub(super) async fn skip_for_overlap(
        &self,
        tx: &mut Tx,
        id: &str,
        reason: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        self.end_unstarted(tx, id, FiringState::Skipped, reason, now)
            .await
    }

    /// Fails a waiting firing that cannot start, with `error`.
    pub(super) async fn fail_unstarted(
        &self,
        tx: &mut Tx,
        id: &str,
        error: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        self.end_unstarted(tx, id, FiringState::Failed, error, now)
            .await?;
        self.record_ends(tx, &[id]).await
    }

    /// Ends a firing that never started, in a final `state`, with `error`.
    pub(super) async fn end_unstarted(
        &self,
        tx: &mut Tx,
        id: &str,
        state: FiringState,
        error: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        end_firing(tx, id, state, Some(error), None, now).await?;
        self.unhold(tx, &[id]).await?;
        self.remove_waiting(tx, &[id]).await
    }
}
