//! `chimectl audit`: the audit trail of changes (`audit.list`): who
//! (`nats:<user>`, an HTTP user), how, which verb on which job, the job's
//! version before and after, and the outcome; newest first.

use crate::api::api_failure;
use crate::table::{print_next, print_rows, printable, text};
use crate::when::{self, When};
use crate::Failure;
use anyhow::Context as _;
use chime_common::api::ListAuditRequest;
use chime_common::client::Client;
use chrono::Utc;
use clap::Args;

/// `audit` filters.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only the entries of this job (or calendar).
    #[arg(long, value_name = "ID")]
    target: Option<String>,
    /// Only entries at or after this time: RFC 3339, `now`, or an offset
    /// such as -3h, -2d.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    since: Option<When>,
    /// At most this many, newest first (1 to 1000).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// The `next` cursor printed by the previous page.
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

/// Lists one page of the trail.
pub async fn run(args: &AuditArgs, client: &Client, as_json: bool) -> Result<(), Failure> {
    let now = Utc::now();
    let request = ListAuditRequest {
        target: args.target.clone(),
        limit: Some(args.limit),
        after: args.after.clone(),
    };
    let mut page = client.list_audit(&request).await.map_err(api_failure)?;
    if let Some(since) = args.since {
        let since = since.at(now);
        let before = page.entries.len();
        page.entries.retain(|entry| entry.at >= since);
        if page.entries.len() < before {
            // Newest first: the next page is older still.
            page.next = None;
        }
    }
    let reply = serde_json::to_value(&page).context("cannot show the audit trail")?;
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    let rows = reply["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let version = match (e.get("before_version"), e.get("after_version")) {
                (None, None) => "-".to_string(),
                (before, after) => format!(
                    "{}→{}",
                    before.map_or("-".into(), text),
                    after.map_or("-".into(), text)
                ),
            };
            vec![
                text(&e["at"]),
                text(&e["actor"]),
                text(&e["via"]),
                text(&e["verb"]),
                text(&e["target"]),
                version,
                text(&e["outcome"]),
                printable(e["message"].as_str().unwrap_or("")),
            ]
        })
        .collect();
    print_rows(
        &[
            "AT", "ACTOR", "VIA", "VERB", "TARGET", "VERSION", "OUTCOME", "MESSAGE",
        ],
        rows,
    );
    print_next(reply.get("next"));
    Ok(())
}
