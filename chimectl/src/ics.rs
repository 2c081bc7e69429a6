//! Reading an iCalendar file (RFC 5545) into the dates of a Chime calendar,
//! for `chimectl calendar import`.
//!
//! Only all-day events count (`DTSTART;VALUE=DATE`): a holiday file is made
//! of them, and a timed event does not make a whole date one to skip. An
//! event covers its start date up to its exclusive `DTEND` (one day without
//! one). Recurring events (`RRULE`) are imported as their first occurrence
//! and reported: expanding them is not supported.

use chime_common::calendars::MAX_DATES;
use chrono::NaiveDate;
use icalendar::{Component, DatePerhapsTime};

/// What an iCalendar file gives a calendar.
#[derive(Debug, PartialEq)]
pub struct Imported {
    /// The dates of its all-day events, sorted, each once.
    pub dates: Vec<NaiveDate>,
    /// What was left out or only partly taken, one line each.
    pub warnings: Vec<String>,
}

/// The all-day dates of the iCalendar text `text`; an error (a line for the
/// user) when it does not parse, holds no all-day event, or would make more
/// dates than a calendar may hold.
pub fn all_day_dates(text: &str) -> Result<Imported, String> {
    let calendar: icalendar::Calendar = text
        .parse()
        .map_err(|e| format!("not an iCalendar file: {e}"))?;
    let mut dates = Vec::new();
    let mut warnings = Vec::new();
    let mut timed = 0usize;
    for event in calendar.events() {
        let name = event
            .get_summary()
            .or_else(|| event.get_uid())
            .unwrap_or("an event without a summary")
            .to_string();
        let Some(DatePerhapsTime::Date(start)) = event.get_start() else {
            timed += 1;
            continue;
        };
        let end = match event.get_end() {
            Some(DatePerhapsTime::Date(end)) if end > start => end,
            Some(DatePerhapsTime::Date(_)) | None => start.succ_opt().unwrap_or(start),
            Some(DatePerhapsTime::DateTime(_)) => {
                warnings.push(format!(
                    "{name}: DTEND is a time, not a date; imported its start date only"
                ));
                start.succ_opt().unwrap_or(start)
            }
        };
        if event.properties().contains_key("RRULE")
            || event.multi_properties().contains_key("RRULE")
        {
            warnings.push(format!(
                "{name}: repeats (RRULE), which import does not expand; imported its first occurrence only"
            ));
        }
        let days = (end - start).num_days();
        if days > MAX_DATES as i64 {
            return Err(format!(
                "{name} spans {days} days; a calendar holds at most {MAX_DATES} dates"
            ));
        }
        dates.extend(start.iter_days().take_while(|d| *d < end));
        // Bounded as it grows: overlapping events count once.
        if dates.len() > MAX_DATES {
            dates.sort_unstable();
            dates.dedup();
            if dates.len() > MAX_DATES {
                return Err(format!(
                    "the file's all-day events cover more than {MAX_DATES} dates, \
                     the most a calendar holds"
                ));
            }
        }
    }
    if timed > 0 {
        warnings.push(format!(
            "{timed} timed event(s) left out: only all-day events (DTSTART;VALUE=DATE) exclude dates"
        ));
    }
    if dates.is_empty() {
        return Err(
            "the file has no all-day events (DTSTART;VALUE=DATE); nothing to import".to_string(),
        );
    }
    dates.sort_unstable();
    dates.dedup();
    Ok(Imported { dates, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ics(events: &str) -> String {
        format!("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{events}END:VCALENDAR\r\n")
    }

    fn date(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn all_day_events_give_their_dates_up_to_the_exclusive_end() {
        let text = ics(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261225\r\n\
             DTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\n\
             BEGIN:VEVENT\r\nUID:2\r\nSUMMARY:New Year\r\nDTSTART;VALUE=DATE:20270101\r\nEND:VEVENT\r\n\
             BEGIN:VEVENT\r\nUID:3\r\nSUMMARY:Boxing Day again\r\nDTSTART;VALUE=DATE:20261226\r\n\
             DTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\n",
        );
        let imported = all_day_dates(&text).unwrap();
        assert_eq!(
            imported.dates,
            [date("2026-12-25"), date("2026-12-26"), date("2027-01-01")]
        );
        assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
    }

    #[test]
    fn timed_and_recurring_events_are_reported() {
        let text = ics(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Standup\r\nDTSTART:20261201T090000Z\r\n\
             DTEND:20261201T091500Z\r\nEND:VEVENT\r\n\
             BEGIN:VEVENT\r\nUID:2\r\nSUMMARY:Founders day\r\nDTSTART;VALUE=DATE:20260301\r\n\
             RRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n",
        );
        let imported = all_day_dates(&text).unwrap();
        assert_eq!(imported.dates, [date("2026-03-01")]);
        assert_eq!(imported.warnings.len(), 2, "{:?}", imported.warnings);
        assert!(
            imported.warnings[0].contains("Founders day") && imported.warnings[0].contains("RRULE")
        );
        assert!(imported.warnings[1].contains("1 timed event"));
    }

    #[test]
    fn files_without_all_day_events_are_refused() {
        let timed = ics("BEGIN:VEVENT\r\nUID:1\r\nDTSTART:20261201T090000Z\r\nEND:VEVENT\r\n");
        let e = all_day_dates(&timed).unwrap_err();
        assert!(e.contains("no all-day events"), "{e}");
        assert!(all_day_dates(&ics(""))
            .unwrap_err()
            .contains("no all-day events"));
        assert!(all_day_dates("hello").is_err());
    }

    #[test]
    fn an_event_spanning_more_than_a_calendar_holds_is_refused() {
        let text = ics(
            "BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Forever\r\nDTSTART;VALUE=DATE:19700101\r\n\
             DTEND;VALUE=DATE:20991231\r\nEND:VEVENT\r\n",
        );
        let e = all_day_dates(&text).unwrap_err();
        assert!(e.contains("Forever") && e.contains("at most 10000"), "{e}");
    }
}
