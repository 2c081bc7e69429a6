//! `chimectl alerts`: the newest alerts (`alerts.list`, read back from the
//! alert stream), optionally of one kind or job, or since a time.

use crate::api::api_failure;
use crate::table::{print_rows, printable, text};
use crate::when::{self, When};
use crate::Failure;
use anyhow::Context as _;
use chime_common::api::{ListAlertsReply, ListAlertsRequest};
use chime_common::client::Client;
use chime_common::protocol::AlertKind;
use chrono::Utc;
use clap::Args;
use serde_json::Value;

/// `alerts` filters.
#[derive(Debug, Args)]
pub struct AlertsArgs {
    /// Only alerts of this kind: firing_failed, firing_lost,
    /// repeated_failures, not_started, not_running, late, missed,
    /// dead_letter, stream_full or clock_offset.
    #[arg(long, value_name = "KIND", value_parser = kind)]
    kind: Option<AlertKind>,
    /// Only the alerts of this job.
    #[arg(long = "job", value_name = "ID")]
    job_id: Option<String>,
    /// Only alerts raised at or after this time: RFC 3339, `now`, or an
    /// offset such as -3h, -2d.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    since: Option<When>,
    /// At most this many, newest first (1 to 1000).
    #[arg(long, default_value_t = 20)]
    limit: u32,
}

fn kind(text: &str) -> Result<AlertKind, String> {
    serde_json::from_value(Value::String(text.to_string()))
        .map_err(|_| format!("{text:?} is not an alert kind"))
}

/// Lists the alerts.
pub async fn run(args: &AlertsArgs, client: &Client, as_json: bool) -> Result<(), Failure> {
    let now = Utc::now();
    let request = ListAlertsRequest {
        kind: args.kind,
        job_id: args.job_id.clone(),
        limit: Some(args.limit),
    };
    let mut alerts = client.list_alerts(&request).await.map_err(api_failure)?;
    if let Some(since) = args.since {
        let since = since.at(now);
        alerts.retain(|alert| alert.at >= since);
    }
    let reply = serde_json::to_value(ListAlertsReply { alerts }).context("cannot show alerts")?;
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    let rows = reply["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            vec![
                text(&a["at"]),
                text(&a["kind"]),
                text(&a["job_id"]),
                text(&a["firing_id"]),
                printable(a["message"].as_str().unwrap_or("")),
            ]
        })
        .collect();
    print_rows(&["AT", "KIND", "JOB", "FIRING ID", "MESSAGE"], rows);
    Ok(())
}
