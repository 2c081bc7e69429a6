//! `chimectl group`: the limits of whole groups (`groups.*` verbs), and
//! what runs and is held in each.

use crate::api::api_failure;
use crate::table::printable;
use crate::Failure;
use chime_common::api::{GroupReply, ListGroupsReply};
use chime_common::client::Client;
use chime_common::concurrency::Group;
use clap::Subcommand;
use serde_json::{json, Value};

/// The group subcommands.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Set a group's limits; a limit left out is removed (no flags: no limits).
    #[command(
        after_help = "Example:\n  chimectl group put db --max-concurrent 5 --max-per-second 50"
    )]
    Put {
        /// The group's name.
        name: String,
        /// At most this many firings of the group execute at once.
        #[arg(long)]
        max_concurrent: Option<u64>,
        /// At most this many firings of the group start in any one second.
        #[arg(long)]
        max_per_second: Option<u64>,
    },
    /// List groups: limits, running and held firings.
    #[command(after_help = "Example:\n  chimectl group list")]
    List,
    /// Show one group.
    #[command(after_help = "Example:\n  chimectl group get db")]
    Get {
        /// The group's name.
        name: String,
    },
}

/// Runs one group subcommand.
pub async fn run(command: &GroupCommand, client: &Client, as_json: bool) -> Result<(), Failure> {
    let reply = match command {
        GroupCommand::Put {
            name,
            max_concurrent,
            max_per_second,
        } => {
            // The server checks the ranges and names the field of a problem.
            let mut request = json!({"name": name});
            if let Some(n) = max_concurrent {
                request["max_concurrent"] = json!(n);
            }
            if let Some(n) = max_per_second {
                request["max_per_second"] = json!(n);
            }
            one(client.put_group(&request).await.map_err(api_failure)?)?
        }
        GroupCommand::Get { name } => one(client.get_group(name).await.map_err(api_failure)?)?,
        GroupCommand::List => {
            let groups = client.list_groups().await.map_err(api_failure)?;
            to_json(&ListGroupsReply { groups })?
        }
    };
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    let groups = match reply.get("groups").and_then(Value::as_array) {
        Some(list) => list.clone(),
        None => vec![reply["group"].clone()],
    };
    print_groups(&groups);
    Ok(())
}

fn one(group: Group) -> Result<Value, Failure> {
    to_json(&GroupReply { group })
}

fn to_json(reply: &impl serde::Serialize) -> Result<Value, Failure> {
    serde_json::to_value(reply)
        .map_err(|e| Failure::Other(anyhow::anyhow!("cannot show the reply: {e}")))
}

/// One line per group: name, limits (`-`: none), running and held firings.
fn print_groups(groups: &[Value]) {
    println!(
        "{:<32} {:>14} {:>14} {:>8} {:>8}",
        "GROUP", "MAX_CONCURRENT", "MAX_PER_SECOND", "RUNNING", "HELD"
    );
    for g in groups {
        let limit = |v: &Value| v.as_u64().map_or("-".to_string(), |n| n.to_string());
        println!(
            "{:<32} {:>14} {:>14} {:>8} {:>8}",
            printable(g["name"].as_str().unwrap_or("")),
            limit(&g["max_concurrent"]),
            limit(&g["max_per_second"]),
            g["running"].as_u64().unwrap_or(0),
            g["held"].as_u64().unwrap_or(0),
        );
    }
}
