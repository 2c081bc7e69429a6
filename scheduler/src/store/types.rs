//! What the store's operations take and return.

use chime_common::api::DEFAULT_PAGE;
use chime_common::labels::Selector;
use chime_common::protocol::{Alert, Interruption, StartRefusal, StartReply};
use chime_common::{FiringId, FiringState, Job, JobState, Limits};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Settings of [`Store::connect`](super::Store::connect).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Jobs are spread over this many partitions (FNV-1a of the id, modulo
    /// this). Every replica must use the same number; a store opened with a
    /// different number than the database was written with re-partitions the
    /// jobs at connect.
    pub partitions: u32,
    /// Most connections per pool. PostgreSQL has two pools (general, and
    /// the start/finish statements'), so up to twice this many connections;
    /// SQLite: readers (there is one writer).
    pub max_connections: u32,
    /// Limits applied to input the store receives directly (trigger payloads).
    pub limits: Limits,
    /// Whether start and finish first decide a batch's plain items in one
    /// round trip (one statement on PostgreSQL, one command of statements on
    /// SQLite). On by default; off, every item takes the transaction path,
    /// which decides the same: the store suite runs both backends both ways
    /// to show it.
    pub fast_paths: bool,
    /// How many times one instant is run again after faults of the
    /// infrastructure (a lost or silent worker, a fenced or drained run, a
    /// start its worker never ran), without spending the job's
    /// `max_attempts`; past it the firing ends `failed` with an alert, so
    /// a crash loop ends (`--infra-retries`, default 5).
    pub infra_retries: u32,
}

/// The default of [`StoreOptions::infra_retries`].
pub const DEFAULT_INFRA_RETRIES: u32 = 5;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            partitions: 1,
            max_connections: 10,
            limits: Limits::default(),
            fast_paths: true,
            infra_retries: DEFAULT_INFRA_RETRIES,
        }
    }
}

/// `jobs.list` filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFilter {
    pub group: Option<String>,
    pub state: Option<JobState>,
    /// Only jobs whose labels it matches.
    pub selector: Option<Selector>,
    /// Page size, 1 to 1000 (0 means the default, 100).
    pub limit: u32,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter {
            group: None,
            state: None,
            selector: None,
            limit: DEFAULT_PAGE,
            after: None,
        }
    }
}

/// `firings.list` filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringFilter {
    pub job_id: Option<String>,
    pub state: Option<FiringState>,
    /// Page size, 1 to 1000 (0 means the default, 100).
    pub limit: u32,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
}

impl Default for FiringFilter {
    fn default() -> Self {
        FiringFilter {
            job_id: None,
            state: None,
            limit: DEFAULT_PAGE,
            after: None,
        }
    }
}

/// One page of a list, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `after` to get the next page; `None` on the last page.
    pub next: Option<String>,
}

/// A firing running on a worker, to be sent a cancel request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunningFiring {
    pub firing_id: FiringId,
    pub worker_id: String,
}

/// What `delete_job` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Deleted {
    /// The job as it was.
    pub job: Job,
    /// Its firings still running: send each worker a cancel request. Their
    /// rows stay until the worker reports.
    pub cancel: Vec<RunningFiring>,
}

/// Default of [`StageRequest::max_catch_up`].
pub const DEFAULT_MAX_CATCH_UP: u32 = 100;
/// Default of [`StageRequest::max_jobs`].
pub const DEFAULT_MAX_JOBS: u32 = 5000;

/// One slice to stage (ARCHITECTURE.md, "Time slices and firing").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRequest {
    /// The claim key; staged and adopted firings record it as their owner.
    pub slice: String,
    pub partition: u32,
    /// Instants before this are left to earlier slices; `None` stages
    /// everything due before `slice_end`, catch-ups included. Set when a
    /// dense slice is claimed early (see `SlicerConfig::dense_horizon`), so
    /// that claim does not take the jobs of the slices in between.
    pub slice_start: Option<DateTime<Utc>>,
    /// Instants strictly before this are staged.
    pub slice_end: DateTime<Utc>,
    /// The present, against which misfires are judged.
    pub now: DateTime<Utc>,
    /// `misfire: fire_all` stages at most this many missed instants per job
    /// per call; skipped instants are recorded up to this many per job per call.
    pub max_catch_up: u32,
    /// Jobs per transaction.
    pub max_jobs: u32,
    /// Staging spread out in smaller transactions with pauses between
    /// them, so that a slice's writes do not all compete at once with the
    /// starts and finishes in flight; `None` stages as fast as it can.
    pub pace: Option<StagePace>,
}

