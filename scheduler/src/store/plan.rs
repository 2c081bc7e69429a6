//! Which instants of one job a slice stages, skips or leaves for later: the
//! misfire policies as a pure function of the schedule, so they are tested
//! without a database.

use chime_common::Misfire;

/// Misfired instants enumerated one by one per job and call; a longer run is
/// jumped over (see [`plan`]).
pub(crate) const SCAN_LIMIT: u64 = 100_000;

/// Instants at or after the misfire cutoff staged per job and transaction; a
/// job with more stays due and is continued in the next transaction.
pub(crate) const MAX_INSTANTS_PER_JOB: usize = 10_000;

/// One job's situation, in UTC milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanInput {
    /// The job's `next_fire_at`: its first instant not yet staged.
    pub first: i64,
    /// The present.
    pub now: i64,
    /// `now - misfire_threshold`: instants before this are misfired.
    pub cutoff: i64,
    /// The slice end: instants before this are due.
    pub end: i64,
    pub misfire: Misfire,
    /// Bound on staged catch-ups (`fire_all`) and on recorded skips.
    pub max_catch_up: u32,
}

/// The decision for one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `(scheduled_at, due_at)` of each firing to stage, in order.
    pub staged: Vec<(i64, i64)>,
    /// Misfired instants to record as `skipped` (at most `max_catch_up`).
    pub skipped: Vec<i64>,
    /// Skipped instants, recorded or not.
    pub skipped_total: u64,
    /// Instants found misfired.
    pub misfired: u64,
    /// The job's new `next_fire_at`; `None` when the schedule is exhausted.
    pub next: Option<i64>,
}

impl Plan {
    fn skip(&mut self, t: i64, cap: usize) {
        self.skipped_total += 1;
        if self.skipped.len() < cap {
            self.skipped.push(t);
        }
    }
}

/// Plans one job. `next(t)` is the schedule's first instant strictly after
/// millisecond `t`.
///
/// The run of misfired instants (those before `cutoff`) is decided whole,
/// even where it reaches past the slice end, so `fire_once` fires once per
/// gap rather than once per slice of it: `skip` records each as skipped,
/// `fire_once` stages the last (due now) and skips the others, `fire_all`
/// stages the first `max_catch_up` (due now, in order) and skips the rest.
/// Only the first `max_catch_up` skips are recorded; all are counted. A run
/// longer than [`SCAN_LIMIT`] is enumerated that far, then jumped to its last
/// instant; the instants jumped over are skipped and not counted.
///
/// Then the instants from `cutoff` up to the slice end are staged, due at
/// their instant, at most [`MAX_INSTANTS_PER_JOB`] of them; `next` is the
/// first instant not planned.
pub(crate) fn plan(input: &PlanInput, next: impl Fn(i64) -> Option<i64>) -> Plan {
    // A schedule must move forward; one that does not is treated as exhausted
    // rather than looping.
    let next = |t: i64| next(t).filter(|n| *n > t);
    let cap = input.max_catch_up as usize;
    let mut plan = Plan::default();
    let mut t = Some(input.first);

    let mut last_misfired: Option<i64> = None;
    let mut scanned: u64 = 0;
    while let Some(x) = t.filter(|x| *x < input.cutoff) {
        plan.misfired += 1;
        scanned += 1;
        match input.misfire {
            Misfire::Skip => plan.skip(x, cap),
            Misfire::FireAll if plan.staged.len() < cap => plan.staged.push((x, input.now)),
            Misfire::FireAll => plan.skip(x, cap),
            Misfire::FireOnce => {
                if let Some(previous) = last_misfired.replace(x) {
                    plan.skip(previous, cap);
                }
            }
        }
        t = next(x);
        if scanned == SCAN_LIMIT {
            if let Some(y) = t.filter(|y| *y < input.cutoff) {
                t = Some(last_before(y, input.cutoff, &next));
            }
        }
    }
    if let Some(x) = last_misfired {
        plan.staged.push((x, input.now));
    }

    let mut on_time = 0;
    while let Some(x) = t.filter(|x| *x < input.end) {
        if on_time == MAX_INSTANTS_PER_JOB {
            break;
        }
        plan.staged.push((x, x));
        on_time += 1;
        t = next(x);
    }
    plan.next = t;
    plan
}

