//! Schedules: when a job fires.
//!
//! A job's `schedule` is validated once into a [`ScheduleSpec`] (the JSON
//! shape, kept for storage and replies) and compiled into a [`Schedule`]
//! whenever firing times are needed. A compiled schedule is a few bit masks
//! and instants, `Copy` inside and free of heap allocations, so the scheduler
//! can compile one for every due job of every time slice.
//!
//! - `spec.rs`: the JSON object and its validation, with field paths.
//! - `masks.rs`: a compiled cron expression, the bit masks the next three
//!   files share.
//! - `cron.rs`: cron text to bit masks: dialects, syntax, error messages, and
//!   why the engine is our own rather than croner's.
//! - `calendar.rs`: the next matching local date and time.
//! - `zone.rs`: local times to instants under the daylight-saving rule,
//!   which `dst.rs` (the job's `dst` policy) decides.
//! - `every.rs`: fixed-rate schedules.
//! - `seed.rs`: the number a job id gives `H` and `jitter`; `jitter.rs`
//!   moves each instant by its share of it.
//! - `fan_in.rs`: the `after` schedule's fields; it compiles to a schedule
//!   without instants (the store fires it when its upstreams succeed).

mod calendar;
mod cron;
mod dst;
mod every;
mod fan_in;
mod jitter;
mod masks;
mod seed;
mod spec;
mod weekday_numbers;
mod zone;

#[cfg(test)]
mod dst_tables;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod syntax_tests;

pub use dst::{DstMark, DstPolicy, Gap, Repeat};
pub use fan_in::MAX_AFTER;
pub use spec::ScheduleSpec;
pub use weekday_numbers::numbered_weekdays;

use crate::duration::format_duration;
use crate::error::FieldError;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use dst::DstRule;
use every::FixedRate;
use jitter::Jitter;
use masks::CronExpr;
use seed::Seed;
use std::time::Duration;

/// A compiled schedule: answers "when next?" without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
    jitter: Option<Jitter>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cron {
        expr: CronExpr,
        tz: Tz,
        dst: DstRule,
    },
    Every(FixedRate),
    At(DateTime<Utc>),
    /// Fan-in: no instants (its upstreams' successes fire it).
    After,
}

/// The job fields besides `schedule` that decide its instants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleOptions<'a> {
    /// The job's id: what `H` and `jitter` draw from.
    pub id: Option<&'a str>,
    /// The daylight-saving policy of a cron schedule; `None`: the v1 rule.
    pub dst: Option<DstPolicy>,
    /// Each instant moves later by a fixed amount below this.
    pub jitter: Option<Duration>,
}

/// An instant and, when a daylight-saving transition moved or doubled its
/// local time, how.
pub type MarkedInstant = (DateTime<Utc>, Option<DstMark>);

impl Schedule {
    /// A schedule alone, with no job around it: no `H`, no jitter, the v1
    /// daylight-saving rule. `anchor` is when the job was put: an `every`
    /// without start_at fires first at anchor + every.
    pub fn compile(spec: &ScheduleSpec, anchor: DateTime<Utc>) -> Result<Schedule, FieldError> {
        Schedule::compile_with(spec, anchor, &ScheduleOptions::default())
    }

