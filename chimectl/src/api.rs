//! The subcommands that talk to a scheduler through the request/reply API.
//!
//! Each sends one typed request with the typed client and prints the typed
//! reply: its JSON (the server's, as the contract writes it) with `--json`,
//! a short table otherwise.

use crate::table::{print_firings, print_jobs, print_workers, printable};
use crate::Failure;
use anyhow::Context as _;
use chime_common::api::{
    BackfillRequest, FiringReply, JobReply, JobsReply, ListWorkersReply, PauseRequest, TriggerReply,
};
use chime_common::client::{Client, ListFiringsRequest, ListJobsRequest};
use chime_common::duration::parse_time_str;
use chime_common::warning::Warning;
use chime_common::{ApiError, ErrorCode, FiringState, JobState};
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;
use std::io::Read;

/// The API subcommands.
#[derive(Debug, Subcommand)]
pub enum ApiCommand {
    /// Create or replace a job from a JSON spec file (`-` reads stdin).
    Put { file: String },
    /// Show one job.
    Get { id: String },
    /// List jobs, newest first.
    List(ListArgs),
    /// Delete a job (running firings are cancelled).
    Delete { id: String },
    /// Pause a job, or every job of a group or selector (a maintenance window with --until).
    Pause(PauseArgs),
    /// Resume paused jobs (missed instants follow each job's misfire policy).
    Resume(PauseArgs),
    /// Run a job now, once, outside its schedule.
    Trigger {
        id: String,
        /// A JSON payload for this run only.
        #[arg(long)]
        payload: Option<String>,
    },
    /// Re-run a job's schedule over a past range: one firing per instant in [--from, --to).
    Backfill {
        id: String,
        /// Start of the range (RFC 3339), included.
        #[arg(long)]
        from: String,
        /// End of the range (RFC 3339), excluded; not in the future.
        #[arg(long)]
        to: String,
        /// At most this many instants, the earliest (default 1000, at most 10000).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Show firings (attempts with times, worker, outcome and error), newest first.
    History(HistoryArgs),
    /// Cancel a firing: a running one on its worker, a waiting one before it starts.
    Cancel { firing_id: String },
    /// List live workers.
    Workers {
        #[arg(long)]
        group: Option<String>,
    },
}

/// Which jobs `pause` and `resume` change.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// One job.
    id: Option<String>,
    /// Every job whose labels match this selector (`team=data,env!=dev`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Every job of this group (with -l: of the group, those matching).
    #[arg(long)]
    group: Option<String>,
    /// Pause only: the jobs resume by themselves at this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
}

/// `list` filters.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    group: Option<String>,
    /// active, paused or completed.
    #[arg(long)]
    state: Option<String>,
    /// Only jobs whose labels match this selector (`team=data,env!=dev,critical`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// The `next` cursor printed by the previous page.
    #[arg(long)]
    after: Option<String>,
}

/// `history` filters.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only this job's firings.
    job_id: Option<String>,
    /// staged, published, executing, succeeded, failed, lost, skipped or cancelled.
    #[arg(long)]
    state: Option<String>,
    #[arg(long, default_value_t = 20)]
    limit: u32,
    #[arg(long)]
    after: Option<String>,
}

fn usage(e: impl std::fmt::Display) -> Failure {
    Failure::Usage(e.to_string())
}

/// An API error as a failure: the user's input for `invalid_argument`.
pub(crate) fn api_failure(e: ApiError) -> Failure {
    let field = e
        .field
        .as_deref()
        .filter(|f| !f.is_empty())
        .map(|f| format!(" [{f}]"))
        .unwrap_or_default();
    let mut text = format!("{}: {}{field}", e.code, e.message);
    for detail in e.details.iter().skip(1) {
        text.push_str(&format!("\n  {detail}"));
    }
    match e.code {
        ErrorCode::InvalidArgument => Failure::Usage(text),
        _ => Failure::Other(anyhow::anyhow!(text)),
    }
}

fn read_spec(file: &str) -> Result<Value, Failure> {
    let text = if file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read the spec from stdin")?;
        s
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?
    };
    serde_json::from_str(&text).map_err(|e| usage(format!("{file} is not valid JSON: {e}")))
}

/// Prints a reply's warnings on stderr, one line each: the request was
/// carried out, and these say what it may not have meant.
pub(crate) fn warn(warnings: &[Warning]) {
    for warning in warnings {
        eprintln!("chimectl: warning: {}", printable(&warning.to_string()));
    }
}

/// `reply` as JSON, which both outputs print from.
fn to_json(reply: &impl Serialize) -> Result<Value, Failure> {
    serde_json::to_value(reply)
        .map_err(|e| Failure::Other(anyhow::anyhow!("cannot show the reply: {e}")))
}