/// How a slice's staging is spread out: while a pause still ends before
/// `until`, each transaction takes `jobs` jobs and `pause` follows it; then
/// the rest goes at the request's `max_jobs`, without pauses.
///
/// A slice with more than twice the jobs that fit (`jobs` for each pause
/// before `until`) is shared instead: each transaction takes the jobs still
/// due divided by the pauses left, at least `jobs`, so no transaction of
/// thousands is left for the end. Below that the fixed pace is kept: at a
/// steady 1,000/s, sharing every slice's jobs among all its pauses gives a
/// longer tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagePace {
    /// The jobs a paced transaction takes, and the fewest a shared one does.
    pub jobs: u32,
    pub pause: std::time::Duration,
    pub until: std::time::Instant,
}

impl StagePace {
    /// Whether a pause taken now still ends before `until`.
    pub(crate) fn pause_fits(&self) -> bool {
        self.pauses_left(std::time::Instant::now()) > 0
    }

    /// Whether a staging of `due` jobs begun at `now` shares them among the
    /// pauses (see the type's documentation).
    pub(crate) fn shares(&self, now: std::time::Instant, due: u64) -> bool {
        let fits = u128::from(self.jobs).saturating_mul(self.pauses_left(now));
        u128::from(due) > fits.saturating_mul(2)
    }

    /// The jobs for a transaction begun at `now` with `due_left` jobs still
    /// due and shared among the pauses left (zero for the fixed pace);
    /// `None` once no pause fits before `until`.
    pub(crate) fn jobs_at(&self, now: std::time::Instant, due_left: u64) -> Option<u32> {
        let pauses = self.pauses_left(now);
        if pauses == 0 {
            return None;
        }
        let share = u128::from(due_left).div_ceil(pauses);
        Some(u32::try_from(share).unwrap_or(u32::MAX).max(self.jobs))
    }

    /// How many pauses taken one after another from `now` end before `until`.
    fn pauses_left(&self, now: std::time::Instant) -> u128 {
        self.until
            .checked_duration_since(now)
            .map_or(0, |left| left.as_nanos() / self.pause.as_nanos().max(1))
    }
}

impl StageRequest {
    /// A request with the default bounds.
    pub fn new(
        slice: impl Into<String>,
        partition: u32,
        slice_end: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Self {
        StageRequest {
            slice: slice.into(),
            partition,
            slice_start: None,
            slice_end,
            now,
            max_catch_up: DEFAULT_MAX_CATCH_UP,
            max_jobs: DEFAULT_MAX_JOBS,
            pace: None,
        }
    }
}

/// A firing waiting to be published.
#[derive(Debug, Clone, PartialEq)]
pub struct StagedFiring {
    pub id: FiringId,
    pub job_id: String,
    pub group: String,
    pub priority: u8,
    pub handler: String,
    /// The message body: the payload's JSON text as stored, which the
    /// start's digest is taken of. Encoded once, when staged, not at each
    /// publish.
    pub payload: bytes::Bytes,
    pub scheduled_at: DateTime<Utc>,
    /// When to publish it.
    pub due_at: DateTime<Utc>,
    pub attempt: u32,
    pub timeout: Duration,
    /// 0 for the first publish; bumped each time a queued firing is released.
    pub publish_seq: u32,
    /// How many shards its instant has (1: unsharded); its shard is `id.shard`.
    pub shards: u32,
    /// The trace it keeps (a trigger's, or a submitted one-shot job's);
    /// `None`: its trace is derived from its instant
    /// (`chime_common::traceparent::FiringTrace`).
    pub traceparent: Option<chime_common::traceparent::TraceParent>,
    /// When it was written `staged`: where its `staged` span begins.
    pub staged_at: DateTime<Utc>,
    /// The worker a broadcast's share is addressed to, which gets it as an
    /// offer; `None`: published to its group's consumers.
    pub worker_id: Option<String>,
}

/// What `stage_slice` did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageOutcome {
    /// Staged firings this call made the slice owner of, newly staged and
    /// adopted, ordered by `due_at`. (A takeover reads what a slice owns with
    /// `slice_firings`.)
    pub firings: Vec<StagedFiring>,
    /// Instants not fired because of the misfire policy (recorded or only counted).
    pub skipped: u64,
    /// Instants found later than their job's `misfire_threshold`. Exact up to
    /// 100,000 per job and call; a longer gap is jumped over and counts less.
    pub misfired: u64,
    /// Jobs whose instants were enumerated.
    pub jobs: u64,
    /// Due jobs whose stored row could not be read: `(job id, problem)`.
    /// They stay due (and are reported again) until repaired or replaced.
    pub corrupt: Vec<(String, String)>,
    /// Instants this call recorded `skipped` that raise a `missed` alert.
    pub missed: Vec<Missed>,
}

