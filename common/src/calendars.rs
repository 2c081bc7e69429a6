//! Exclusion calendars (`calendars.put`/`get`/`delete`/`list`): named sets
//! of dates and weekdays on which a job that `exclude`s them does not run.
//!
//! A calendar is a set of local dates, not of instants: whether an instant
//! is excluded depends on the date it has in the job's time zone (the cron
//! schedule's `tz`; UTC for other schedules), so one "holidays" calendar
//! serves jobs in every zone.

use crate::bounds::check_time;
use crate::bounds::{check_name, MAX_ID_LEN};
use crate::duration::json_kind;
use crate::error::FieldError;
use chrono::{DateTime, Datelike, NaiveDate, Utc, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most dates one calendar may hold (27 years of every day).
pub const MAX_DATES: usize = 10_000;

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("MON", Weekday::Mon),
    ("TUE", Weekday::Tue),
    ("WED", Weekday::Wed),
    ("THU", Weekday::Thu),
    ("FRI", Weekday::Fri),
    ("SAT", Weekday::Sat),
    ("SUN", Weekday::Sun),
];

/// A calendar as `calendars.put` takes it and every verb returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Calendar {
    pub id: String,
    /// Excluded dates, `YYYY-MM-DD`, sorted, each once.
    pub dates: Vec<NaiveDate>,
    /// Excluded days of every week (`MON` … `SUN`), in that order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weekdays: Vec<String>,
}

impl Calendar {
    /// Parses and checks a `calendars.put` request; every problem is
    /// reported with its field path. Dates are sorted and deduplicated.
    pub fn from_json(value: &Value) -> Result<Calendar, Vec<FieldError>> {
        let Some(obj) = value.as_object() else {
            return Err(vec![FieldError::new(
                "",
                format!(
                    "a calendar must be a JSON object, found {}",
                    json_kind(value)
                ),
            )]);
        };
        let mut errors = Vec::new();
        for key in obj
            .keys()
            .filter(|k| !matches!(k.as_str(), "id" | "dates" | "weekdays"))
        {
            errors.push(FieldError::new(
                key.clone(),
                "unknown field; a calendar has id, dates and weekdays",
            ));
        }
        let id = match obj.get("id") {
            Some(Value::String(id)) => match check_name(id, MAX_ID_LEN) {
                Ok(()) => Some(id.clone()),
                Err(e) => {
                    errors.push(FieldError::new("id", e));
                    None
                }
            },
            None | Some(Value::Null) => {
                errors.push(FieldError::new("id", "is required"));
                None
            }
            Some(other) => {
                errors.push(FieldError::new(
                    "id",
                    format!("expected a string, found {}", json_kind(other)),
                ));
                None
            }
        };
        let mut dates = Vec::new();
        match obj.get("dates").filter(|v| !v.is_null()) {
            None => errors.push(FieldError::new(
                "dates",
                "is required (an empty list excludes by weekdays only)",
            )),
            Some(Value::Array(items)) if items.len() <= MAX_DATES => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_str().map(parse_date) {
                        Some(Ok(d)) => dates.push(d),
                        Some(Err(e)) => errors.push(FieldError::new(format!("dates[{i}]"), e)),
                        None => errors.push(FieldError::new(
                            format!("dates[{i}]"),
                            format!(
                                "expected a date string YYYY-MM-DD, found {}",
                                json_kind(item)
                            ),
                        )),
                    }
                }
            }
            Some(Value::Array(_)) => errors.push(FieldError::new(
                "dates",
                format!("may hold at most {MAX_DATES} dates"),
            )),
            Some(other) => errors.push(FieldError::new(
                "dates",
                format!("expected an array of dates, found {}", json_kind(other)),
            )),
        }
        dates.sort_unstable();
        dates.dedup();
        let mut weekdays = Vec::new();
        match obj.get("weekdays").filter(|v| !v.is_null()) {
            None => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item
                        .as_str()
                        .and_then(|s| WEEKDAYS.iter().find(|(name, _)| *name == s))
                    {
                        Some((name, _)) => weekdays.push(*name),
                        None => errors.push(FieldError::new(
                            format!("weekdays[{i}]"),
                            format!("expected one of MON TUE WED THU FRI SAT SUN, found {item}"),
                        )),
                    }
                }
            }
            Some(other) => errors.push(FieldError::new(
                "weekdays",
                format!(
                    "expected an array such as [\"SAT\", \"SUN\"], found {}",
                    json_kind(other)
                ),
            )),
        }
        // In week order, each once.
        let weekdays: Vec<String> = WEEKDAYS
            .iter()
            .filter(|(name, _)| weekdays.contains(name))
            .map(|(name, _)| name.to_string())
            .collect();
        match id {
            Some(id) if errors.is_empty() => Ok(Calendar {
                id,
                dates,
                weekdays,
            }),
            _ => Err(errors),
        }
    }

    /// Whether the local date `date` is excluded.
    pub fn excludes(&self, date: NaiveDate) -> bool {
        let weekday = WEEKDAYS[date.weekday().num_days_from_monday() as usize].0;
        self.dates.binary_search(&date).is_ok() || self.weekdays.iter().any(|w| w == weekday)
    }
}

