//! Day-of-week numbers in 6- and 7-field cron expressions.
//!
//! Chime reads a 6- or 7-field expression as Quartz's CronExpression does:
//! days of the week 1-7 are SUN-SAT. Spring's `CronExpression`, whose
//! 6-field expressions look the same, numbers them as Unix cron does,
//! 0-7 with 1 = MON, so `0 0 2 * * 1` is a Sunday job here and a Monday
//! job there. Both are valid, so nothing is refused; a put or preview of
//! such an expression is warned, naming the days it means, and names (`MON`)
//! say the same thing under every convention.

use super::ScheduleSpec;
use crate::warning::Warning;

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl ScheduleSpec {
    /// What this schedule likely does not mean, for the field at `path`
    /// (`schedule`): numbered days of the week in a 6- or 7-field cron
    /// expression.
    pub fn warnings(&self, path: &str) -> Vec<Warning> {
        match self {
            ScheduleSpec::Cron { cron, .. } => numbered_weekdays(cron)
                .map(|message| Warning::new(format!("{path}.cron"), message))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// The warning for a 6- or 7-field `expr` whose day-of-week field holds
/// day numbers, naming the days they mean here.
pub fn numbered_weekdays(expr: &str) -> Option<String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let dow = *fields.get(5).filter(|_| matches!(fields.len(), 6 | 7))?;
    let named = named_days(dow)?;
    Some(format!(
        "day-of-week {dow:?} is numbered: 6- and 7-field expressions number days as \
         Quartz does, 1-7 = SUN-SAT, so it means {named}; Spring and Unix cron number \
         them 0-7 with 1 = MON. Write day names ({named}) so the expression reads the \
         same everywhere"
    ))
}

/// `field` with each day number (1-7) written as its name, `None` when it
/// holds none. Numbers after `#` (which occurrence in the month) and `/`
/// (a step) count something else and stay.
fn named_days(field: &str) -> Option<String> {
    let mut named = String::with_capacity(field.len() + 8);
    let mut any = false;
    let mut chars = field.chars().peekable();
    let mut after = None;
    while let Some(c) = chars.next() {
        if !c.is_ascii_digit() {
            named.push(c);
            after = Some(c);
            continue;
        }
        let mut number = String::from(c);
        while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
            number.push(d);
            chars.next();
        }
        let day = number
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=7).contains(n) && !matches!(after, Some('#' | '/')));
        match day {
            Some(n) => {
                named.push_str(DAY_NAMES[n - 1]);
                any = true;
            }
            None => named.push_str(&number),
        }
        after = Some('0');
    }
    any.then_some(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_days_are_named_as_chime_reads_them() {
        for (field, named) in [
            ("1", "SUN"),
            ("2-6", "MON-FRI"),
            ("1,7", "SUN,SAT"),
            ("6#3", "FRI#3"),
            ("5L", "THUL"),
            ("2/2", "MON/2"),
            ("MON-5", "MON-THU"),
        ] {
            assert_eq!(named_days(field).as_deref(), Some(named), "{field}");
        }
        for unnumbered in ["*", "?", "MON-FRI", "L", "*/2", "FRI#3"] {
            assert_eq!(named_days(unnumbered), None, "{unnumbered}");
        }
    }

    #[test]
    fn only_numbered_days_of_six_and_seven_fields_are_warned() {
        let warned = numbered_weekdays("0 0 2 * * 1").unwrap();
        assert!(
            warned.contains("means SUN") && warned.contains("1 = MON"),
            "{warned}"
        );
        assert!(numbered_weekdays("0 0 2 ? * 2-6 2030")
            .unwrap()
            .contains("MON-FRI"));
        // Five fields are Unix cron's own numbering; names and no day
        // numbers read the same everywhere.
        for quiet in [
            "0 2 * * 1",
            "0 0 2 * * MON",
            "0 0 2 * * *",
            "0 0 2 ? * MON-FRI 2030",
            "@weekly",
            "0 0 2 1 * ?",
        ] {
            assert_eq!(numbered_weekdays(quiet), None, "{quiet}");
        }
    }

    #[test]
    fn a_cron_schedule_warns_at_its_cron_field() {
        let spec = ScheduleSpec::from_json(
            &serde_json::json!({"cron": "0 0 2 * * 1", "tz": "Europe/Berlin"}),
            "schedule",
        )
        .unwrap();
        let warnings = spec.warnings("schedule");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].field, "schedule.cron");
        let every = ScheduleSpec::from_json(&serde_json::json!({"every": "1m"}), "schedule");
        assert!(every.unwrap().warnings("schedule").is_empty());
    }
}