/// Runs one API subcommand.
pub async fn run(command: &ApiCommand, client: &Client, as_json: bool) -> Result<(), Failure> {
    let job = |job| {
        to_json(&JobReply {
            job,
            warnings: Vec::new(),
        })
    };
    let reply = match command {
        ApiCommand::Put { file } => {
            let spec = read_spec(file)?;
            let reply = client
                .put_job_with_warnings(&spec)
                .await
                .map_err(api_failure)?;
            warn(&reply.warnings);
            to_json(&reply)?
        }
        ApiCommand::Get { id } => job(client.get_job(id).await.map_err(api_failure)?)?,
        ApiCommand::Delete { id } => job(client.delete_job(id).await.map_err(api_failure)?)?,
        ApiCommand::Pause(args) | ApiCommand::Resume(args) => {
            pause_or_resume(matches!(command, ApiCommand::Pause(_)), args, client).await?
        }
        ApiCommand::Trigger { id, payload } => {
            let payload = payload
                .as_deref()
                .map(serde_json::from_str::<Value>)
                .transpose()
                .map_err(|e| usage(format!("--payload is not valid JSON: {e}")))?;
            let firing_id = client.trigger_job(id, payload).await.map_err(api_failure)?;
            to_json(&TriggerReply { firing_id })?
        }
        ApiCommand::Backfill {
            id,
            from,
            to,
            limit,
        } => {
            let time = |flag: &str, text: &str| {
                parse_time_str(text).map_err(|e| usage(format!("{flag}: {e}")))
            };
            let request = BackfillRequest {
                id: id.clone(),
                from: time("--from", from)?,
                to: time("--to", to)?,
                limit: *limit,
                dry_run: false,
            };
            let reply = client.backfill_job(&request).await.map_err(api_failure)?;
            warn(&reply.warnings);
            to_json(&reply)?
        }
        ApiCommand::List(args) => {
            let state = args
                .state
                .as_deref()
                .map(str::parse::<JobState>)
                .transpose()
                .map_err(|e| usage(format!("--state: {e}")))?;
            let request = ListJobsRequest {
                group: args.group.clone(),
                state,
                selector: args.selector.clone(),
                limit: Some(args.limit),
                after: args.after.clone(),
            };
            to_json(&client.list_jobs(&request).await.map_err(api_failure)?)?
        }
        ApiCommand::History(args) => {
            let state = args
                .state
                .as_deref()
                .map(str::parse::<FiringState>)
                .transpose()
                .map_err(|e| usage(format!("--state: {e}")))?;
            let request = ListFiringsRequest {
                job_id: args.job_id.clone(),
                state,
                limit: Some(args.limit),
                after: args.after.clone(),
            };
            to_json(&client.list_firings(&request).await.map_err(api_failure)?)?
        }
        ApiCommand::Cancel { firing_id } => {
            let firing = client.cancel_firing(firing_id).await.map_err(api_failure)?;
            to_json(&FiringReply { firing })?
        }
        ApiCommand::Workers { group } => {
            let workers = client
                .list_workers(group.clone())
                .await
                .map_err(api_failure)?;
            to_json(&ListWorkersReply { workers })?
        }
    };
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    match command {
        ApiCommand::Trigger { .. } => {
            println!("{}", printable(reply["firing_id"].as_str().unwrap_or("")))
        }
        ApiCommand::Backfill { .. } => {
            for id in reply["firing_ids"].as_array().into_iter().flatten() {
                println!("{}", printable(id.as_str().unwrap_or("")));
            }
        }
        ApiCommand::List(_) => print_jobs(
            reply["jobs"].as_array().map(Vec::as_slice).unwrap_or(&[]),
            reply.get("next"),
        ),
        ApiCommand::History(_) => print_firings(
            reply["firings"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            reply.get("next"),
        ),
        ApiCommand::Cancel { .. } => print_firings(std::slice::from_ref(&reply["firing"]), None),
        ApiCommand::Workers { .. } => print_workers(
            reply["workers"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]),
        ),
        _ => match reply.get("jobs").and_then(Value::as_array) {
            Some(jobs) => print_jobs(jobs, None),
            None => print_jobs(std::slice::from_ref(&reply["job"]), None),
        },
    }
    Ok(())
}

/// `pause` or `resume`: one job by id, or many by `-l` or `--group`.
async fn pause_or_resume(
    paused: bool,
    args: &PauseArgs,
    client: &Client,
) -> Result<Value, Failure> {
    let job = |job| {
        to_json(&JobReply {
            job,
            warnings: Vec::new(),
        })
    };
    let until = args
        .until
        .as_deref()
        .map(parse_time_str)
        .transpose()
        .map_err(|e| usage(format!("--until: {e}")))?;
    if !paused && until.is_some() {
        return Err(usage("--until: only pause takes --until"));
    }
    Ok(match (&args.id, &args.selector, &args.group) {
        (Some(id), None, None) if paused => {
            job(client.pause_job(id, until).await.map_err(api_failure)?)?
        }
        (Some(id), None, None) => job(client.resume_job(id).await.map_err(api_failure)?)?,
        (Some(_), _, _) => {
            return Err(usage("give a job ID or -l/--group, not both"));
        }
        (None, None, None) => {
            return Err(usage("give a job ID, -l SELECTOR or --group GROUP"));
        }
        (None, selector, group) => {
            let request = PauseRequest {
                id: None,
                group: group.clone(),
                selector: selector.clone(),
                until,
            };
            let jobs = client
                .set_paused_many(&request, paused)
                .await
                .map_err(api_failure)?;
            to_json(&JobsReply { jobs })?
        }
    })
}
