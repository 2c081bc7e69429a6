//! `chimectl calendar`: the exclusion calendars jobs name in `exclude`
//! (`calendars.*` verbs), put from dates on the command line or imported
//! from an iCalendar file's all-day events.

use crate::api::api_failure;
use crate::ics::all_day_dates;
use crate::table::printable;
use crate::Failure;
use anyhow::Context as _;
use chime_common::calendars::{Calendar, CalendarReply, ListCalendarsReply};
use chime_common::client::Client;
use clap::Subcommand;
use serde_json::{json, Value};

/// The calendar subcommands.
#[derive(Debug, Subcommand)]
pub enum CalendarCommand {
    /// Create or replace a calendar from dates and weekdays.
    #[command(
        after_help = "Example:\n  chimectl calendar put holidays --dates 2026-12-24,2026-12-31 --weekdays SAT,SUN"
    )]
    Put {
        /// The calendar's id, as jobs name it in `exclude`.
        id: String,
        /// Excluded dates, `YYYY-MM-DD`, comma-separated.
        #[arg(long, value_delimiter = ',', required_unless_present = "weekdays")]
        dates: Vec<String>,
        /// Excluded days of every week (`MON` … `SUN`), comma-separated.
        #[arg(long, value_delimiter = ',')]
        weekdays: Vec<String>,
    },
    /// Create or replace a calendar from the all-day events of an iCalendar (.ics) file.
    #[command(after_help = "Example:\n  chimectl calendar import holidays de-2026.ics")]
    Import {
        /// The calendar's id, as jobs name it in `exclude`.
        id: String,
        /// The iCalendar file.
        file: String,
    },
    /// List calendars.
    #[command(after_help = "Example:\n  chimectl calendar list")]
    List,
    /// Show one calendar.
    #[command(after_help = "Example:\n  chimectl calendar get holidays")]
    Get {
        /// The calendar's id.
        id: String,
    },
    /// Delete a calendar no job excludes.
    #[command(after_help = "Example:\n  chimectl calendar delete holidays")]
    Delete {
        /// The calendar's id.
        id: String,
    },
}

/// Runs one calendar subcommand.
pub async fn run(command: &CalendarCommand, client: &Client, as_json: bool) -> Result<(), Failure> {
    let reply = match command {
        CalendarCommand::Put {
            id,
            dates,
            weekdays,
        } => one(put(client, id, json!(dates), weekdays).await?)?,
        CalendarCommand::Import { id, file } => {
            let text =
                std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?;
            let imported =
                all_day_dates(&text).map_err(|e| Failure::Usage(format!("{file}: {e}")))?;
            for warning in &imported.warnings {
                eprintln!("chimectl: warning: {}", printable(warning));
            }
            one(put(client, id, json!(imported.dates), &[]).await?)?
        }
        CalendarCommand::List => {
            let calendars = client.list_calendars().await.map_err(api_failure)?;
            to_json(&ListCalendarsReply { calendars })?
        }
        CalendarCommand::Get { id } => one(client.get_calendar(id).await.map_err(api_failure)?)?,
        CalendarCommand::Delete { id } => {
            one(client.delete_calendar(id).await.map_err(api_failure)?)?
        }
    };
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    let calendars = match reply.get("calendars").and_then(Value::as_array) {
        Some(list) => list.clone(),
        None => vec![reply["calendar"].clone()],
    };
    print_calendars(&calendars);
    Ok(())
}

/// `calendars.put`, the server checking the dates and weekdays.
async fn put(
    client: &Client,
    id: &str,
    dates: Value,
    weekdays: &[String],
) -> Result<Calendar, Failure> {
    let mut request = json!({"id": id, "dates": dates});
    if !weekdays.is_empty() {
        request["weekdays"] = json!(weekdays);
    }
    client.put_calendar(&request).await.map_err(api_failure)
}

fn one(calendar: Calendar) -> Result<Value, Failure> {
    to_json(&CalendarReply { calendar })
}

fn to_json(reply: &impl serde::Serialize) -> Result<Value, Failure> {
    serde_json::to_value(reply)
        .map_err(|e| Failure::Other(anyhow::anyhow!("cannot show the reply: {e}")))
}

/// One line per calendar: id, weekdays, how many dates, the first and last.
fn print_calendars(calendars: &[Value]) {
    println!("{:<24} {:<28} {:>6}  RANGE", "ID", "WEEKDAYS", "DATES");
    for c in calendars {
        let text = |v: &Value| printable(v.as_str().unwrap_or(""));
        let weekdays: Vec<String> = c["weekdays"]
            .as_array()
            .map(|w| w.iter().map(text).collect())
            .unwrap_or_default();
        let dates = c["dates"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let range = match (dates.first(), dates.last()) {
            (Some(first), Some(last)) => format!("{} … {}", text(first), text(last)),
            _ => String::new(),
        };
        println!(
            "{:<24} {:<28} {:>6}  {range}",
            text(&c["id"]),
            if weekdays.is_empty() {
                "-".to_string()
            } else {
                weekdays.join(",")
            },
            dates.len()
        );
    }
}