/// A `YYYY-MM-DD` date within the years Chime accepts.
pub fn parse_date(text: &str) -> Result<NaiveDate, String> {
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .filter(|_| text.len() == 10)
        .ok_or_else(|| format!("{text:?} is not a date; write YYYY-MM-DD, e.g. \"2026-12-25\""))?;
    match check_time(date.and_time(chrono::NaiveTime::MIN).and_utc()) {
        Some(_) => Err(format!(
            "{text} is out of range; dates from 1970-01-01 to 2099-12-31 are accepted"
        )),
        None => Ok(date),
    }
}

/// The first of `calendars` (in the job's `exclude` order) that excludes
/// the date `instant` has in `tz`.
pub fn excluded_by(calendars: &[Calendar], tz: Tz, instant: DateTime<Utc>) -> Option<&Calendar> {
    let date = instant.with_timezone(&tz).date_naive();
    calendars.iter().find(|c| c.excludes(date))
}

/// `calendars.get` / `calendars.delete` / `calendars.put` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CalendarReply {
    pub calendar: Calendar,
}

/// `calendars.list` reply, by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListCalendarsReply {
    pub calendars: Vec<Calendar>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Vec<String> {
        Calendar::from_json(&v)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn calendars_parse_sorted_and_once() {
        let c = Calendar::from_json(&json!({
            "id": "holidays", "dates": ["2026-12-25", "2026-01-01", "2026-12-25"],
            "weekdays": ["SUN", "SAT", "SUN"]
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"id": "holidays", "dates": ["2026-01-01", "2026-12-25"], "weekdays": ["SAT", "SUN"]})
        );
        let d = |s| parse_date(s).unwrap();
        assert!(c.excludes(d("2026-12-25")));
        assert!(c.excludes(d("2026-05-02")), "a Saturday");
        assert!(!c.excludes(d("2026-05-04")), "a Monday");
    }

    #[test]
    fn bad_calendars_name_each_field() {
        assert_eq!(
            fields(
                json!({"id": "a b", "dates": ["2026-02-30", 5, "2026-1-1", "2100-01-01"],
                "weekdays": ["Sat"], "colour": 1})
            ),
            [
                "colour",
                "id",
                "dates[0]",
                "dates[1]",
                "dates[2]",
                "dates[3]",
                "weekdays[0]"
            ]
        );
        assert_eq!(fields(json!({"id": "x"})), ["dates"]);
        assert_eq!(fields(json!({"dates": []})), ["id"]);
        assert_eq!(fields(json!([])), [""]);
        let many = vec!["2026-01-01"; MAX_DATES + 1];
        assert_eq!(fields(json!({"id": "x", "dates": many})), ["dates"]);
    }

    #[test]
    fn the_local_date_decides() {
        let c = Calendar::from_json(&json!({"id": "xmas", "dates": ["2026-12-25"]})).unwrap();
        let at = |s| crate::duration::parse_time_str(s).unwrap();
        let calendars = [c];
        // 2026-12-25T03:00Z is still the 24th in New York, already the 25th in Tokyo.
        let t = at("2026-12-25T03:00:00Z");
        assert!(excluded_by(&calendars, chrono_tz::America::New_York, t).is_none());
        assert_eq!(
            excluded_by(&calendars, chrono_tz::Asia::Tokyo, t).map(|c| c.id.as_str()),
            Some("xmas")
        );
    }
}