    /// A job's schedule. Refuses, naming the field: `H` or a jitter without
    /// `id`, `dst` on a schedule that is not cron, a jitter longer than the
    /// schedule's shortest period ([`Schedule::shortest_period`]).
    pub fn compile_with(
        spec: &ScheduleSpec,
        anchor: DateTime<Utc>,
        options: &ScheduleOptions,
    ) -> Result<Schedule, FieldError> {
        let seed = options.id.map(Seed::of_job);
        let kind = match spec {
            ScheduleSpec::Cron { cron, tz } => {
                let expr = CronExpr::parse_seeded(cron, seed).map_err(|errors| {
                    if errors.iter().any(|e| e == cron::H_NEEDS_ID) {
                        FieldError::new("id", cron::H_NEEDS_ID)
                    } else {
                        FieldError::new("schedule.cron", errors.join("; "))
                    }
                })?;
                Kind::Cron {
                    dst: options.dst.unwrap_or_default().rule(expr.fixed_hours),
                    expr,
                    tz: spec::parse_tz(tz).map_err(|m| FieldError::new("schedule.tz", m))?,
                }
            }
            _ if options.dst.is_some() => {
                return Err(FieldError::new(
                    "dst",
                    "only applies to a cron schedule: fixed-rate and one-off instants \
                     have no local times",
                ))
            }
            ScheduleSpec::Every {
                every,
                start_at,
                end_at,
                count,
            } => Kind::Every(FixedRate::new(*every, *start_at, *end_at, *count, anchor)?),
            ScheduleSpec::At { at } => Kind::At(*at),
            ScheduleSpec::After { .. } => Kind::After,
        };
        let mut schedule = Schedule { kind, jitter: None };
        if let Some(width) = options.jitter.filter(|w| !w.is_zero()) {
            if schedule.kind == Kind::After {
                return Err(FieldError::new(
                    "jitter",
                    "a fan-in (\"after\") schedule has no instants to move",
                ));
            }
            let Some(seed) = seed else {
                return Err(FieldError::new(
                    "id",
                    "a jitter is drawn from the job's id, and there is none: give the job's \"id\"",
                ));
            };
            if let Some(period) = schedule.shortest_period().filter(|p| width > *p) {
                return Err(FieldError::new(
                    "jitter",
                    format!(
                        "{} is longer than the schedule's shortest period, {}",
                        format_duration(width),
                        format_duration(period)
                    ),
                ));
            }
            schedule.jitter = Jitter::new(seed, width);
        }
        Ok(schedule)
    }

