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
//! - `zone.rs`: local times to instants under the daylight-saving rule.
//! - `every.rs`: fixed-rate schedules.

mod calendar;
mod cron;
mod every;
mod masks;
mod spec;
mod zone;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod syntax_tests;

pub use spec::ScheduleSpec;

use crate::error::FieldError;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use every::FixedRate;
use masks::CronExpr;

/// A compiled schedule: answers "when next?" without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cron { expr: CronExpr, tz: Tz },
    Every(FixedRate),
    At(DateTime<Utc>),
}

impl Schedule {
    /// `anchor` is when the job was put: an `every` without start_at fires
    /// first at anchor + every.
    pub fn compile(spec: &ScheduleSpec, anchor: DateTime<Utc>) -> Result<Schedule, FieldError> {
        let kind = match spec {
            ScheduleSpec::Cron { cron, tz } => Kind::Cron {
                expr: CronExpr::parse(cron)
                    .map_err(|errors| FieldError::new("schedule.cron", errors.join("; ")))?,
                tz: spec::parse_tz(tz).map_err(|m| FieldError::new("schedule.tz", m))?,
            },
            ScheduleSpec::Every {
                every,
                start_at,
                end_at,
                count,
            } => Kind::Every(FixedRate::new(*every, *start_at, *end_at, *count, anchor)?),
            ScheduleSpec::At { at } => Kind::At(*at),
        };
        Ok(Schedule { kind })
    }

    /// The first firing instant strictly after `after`, or None when the
    /// schedule is exhausted.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Cron { expr, tz } => zone::next_after(expr, *tz, after),
            Kind::Every(rate) => rate.next_after(after),
            Kind::At(at) => (*at > after).then_some(*at),
        }
    }

    /// Instants strictly after `after`, increasing.
    pub fn iter_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), move |t| self.next_after(*t))
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

    #[test]
    fn schedules_are_cheap_plain_values() {
        fn assert_traits<T: Send + Sync + Clone + Copy + 'static>() {}
        assert_traits::<Schedule>();
        assert!(
            std::mem::size_of::<Schedule>() <= 128,
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
