//! Chime's durable state: jobs, firings, the executing table, held firings.
//!
//! # One implementation, two databases
//!
//! [`Store`] is a single implementation over sqlx's `Any` driver. What the
//! two databases do differently (row locks, how a write transaction begins,
//! how a JSON batch is expanded into rows, the pools, the migrations, the
//! writes PostgreSQL combines into one statement) lives behind the seam in
//! `dialect/`, one file per backend. Every other statement, and all of the
//! logic around them (misfire planning, overlap, limits, retries, alerts,
//! releases) exists once: a full implementation per backend would have
//! duplicated that logic, or every SQL text, for two databases that accept
//! the same SQL.
//!
//! # Layout: one file per firing transition
//!
//! `states.rs` states the firing state machine (a table of every state and
//! transition). Each transition is one file: `stage.rs`, `publish.rs`,
//! `start.rs`, `skip.rs` (skipped or failed without starting), `hold.rs`
//! (held back by a concurrency limit, and released), `finish.rs`, `retry.rs`, `requeue.rs`
//! (lost), `cancel.rs` (an operator's cancel). `locks.rs` reads and locks what they decide on; `waiting.rs` and
//! `executing.rs` keep the two small tables that say which firings wait and
//! which run. Jobs are `jobs.rs`, `dependencies.rs` (cycles through
//! `on_success` and `after`), `fan_in.rs` (what counted towards a fan-in
//! schedule) and `plan.rs` (misfire planning); `outcomes.rs` each job's
//! newest succeeded and failed end; `calendars.rs` keeps the
//! exclusion calendars staging applies; `groups.rs` the limits of whole
//! groups; `traces.rs` reads the traces stored with firings for the spans
//! the scheduler exports.
//!
//! The floors, bottom up: `error.rs` and `dialect/` (what the two databases
//! do differently) know nothing of the rest; `values.rs` (milliseconds, JSON
//! batches, typed column reads) and `handle.rs` (the [`Store`] handle, its
//! pools, transactions and retries) sit on them; `states.rs`,
//! `conditions.rs` (SQL conditions the lock query and the fast paths share),
//! `schedule.rs`, `rows.rs` and `locks.rs` above; the transitions on top. No
//! file imports from this one, which only names the modules and what the
//! rest of the scheduler may use.
//!
//! Batches travel as one JSON parameter (`json_to_recordset` on PostgreSQL,
//! `json_each` on SQLite) rather than as arrays for `UNNEST`, which `Any`
//! cannot bind: staging a slice of N firings is a handful of statements,
//! whatever N is. Instants are milliseconds inside the store, converted once
//! where an operation takes or returns a `DateTime`.
//!
//! # Storage
//!
//! Migrations are embedded and applied by [`Store::connect`]; on PostgreSQL
//! sqlx's migrator holds an advisory lock, so replicas starting together are
//! safe. Instants are `BIGINT` UTC milliseconds; the API uses
//! `DateTime<Utc>` (sub-millisecond parts are dropped on the way in).
//!
//! SQLite runs in WAL mode with a busy timeout and foreign keys on. It has one
//! writer, so the store keeps a one-connection write pool whose transactions
//! begin `IMMEDIATE`, and a separate pool of readers.
//!
//! # Partitions
//!
//! A job's partition is the 32-bit FNV-1a hash of its id's UTF-8 bytes
//! (offset basis 2166136261, prime 16777619) modulo [`StoreOptions::partitions`],
//! computed when the job is put and stored with it and with its waiting
//! firings (`waiting.rs`). All replicas must agree on the partition count;
//! when a store is opened with a count different from the one the database
//! was last written with, it re-partitions every job and unadopted staged
//! firing at connect.
//!
//! # Bad rows
//!
//! A row that cannot be read back (a spec that does not parse, an unknown state)
//! is reported as [`StoreError::Corrupt`] naming its id; nothing panics on
//! stored data. Reads that answer a request (`get_job`, the lists, `delete_job`,
//! `set_paused`, `trigger`) fail with it. Scans that drive the scheduler must
//! not stall on one bad row: `stage_slice` reports corrupt due jobs in
//! [`StageOutcome::corrupt`] and stages the others; `slice_firings`,
//! `overdue_staged`, `executing` and `unstarted` log and leave corrupt rows
//! out; `start`, `finish` and `requeue` treat an unreadable firing as unknown
//! and an unreadable job as deleted (logged).

mod audience;
mod audit;
mod backfill;
mod calendars;
mod cancel;
mod clock;
mod conditions;
mod dependencies;
mod dialect;
mod error;
mod executing;
mod fan_in;
mod finish;
mod groups;
mod handle;
mod held;
mod history;
mod hold;
mod jobs;
mod lateness;
mod listing;
mod locks;
mod offers;
mod outcomes;
mod pause;
mod plan;
mod publish;
mod republish;
mod requeue;
mod retry;
mod rows;
mod schedule;
mod selection;
mod sessions;
mod skip;
mod spec_cache;
mod stage;
mod start;
mod states;
#[cfg(test)]
pub(crate) mod test_stores;
mod traces;
mod types;
mod values;
mod waiting;

pub use audience::Audiences;
pub use audit::{AuditFilter, AuditRecord};
pub use backfill::Backfilled;
pub use cancel::{CancelOutcome, CANCELLED_BY_OPERATOR};
pub use dialect::Backend;
pub use error::StoreError;
pub use groups::MAX_GROUPS;
pub use handle::Store;
pub use history::{Activity, Pruned, RetentionCursor};
pub use outcomes::{JobOutcome, JobOutcomes};
pub use pause::{JobSelection, Pause, MAX_PAUSED_AT_ONCE};
pub use publish::AckedFiring;
pub use republish::PublishedFiring;
pub use retry::RetryDelay;
pub use sessions::Session;
pub use traces::TracedFiring;
pub use types::{
    Deleted, ExecutingRow, FinishOutcome, FiringFilter, HoldCause, JobFilter, MissCause, Missed,
    Page, RequeueOutcome, RunningFiring, StageOutcome, StagePace, StageRequest, StagedFiring,
    StartOutcome, StoreOptions, DEFAULT_INFRA_RETRIES, DEFAULT_MAX_CATCH_UP, DEFAULT_MAX_JOBS,
};
pub use values::fnv1a;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
    }
}