    /// The most a jitter may be: for `every`, the period; for cron, the
    /// smallest distance between neighbouring values of the finest of
    /// second, minute and hour that has more than one, else one day;
    /// `None` for a one-off `at` and a fan-in.
    pub fn shortest_period(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Cron { expr, .. } => Some(expr.shortest_step()),
            Kind::Every(rate) => Some(rate.period()),
            Kind::At(_) | Kind::After => None,
        }
    }

    /// The first firing instant strictly after `after`, or None when the
    /// schedule is exhausted.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.next_marked(after).map(|(t, _)| t)
    }

    /// [`Schedule::next_after`] with its daylight-saving mark.
    pub fn next_marked(&self, after: DateTime<Utc>) -> Option<MarkedInstant> {
        match &self.jitter {
            None => self.next_exact(after),
            Some(jitter) => jitter.next_after(after, |t| self.next_exact(t)),
        }
    }

    /// The next instant before any jitter.
    fn next_exact(&self, after: DateTime<Utc>) -> Option<MarkedInstant> {
        match &self.kind {
            Kind::Cron { expr, tz, dst } => zone::next_after(expr, *tz, *dst, after),
            Kind::Every(rate) => rate.next_after(after).map(|t| (t, None)),
            Kind::At(at) => (*at > after).then_some((*at, None)),
            Kind::After => None,
        }
    }

    /// Instants strictly after `after`, increasing.
    pub fn iter_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        self.iter_marked(after).map(|(t, _)| t)
    }

    /// [`Schedule::iter_after`] with daylight-saving marks.
    pub fn iter_marked(&self, after: DateTime<Utc>) -> impl Iterator<Item = MarkedInstant> + '_ {
        std::iter::successors(self.next_marked(after), move |(t, _)| self.next_marked(*t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::{format_time, parse_time_str};
    use serde_json::json;

    fn t(s: &str) -> DateTime<Utc> {
        parse_time_str(s).unwrap()
    }

    fn compile(v: serde_json::Value, anchor: &str) -> Schedule {
        Schedule::compile(&ScheduleSpec::from_json(&v, "schedule").unwrap(), t(anchor)).unwrap()
    }

    #[test]
    fn at_fires_once_strictly_after() {
        let s = compile(
            json!({"at": "2026-05-01T09:00:00Z"}),
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(
            s.next_after(t("2026-04-30T00:00:00Z")),
            Some(t("2026-05-01T09:00:00Z"))
        );
        assert_eq!(s.next_after(t("2026-05-01T09:00:00Z")), None);
        assert_eq!(s.iter_after(t("2020-01-01T00:00:00Z")).count(), 1);
    }

    #[test]
    fn after_has_no_instants_and_no_jitter() {
        let s = compile(json!({"after": ["a", "b"]}), "2026-01-01T00:00:00Z");
        assert_eq!(s.next_after(t("2000-01-01T00:00:00Z")), None);
        assert_eq!(s.shortest_period(), None);
        let spec = ScheduleSpec::from_json(&json!({"after": ["a"]}), "schedule").unwrap();
        let options = ScheduleOptions {
            id: Some("c"),
            jitter: Some(std::time::Duration::from_secs(1)),
            ..ScheduleOptions::default()
        };
        let e = Schedule::compile_with(&spec, Utc::now(), &options).unwrap_err();
        assert_eq!(e.field, "jitter");
    }

    #[test]
    fn every_without_start_at_is_anchored_at_the_put() {
        let s = compile(json!({"every": "30s"}), "2026-01-01T00:00:00Z");
        let got: Vec<String> = s
            .iter_after(t("2026-01-01T00:00:00Z"))
            .take(2)
            .map(format_time)
            .collect();
        assert_eq!(
            got,
            ["2026-01-01T00:00:30.000Z", "2026-01-01T00:01:00.000Z"]
        );
        let s = compile(json!({"every": "1m", "count": 2}), "2026-01-01T00:00:00Z");
        assert_eq!(s.iter_after(t("2000-01-01T00:00:00Z")).count(), 2);
    }

    #[test]
    fn cron_uses_its_time_zone() {
        let s = compile(
            json!({"cron": "0 9 * * MON-FRI", "tz": "America/New_York"}),
            "2026-01-01T00:00:00Z",
        );
        let got: Vec<String> = s
            .iter_after(t("2026-01-02T15:00:00Z"))
            .take(2)
            .map(format_time)
            .collect();
        // Friday 2026-01-02 09:00 EST has passed; next Monday and Tuesday.
        assert_eq!(
            got,
            ["2026-01-05T14:00:00.000Z", "2026-01-06T14:00:00.000Z"]
        );
    }

    #[test]
    fn compile_refuses_invalid_specs_built_without_from_json() {
        let bad = ScheduleSpec::Cron {
            cron: "0 61 * * *".into(),
            tz: "UTC".into(),
        };
        assert_eq!(
            Schedule::compile(&bad, Utc::now()).unwrap_err().field,
            "schedule.cron"
        );
        let bad = ScheduleSpec::Cron {
            cron: "@daily".into(),
            tz: "Nowhere/Land".into(),
        };
        assert_eq!(
            Schedule::compile(&bad, Utc::now()).unwrap_err().field,
            "schedule.tz"
        );
        let bad = ScheduleSpec::Every {
            every: std::time::Duration::ZERO,
            start_at: None,
            end_at: None,
            count: None,
        };
        assert_eq!(
            Schedule::compile(&bad, Utc::now()).unwrap_err().field,
            "schedule.every"
        );
    }

    /// Pearson's chi-square of `counts` against equal expectations.
    fn chi_square(counts: &[u32]) -> f64 {
        let total: u32 = counts.iter().sum();
        let expected = f64::from(total) / counts.len() as f64;
        counts
            .iter()
            .map(|c| (f64::from(*c) - expected).powi(2) / expected)
            .sum()
    }

    fn job_schedule(cron: &str, id: &str, jitter: Option<&str>) -> Schedule {
        let spec = ScheduleSpec::from_json(&json!({"cron": cron}), "schedule").unwrap();
        let options = ScheduleOptions {
            id: Some(id),
            jitter: jitter.map(|j| crate::duration::parse_duration(&json!(j)).unwrap()),
            ..ScheduleOptions::default()
        };
        Schedule::compile_with(&spec, t("2026-01-01T00:00:00Z"), &options).unwrap()
    }

    #[test]
    fn a_thousand_h_jobs_spread_over_the_day() {
        let from = t("2026-04-30T23:59:59Z");
        let day = t("2026-05-01T00:00:00Z");
        let mut hours = [0u32; 24];
        let mut quarters = [0u32; 4];
        for i in 0..1000 {
            let id = format!("report-{i}");
            let s = job_schedule("H H * * *", &id, None);
            let first = s.next_after(from).unwrap();
            assert!(first >= day && first - day < chrono::TimeDelta::days(1));
            // Daily at the same time, and the same instants when compiled again.
            let again = job_schedule("H H * * *", &id, None);
            assert_eq!(
                s.iter_after(from).take(3).collect::<Vec<_>>(),
                again.iter_after(from).take(3).collect::<Vec<_>>()
            );
            assert_eq!(
                s.next_after(first),
                Some(first + chrono::TimeDelta::days(1))
            );
            let minute = (first - day).num_minutes() as usize;
            hours[minute / 60] += 1;
            quarters[minute / 360] += 1;
        }
        // 23 degrees of freedom: 49.7 is the 0.1% critical value.
        assert!(chi_square(&hours) < 49.7, "{hours:?}");
        for q in quarters {
            assert!(
                (235..=265).contains(&q),
                "a quarter of the day holds {q} of 1000: {quarters:?}"
            );
        }
    }

    #[test]
    fn jitter_spreads_a_thousand_daily_jobs_over_the_hour() {
        let from = t("2026-04-30T23:59:59Z");
        let mut minutes = [0u32; 60];
        for i in 0..1000 {
            let id = format!("sync-{i}");
            let s = job_schedule("@daily", &id, Some("1h"));
            let first = s.next_after(from).unwrap();
            let late = first - t("2026-05-01T00:00:00Z");
            assert!(late >= chrono::TimeDelta::zero() && late < chrono::TimeDelta::hours(1));
            assert_eq!(
                first,
                job_schedule("@daily", &id, Some("1h"))
                    .next_after(from)
                    .unwrap()
            );
            minutes[late.num_minutes() as usize] += 1;
        }
        // 59 degrees of freedom: 95.8 is the 0.1% critical value.
        assert!(chi_square(&minutes) < 95.8, "{minutes:?}");
    }

    #[test]
    fn h_and_jitter_need_the_job_id() {
        let spec = ScheduleSpec::from_json(&json!({"cron": "H * * * *"}), "schedule").unwrap();
        assert_eq!(
            Schedule::compile(&spec, Utc::now()).unwrap_err().field,
            "id"
        );
        let spec = ScheduleSpec::from_json(&json!({"every": "1h"}), "schedule").unwrap();
        let options = ScheduleOptions {
            jitter: Some(std::time::Duration::from_secs(60)),
            ..ScheduleOptions::default()
        };
        let e = Schedule::compile_with(&spec, Utc::now(), &options).unwrap_err();
        assert_eq!(e.field, "id");
    }

    #[test]
    fn schedules_are_cheap_plain_values() {
        fn assert_traits<T: Send + Sync + Clone + Copy + 'static>() {}
        assert_traits::<Schedule>();
        assert!(
            std::mem::size_of::<Schedule>() <= 160,
            "{}",
            std::mem::size_of::<Schedule>()
        );
    }

    /// Not a benchmark, a guard: compiling and asking for the next firing must
    /// stay in the microseconds even in a debug build.
    #[test]
    fn compile_and_next_after_are_fast() {
        let spec = ScheduleSpec::from_json(
            &json!({"cron": "0 30 2 * * *", "tz": "Europe/Berlin"}),
            "schedule",
        )
        .unwrap();
        let now = t("2026-03-28T00:00:00Z");
        let started = std::time::Instant::now();
        let n = 2000;
        for i in 0..n {
            let s = Schedule::compile(&spec, now).unwrap();
            assert!(s.next_after(now + chrono::TimeDelta::minutes(i)).is_some());
        }
        let each = started.elapsed() / n as u32;
        assert!(
            each < std::time::Duration::from_millis(1),
            "{each:?} per compile + next_after"
        );
    }
}
