//! `jobs.preview` worked out: the instants a job with this schedule and
//! these time rules would fire at, with what moved, doubled or excluded
//! them. The scheduler and `chimectl preview` (offline) both answer
//! through here, so they accept, refuse and mark the same.

use crate::api::{PreviewMark, PreviewReply, PreviewRequest};
use crate::bounds::check_time;
use crate::bounds::{check_name, MAX_ID_LEN};
use crate::calendars::{excluded_by, Calendar};
use crate::duration::format_time;
use crate::error::ApiError;
use crate::schedule::{MarkedInstant, Schedule, ScheduleSpec};
use crate::time_rules::TimeRules;
use crate::warning::Warning;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::Map;

/// Instants previewed when the request gives no `count`.
pub const DEFAULT_COUNT: u32 = 10;

/// A checked preview: its instants, and the calendars still to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    pub instants: Vec<MarkedInstant>,
    /// Where calendar dates are read: the cron schedule's zone, else UTC.
    pub tz: Tz,
    /// The calendar ids to exclude, in the request's order.
    pub exclude: Vec<String>,
    /// What the schedule likely does not mean ([`ScheduleSpec::warnings`]).
    pub warnings: Vec<Warning>,
}

impl Preview {
    /// Checks `req` and computes at most `max_count` instants after its
    /// `from` (default `now`). Refusals name the field, as `jobs.put` does.
    pub fn compute(
        req: &PreviewRequest,
        now: DateTime<Utc>,
        max_count: u32,
    ) -> Result<Preview, ApiError> {
        let count = req.count.unwrap_or(DEFAULT_COUNT);
        if count == 0 || count > max_count {
            return Err(ApiError::invalid(
                "count",
                format!("must be from 1 to {max_count}"),
            ));
        }
        if let Some(id) = &req.id {
            check_name(id, MAX_ID_LEN).map_err(|e| ApiError::invalid("id", e))?;
        }
        let spec = ScheduleSpec::from_json(&req.schedule, "schedule")
            .map_err(ApiError::from_field_errors)?;
        if spec.is_fan_in() {
            // Refused rather than answered with no times: an empty list
            // reads as "this schedule never fires".
            return Err(ApiError::invalid(
                "schedule.after",
                "a fan-in schedule has no instants to preview: it fires once every \
                 listed job has succeeded since it last fired",
            ));
        }
        let mut fields = Map::new();
        for (key, value) in [
            ("dst", &req.dst),
            ("jitter", &req.jitter),
            ("exclude", &req.exclude),
        ] {
            if let Some(v) = value {
                fields.insert(key.to_string(), v.clone());
            }
        }
        let rules = TimeRules::from_json(&fields).map_err(ApiError::from_field_errors)?;
        let from = req.from.unwrap_or(now);
        if let Some(e) = check_time(from) {
            return Err(ApiError::invalid("from", e));
        }
        let schedule =
            Schedule::compile_with(&spec, from, &rules.schedule_options(req.id.as_deref()))
                .map_err(|e| ApiError::from_field_errors(vec![e]))?;
        Ok(Preview {
            instants: schedule.iter_marked(from).take(count as usize).collect(),
            tz: spec.time_zone(),
            exclude: rules.exclude,
            warnings: spec.warnings("schedule"),
        })
    }

    /// The reply, with `calendars` (those of `exclude` that exist) applied;
    /// `marks` only when some instant has one.
    pub fn reply(&self, calendars: &[Calendar]) -> PreviewReply {
        let (times, marks) = self
            .instants
            .iter()
            .map(|(t, dst)| {
                let excluded = excluded_by(calendars, self.tz, *t).map(|c| c.id.clone());
                (format_time(*t), PreviewMark::of(*dst, excluded))
            })
            .unzip();
        let marks: Vec<Option<PreviewMark>> = marks;
        // Nothing to mark: the reply is v1's `{"times"}`.
        let marks = if marks.iter().all(Option::is_none) {
            Vec::new()
        } else {
            marks
        };
        PreviewReply {
            times,
            marks,
            warnings: self.warnings.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fan_in_schedule_is_refused_saying_why() {
        let req = PreviewRequest {
            schedule: json!({"after": ["a", "b"]}),
            from: None,
            count: None,
            id: None,
            dst: None,
            jitter: None,
            exclude: None,
        };
        let e = Preview::compute(&req, Utc::now(), 100).unwrap_err();
        let text = serde_json::to_string(&e).unwrap();
        assert!(
            text.contains("schedule.after") && text.contains("no instants"),
            "{text}"
        );
    }

    #[test]
    fn numbered_weekdays_of_six_fields_are_warned_in_the_reply() {
        let req = PreviewRequest {
            schedule: json!({"cron": "0 0 2 * * 1"}),
            from: Some("2026-03-02T00:00:00Z".parse().unwrap()),
            count: Some(1),
            ..PreviewRequest::default()
        };
        let reply = Preview::compute(&req, Utc::now(), 10).unwrap().reply(&[]);
        // 2026-03-08 is a Sunday.
        assert_eq!(reply.times, ["2026-03-08T02:00:00.000Z"]);
        assert_eq!(reply.warnings.len(), 1);
        assert_eq!(reply.warnings[0].field, "schedule.cron");
        assert!(reply.warnings[0].message.contains("means SUN"));
        let json = serde_json::to_value(&reply).unwrap();
        assert_eq!(json["warnings"][0]["field"], "schedule.cron");
        let named = PreviewRequest {
            schedule: json!({"cron": "0 0 2 * * SUN"}),
            ..req
        };
        let reply = Preview::compute(&named, Utc::now(), 10).unwrap().reply(&[]);
        assert!(reply.warnings.is_empty());
        assert!(serde_json::to_value(&reply)
            .unwrap()
            .get("warnings")
            .is_none());
    }
}