/// An instant recorded `skipped` while staging that raises a `missed` alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Missed {
    pub alert: Alert,
    pub cause: MissCause,
}

/// Why an instant was skipped while staging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissCause {
    /// The misfire policy: it was later than the job's `misfire_threshold`.
    Misfire,
    /// Its local date is in a calendar the job excludes.
    Calendar,
    /// A broadcast with no live worker of its group to go to.
    NoWorker,
}

impl MissCause {
    /// The `cause` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            MissCause::Misfire => "misfire",
            MissCause::Calendar => "calendar",
            MissCause::NoWorker => "no_worker",
        }
    }
}

/// What `start` did with one request: the reply for the worker, and what
/// the scheduler must do about it.
#[derive(Debug, Clone, PartialEq)]
pub struct StartOutcome {
    pub reply: StartReply,
    /// `overlap: replace`: running firings of the job to cancel.
    pub cancel: Vec<RunningFiring>,
    /// Alerts to publish before the reply (a firing that could not start
    /// and ended `failed`).
    pub alerts: Vec<Alert>,
    /// Set when this request started the firing (not when it repeated an
    /// accepted start): how much later than its instant it started.
    pub lateness: Option<Duration>,
    /// The `late` alert of a start later than its job's `max_lateness`,
    /// published after the replies (a late system has many).
    pub late: Option<Alert>,
    /// Set when a limit held the firing back (refusal `queued`).
    pub held: Option<HoldCause>,
    /// Set when a firing a limit had held started: which limit, and how
    /// long since it was first held.
    pub limit_wait: Option<(HoldCause, Duration)>,
}

impl StartOutcome {
    /// Accepted until `deadline` by an earlier request of the same worker.
    pub(crate) fn accepted(deadline: DateTime<Utc>) -> Self {
        StartOutcome {
            reply: StartReply::accepted(deadline),
            cancel: Vec::new(),
            alerts: Vec::new(),
            lateness: None,
            late: None,
            held: None,
            limit_wait: None,
        }
    }

    /// Refused for `why`, nothing else to do.
    pub(crate) fn refused(why: StartRefusal) -> Self {
        StartOutcome {
            reply: StartReply::refused(why),
            cancel: Vec::new(),
            alerts: Vec::new(),
            lateness: None,
            late: None,
            held: None,
            limit_wait: None,
        }
    }
}

/// What `finish` did with one event.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishOutcome {
    pub firing_id: FiringId,
    /// False when the event changed nothing (re-delivered, stale or unknown).
    pub applied: bool,
    /// The firing's state afterwards; `None` if there is no such firing.
    pub state: Option<FiringState>,
    /// The next attempt, staged, and when it is due.
    pub retry: Option<(FiringId, DateTime<Utc>)>,
    /// Firings a limit held, released into the slot this freed: staged
    /// again to be published.
    pub released: Vec<FiringId>,
    /// Firings of the `on_success` jobs.
    pub triggered: Vec<FiringId>,
    pub alerts: Vec<Alert>,
    /// The run was interrupted by the infrastructure (the worker said so):
    /// retried without spending the job's attempts while the
    /// infrastructure budget lasts.
    pub interrupted: Option<Interruption>,
    /// An interrupted run found the infrastructure budget spent.
    pub exhausted: bool,
    /// The firing's group, when `interrupted` (for the requeue metrics).
    pub group: String,
}

impl FinishOutcome {
    /// An event that changed `applied` or not, leaving the firing in `state`
    /// and nothing else to do.
    pub(crate) fn new(firing_id: FiringId, applied: bool, state: Option<FiringState>) -> Self {
        FinishOutcome {
            firing_id,
            applied,
            state,
            retry: None,
            released: Vec::new(),
            triggered: Vec::new(),
            alerts: Vec::new(),
            interrupted: None,
            exhausted: false,
            group: String::new(),
        }
    }
}

