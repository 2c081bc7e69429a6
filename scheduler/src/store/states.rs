//! The firing state machine: every state a firing can be in, and every
//! transition between them, with the one function that makes each.
//!
//! | transition | from                    | to                                 | function (file)                          |
//! |------------|-------------------------|------------------------------------|------------------------------------------|
//! | stage      | (new)                   | `staged`, or `skipped` (misfire, calendar) | `Store::stage_slice` (`stage.rs`), `Store::trigger` (`jobs.rs`), `Store::backfill` (`backfill.rs`) |
//! | publish    | `staged`                | `published`                        | `Store::record_published` (`publish.rs`) |
//! | start      | `staged`, `published`   | `executing`                        | `Store::start` (`start.rs`)              |
//! | refuse     | `staged`, `published`   | `failed` (unstartable timeout; every copy gone unstarted) | `Store::fail_unstarted` (`skip.rs`), `Store::fail_unstarted_published` (`republish.rs`) |
//! | skip       | `staged`, `published`   | `skipped` (overlap `forbid`, a full queue) | `Store::skip_for_overlap` (`skip.rs`) |
//! | hold       | `staged`, `published`   | unchanged, held in `held`          | `Store::hold` (`hold.rs`)                |
//! | release    | `staged`, `published`   | `staged` (unadopted, due now)      | `Store::release_held` (`hold.rs`)        |
//! | finish     | `executing`             | `succeeded`, `failed`, `cancelled` | `Store::finish` (`finish.rs`)            |
//! | retry      | `failed`, `lost`        | next attempt `staged`              | `Store::retry` (`retry.rs`)              |
//! | requeue    | `executing`             | `lost` (worker gone, deadline)     | `Store::requeue` (`requeue.rs`)          |
//! | cancel     | `staged`, `published`   | `cancelled` (job deleted, operator) | `Store::delete_job` (`jobs.rs`), `Store::cancel_firing` (`cancel.rs`) |
//!
//! `succeeded`, `failed`, `lost`, `skipped` and `cancelled` are final: no
//! transition leaves them. A retry does not change the failed or lost
//! attempt; it stages the next one, a firing of its own. A firing has a
//! `waiting` row exactly while it is `staged` or `published` (`waiting.rs`),
//! and an `executing` row exactly while it is `executing` (`executing.rs`).
//!
//! The stored values are [`FiringState::as_str`]. `TRANSITIONS` is this
//! table as data: the statements of a transition take the states it may
//! leave from it ([`sources_sql`]), and the tests check it against
//! `FiringState::is_final`.

use chime_common::FiringState;
use FiringState::*;

/// A transition of the table above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    Stage,
    Publish,
    Start,
    Refuse,
    Skip,
    Hold,
    Release,
    Finish,
    Retry,
    Requeue,
    Cancel,
    Withdraw,
}

/// A firing waits to start (and has a `waiting` row) in these states.
const WAITING: &[FiringState] = &[Staged, Published];

/// Every transition with the states it leaves and the states it reaches
/// (`Stage` and `Retry` make a new firing, so their `from` is what they
/// start from: nothing, or the attempt that ended).
const TRANSITIONS: &[(Transition, &[FiringState], &[FiringState])] = &[
    (Transition::Stage, &[], &[Staged, Skipped]),
    (Transition::Publish, &[Staged], &[Published]),
    (Transition::Start, WAITING, &[Executing]),
    (Transition::Refuse, WAITING, &[Failed]),
    (Transition::Skip, WAITING, &[Skipped]),
    (Transition::Hold, WAITING, WAITING),
    (Transition::Release, WAITING, &[Staged]),
    (
        Transition::Finish,
        &[Executing],
        &[Succeeded, Failed, Cancelled],
    ),
    (Transition::Retry, &[Failed, Lost], &[Staged]),
    (Transition::Requeue, &[Executing], &[Lost]),
    (Transition::Cancel, WAITING, &[Cancelled]),
    // An addressed firing whose worker is gone, or never took it.
    (Transition::Withdraw, WAITING, &[Lost]),
];

/// The states `transition` leaves.
pub(crate) fn sources(transition: Transition) -> &'static [FiringState] {
    TRANSITIONS
        .iter()
        .find(|(t, _, _)| *t == transition)
        .map_or(&[], |(_, from, _)| *from)
}

/// [`sources`] as an SQL list, for `state IN …`: the statements of a
/// transition change a firing only in the states this table lets it leave.
pub(crate) fn sources_sql(transition: Transition) -> String {
    let names: Vec<String> = sources(transition)
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!("({})", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether some transition other than a retry (which makes a new
    /// firing) moves a firing from `from` to `to`.
    fn moves(from: FiringState, to: FiringState) -> bool {
        TRANSITIONS.iter().any(|(transition, sources, targets)| {
            *transition != Transition::Retry && sources.contains(&from) && targets.contains(&to)
        })
    }

    #[test]
    fn final_states_are_never_left() {
        for from in FiringState::ALL.into_iter().filter(|s| s.is_final()) {
            for to in FiringState::ALL {
                assert!(!moves(from, to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn every_state_is_reached_and_every_live_state_left() {
        for state in FiringState::ALL {
            assert!(
                TRANSITIONS.iter().any(|(_, _, to)| to.contains(&state)),
                "nothing reaches {state}"
            );
            if !state.is_final() {
                assert!(
                    FiringState::ALL
                        .into_iter()
                        .any(|to| to != state && moves(state, to)),
                    "nothing leaves {state}"
                );
            }
        }
    }

    #[test]
    fn sources_read_as_sql_lists() {
        assert_eq!(sources_sql(Transition::Start), "('staged', 'published')");
        assert_eq!(sources_sql(Transition::Publish), "('staged')");
        assert_eq!(sources(Transition::Stage), &[] as &[FiringState]);
    }
}