/// The last instant before `bound`, given an instant `from < bound`: probes
/// windows before `bound` that double in length, then walks the first
/// window that holds an instant.
fn last_before(from: i64, bound: i64, next: &impl Fn(i64) -> Option<i64>) -> i64 {
    let walk = |start: i64| {
        let mut last = start;
        let mut steps = 0;
        while let Some(n) = next(last).filter(|n| *n < bound) {
            last = n;
            steps += 1;
            if steps == SCAN_LIMIT {
                break;
            }
        }
        last
    };
    let mut width: i64 = 1000;
    loop {
        let start = bound.saturating_sub(width);
        if start <= from {
            return walk(from);
        }
        if let Some(x) = next(start - 1).filter(|x| *x < bound) {
            return walk(x);
        }
        width = width.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `period` ms from 0, at most up to `until` if given.
    fn every(period: i64, until: Option<i64>) -> impl Fn(i64) -> Option<i64> {
        move |t| {
            let n = if t < 0 { 0 } else { (t / period + 1) * period };
            match until {
                Some(u) if n > u => None,
                _ => Some(n),
            }
        }
    }

    fn input(first: i64, now: i64, end: i64, misfire: Misfire) -> PlanInput {
        PlanInput {
            first,
            now,
            cutoff: now - 60_000,
            end,
            misfire,
            max_catch_up: 100,
        }
    }

    #[test]
    fn on_time_instants_are_staged_at_their_instant() {
        let p = plan(
            &input(1000, 500, 4000, Misfire::FireOnce),
            every(1000, None),
        );
        assert_eq!(p.staged, vec![(1000, 1000), (2000, 2000), (3000, 3000)]);
        assert_eq!(p.next, Some(4000));
        assert_eq!((p.misfired, p.skipped_total), (0, 0));
    }

    #[test]
    fn late_instants_within_the_threshold_are_not_misfires() {
        let p = plan(
            &input(1000, 30_000, 31_000, Misfire::Skip),
            every(1000, None),
        );
        assert_eq!(p.staged.len(), 30);
        assert_eq!(p.misfired, 0);
    }

    #[test]
    fn skip_records_each_misfired_instant() {
        // A ten-minute gap of a 1 s job, now = 600 s, threshold 60 s.
        let p = plan(
            &input(1000, 600_000, 601_000, Misfire::Skip),
            every(1000, None),
        );
        assert_eq!(p.misfired, 539);
        assert_eq!(p.skipped_total, 539);
        assert_eq!(p.skipped.len(), 100);
        assert_eq!(p.skipped[0], 1000);
        assert_eq!(p.staged.first(), Some(&(540_000, 540_000)));
        assert_eq!(p.staged.len(), 61);
        assert_eq!(p.next, Some(601_000));
    }

    #[test]
    fn fire_once_stages_only_the_last_misfired_instant() {
        let p = plan(
            &input(1000, 600_000, 601_000, Misfire::FireOnce),
            every(1000, None),
        );
        assert_eq!(p.misfired, 539);
        assert_eq!(p.skipped_total, 538);
        assert_eq!(p.staged[0], (539_000, 600_000));
        assert_eq!(p.staged[1], (540_000, 540_000));
    }

    #[test]
    fn fire_all_stages_a_bounded_number_in_order() {
        let p = plan(
            &input(1000, 600_000, 601_000, Misfire::FireAll),
            every(1000, None),
        );
        let catch_up: Vec<_> = p
            .staged
            .iter()
            .filter(|(t, due)| *due == 600_000 && *t < 540_000)
            .collect();
        assert_eq!(catch_up.len(), 100);
        assert_eq!(*catch_up[0], (1000, 600_000));
        assert_eq!(*catch_up[99], (100_000, 600_000));
        assert_eq!(p.skipped_total, 439);
        assert_eq!(p.skipped.len(), 100);
        assert_eq!(p.skipped[0], 101_000);
    }

    #[test]
    fn a_gap_reaching_past_the_slice_is_decided_whole() {
        // Staging an old slice [0, 5 s) long after: the whole gap is one misfire run.
        let p = plan(
            &input(1000, 600_000, 5000, Misfire::FireOnce),
            every(1000, None),
        );
        assert_eq!(p.staged, vec![(539_000, 600_000)]);
        assert_eq!(p.next, Some(540_000));
    }

    #[test]
    fn exhausted_schedules_have_no_next_instant() {
        let p = plan(
            &input(1000, 0, 10_000, Misfire::FireOnce),
            every(1000, Some(3000)),
        );
        assert_eq!(p.staged.len(), 3);
        assert_eq!(p.next, None);
    }

    #[test]
    fn very_long_gaps_are_jumped_over() {
        // A 1 ms job stopped for a day: 86.4 million misfired instants.
        let day = 86_400_000;
        let p = plan(
            &input(1, day, day + 1000, Misfire::FireOnce),
            every(1, None),
        );
        assert_eq!(p.misfired, SCAN_LIMIT + 1);
        assert_eq!(p.staged[0], (day - 60_000 - 1, day));
        assert_eq!(p.skipped_total, SCAN_LIMIT);
        // Then the on-time instants, bounded per transaction.
        assert_eq!(p.staged.len(), 1 + MAX_INSTANTS_PER_JOB);
        assert_eq!(p.next, Some(day - 60_000 + MAX_INSTANTS_PER_JOB as i64));
    }

    #[test]
    fn instants_per_job_are_bounded_and_continued() {
        let p = plan(&input(1, 0, 1_000_000, Misfire::FireOnce), every(1, None));
        assert_eq!(p.staged.len(), MAX_INSTANTS_PER_JOB);
        assert_eq!(p.next, Some(MAX_INSTANTS_PER_JOB as i64 + 1));
    }

    #[test]
    fn a_schedule_that_does_not_advance_ends() {
        let p = plan(&input(1000, 0, 10_000, Misfire::FireOnce), Some);
        assert_eq!(p.staged, vec![(1000, 1000)]);
        assert_eq!(p.next, None);
    }

    #[test]
    fn last_before_finds_the_last_instant() {
        let next = every(7, None);
        assert_eq!(last_before(7, 1_000_000, &next), 999_999);
        assert_eq!(last_before(7, 10, &next), 7);
        let sparse = every(3_600_000, None);
        assert_eq!(last_before(3_600_000, 86_400_001, &sparse), 86_400_000);
    }
}