/// A row of the executing table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutingRow {
    pub firing_id: FiringId,
    pub job_id: String,
    pub group: String,
    pub worker_id: String,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub deadline_at: DateTime<Utc>,
}

/// What `requeue` did.
#[derive(Debug, Clone, PartialEq)]
pub struct RequeueOutcome {
    /// The attempt that ended `lost`.
    pub lost: FiringId,
    /// The next attempt, staged, and when it is due.
    pub retry: Option<(FiringId, DateTime<Utc>)>,
    /// Firings a limit held, released into the slot this freed: staged
    /// again to be published.
    pub released: Vec<FiringId>,
    /// `firing_failed` when the infrastructure budget is spent,
    /// `firing_lost` when the job is gone.
    pub alert: Option<Alert>,
    /// `repeated_failures`, when the spent budget's failure made the job
    /// reach its `alert_after_failures`.
    pub repeated: Option<Alert>,
    /// The infrastructure budget was spent: the attempt ended `failed`.
    pub exhausted: bool,
}

/// The limit that holds a firing back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldCause {
    /// The job's own `max_concurrent`.
    Job,
    /// The group's `max_concurrent`.
    Group,
    /// The group's `max_per_second`.
    Rate,
}

impl HoldCause {
    /// The stored value, also the `limit` label of the limit metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldCause::Job => "job",
            HoldCause::Group => "group",
            HoldCause::Rate => "rate",
        }
    }

    pub(super) fn parse(stored: &str) -> Option<HoldCause> {
        [HoldCause::Job, HoldCause::Group, HoldCause::Rate]
            .into_iter()
            .find(|c| c.as_str() == stored)
    }

    /// How the API names it in a firing's `held_by`.
    pub fn held_by(self) -> chime_common::HeldBy {
        match self {
            HoldCause::Job => chime_common::HeldBy::JobMaxConcurrent,
            HoldCause::Group => chime_common::HeldBy::GroupMaxConcurrent,
            HoldCause::Rate => chime_common::HeldBy::GroupMaxPerSecond,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StagePace;
    use std::time::{Duration, Instant};

    fn pace(jobs: u32, pause_ms: u64, spread_ms: u64) -> (StagePace, Instant) {
        let now = Instant::now();
        let pace = StagePace {
            jobs,
            pause: Duration::from_millis(pause_ms),
            until: now + Duration::from_millis(spread_ms),
        };
        (pace, now)
    }

    #[test]
    fn the_jobs_due_are_shared_among_the_pauses_left() {
        let (pace, now) = pace(10, 25, 250);
        assert_eq!(pace.jobs_at(now, 1_000), Some(100), "ten pauses left");
        assert_eq!(
            pace.jobs_at(now + Duration::from_millis(150), 600),
            Some(150),
            "four pauses left"
        );
        assert_eq!(pace.jobs_at(now, 1_001), Some(101), "rounded up");
    }

    #[test]
    fn a_transaction_takes_at_least_the_fewest_jobs() {
        let (pace, now) = pace(10, 25, 250);
        assert_eq!(pace.jobs_at(now, 50), Some(10));
        assert_eq!(pace.jobs_at(now, 0), Some(10));
    }

    #[test]
    fn no_pace_once_no_pause_fits() {
        let (pace, now) = pace(10, 25, 250);
        assert_eq!(pace.jobs_at(now + Duration::from_millis(226), 1_000), None);
        assert_eq!(pace.jobs_at(now + Duration::from_secs(1), 1_000), None);
        assert!(!StagePace {
            until: Instant::now(),
            ..pace
        }
        .pause_fits());
    }

    #[test]
    fn only_a_slice_over_twice_what_fits_is_shared() {
        let (pace, now) = pace(100, 25, 250);
        assert!(!pace.shares(now, 2_000), "ten pauses of 100, twice over");
        assert!(pace.shares(now, 2_001));
        let later = now + Duration::from_millis(200);
        assert!(!pace.shares(later, 400), "two pauses left");
        assert!(pace.shares(later, 401));
    }

    #[test]
    fn a_huge_count_saturates() {
        let (pace, now) = pace(10, 1, 1);
        assert_eq!(pace.jobs_at(now, u64::MAX), Some(u32::MAX));
    }
}
