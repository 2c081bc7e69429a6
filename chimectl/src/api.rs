//! The subcommands that are one request to a scheduler's API.
//!
//! Each sends one typed request with the typed client and prints the typed
//! reply: its JSON (the server's, as the contract writes it) with `--json`,
//! a short table otherwise. Times on the command line are read by
//! `when.rs`, against one `now` per command.

use crate::table::{print_firings, print_jobs, print_workers, printable};
use crate::when::{self, When};
use crate::Failure;
use anyhow::Context as _;
use chime_common::api::{
    BackfillRequest, FiringReply, JobReply, JobsReply, ListWorkersReply, PauseRequest, TriggerReply,
};
use chime_common::client::{Client, ListFiringsReply, ListFiringsRequest, ListJobsRequest};
use chime_common::warning::Warning;
use chime_common::{ApiError, ErrorCode, FiringState, JobState};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;
use std::io::Read;

/// The API subcommands.
#[derive(Debug, Subcommand)]
pub enum ApiCommand {
    /// Create or replace a job from a JSON spec file (`-` reads stdin).
    #[command(after_help = "Example:\n  chimectl put nightly-report.json\n  \
                            echo '{\"id\": \"tick\", \"schedule\": {\"every\": \"1m\"}, \"handler\": \"shell\", \
                            \"payload\": {\"argv\": [\"date\"]}}' | chimectl put -")]
    Put {
        /// The job spec (JSON, docs/API.md); `-` reads it from stdin.
        file: String,
    },
    /// List jobs: schedule, next instant (or when a pause ends), version.
    #[command(after_help = "Example:\n  chimectl list -l team=data --state paused")]
    List(ListArgs),
    /// Delete a job (running firings are cancelled).
    #[command(after_help = "Example:\n  chimectl delete nightly-report")]
    Delete {
        /// The job's id.
        id: String,
    },
    /// Pause a job, or every job of a group or selector (a maintenance window with --until or --for).
    #[command(after_help = "Example:\n  chimectl pause nightly-report --for 2h\n  \
                            chimectl pause --group etl --until 2026-11-28T06:00:00Z")]
    Pause(PauseArgs),
    /// Resume paused jobs (missed instants follow each job's misfire policy).
    #[command(
        after_help = "Example:\n  chimectl resume nightly-report\n  chimectl resume -l imported-from=crontab"
    )]
    Resume(PauseArgs),
    /// Run a job now, once, outside its schedule; prints the firing id.
    #[command(after_help = "Example:\n  chimectl trigger nightly-report\n  \
                            chimectl trigger nightly-report --payload '{\"argv\": [\"/bin/report\", \"--dry-run\"]}'")]
    Trigger {
        /// The job's id.
        id: String,
        /// A JSON payload for this run only (replaces the job's).
        #[arg(long, value_name = "JSON")]
        payload: Option<String>,
    },
    /// Re-run a job's schedule over a past range: one firing per instant in [--from, --to).
    #[command(
        after_help = "Example:\n  chimectl backfill nightly-report --from -7d --to now --dry-run\n  \
                            chimectl backfill nightly-report --from -7d --to now\n  \
                            chimectl backfill nightly-report --from 2026-11-20T00:00:00Z --to 2026-11-21T00:00:00Z"
    )]
    Backfill {
        /// The job's id.
        id: String,
        /// Start of the range, included: RFC 3339, `now`, or an offset such as -7d.
        #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
        from: When,
        /// End of the range, excluded, not in the future: RFC 3339, `now`, or an offset such as -1h.
        #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
        to: When,
        /// At most this many instants, the earliest (default 1000, at most 10000).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Stage nothing: print the firings a backfill would stage, and how
        /// many of them the job's overlap policy would skip.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show firings (id, backfill or retry, times, worker, outcome), newest first.
    #[command(
        after_help = "Example:\n  chimectl history nightly-report --since -1d\n  chimectl history --state failed"
    )]
    History(HistoryArgs),
    /// Cancel a firing: a running one on its worker, a waiting one before it starts.
    #[command(after_help = "Example:\n  chimectl cancel 'nightly-report@1767225600000#1'")]
    Cancel {
        /// The firing's id, as `chimectl history` lists it.
        firing_id: String,
    },
    /// List live workers.
    #[command(after_help = "Example:\n  chimectl workers --group reports")]
    Workers {
        /// Only the workers of this group.
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
    /// Pause only: the jobs resume by themselves at this time (RFC 3339,
    /// `now`, or an offset such as +2h).
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    until: Option<When>,
    /// Pause only: the jobs resume by themselves after this long (`2h`, `30m`).
    #[arg(long = "for", value_name = "D", value_parser = duration, conflicts_with = "until")]
    for_: Option<std::time::Duration>,
}

/// `list` filters.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the jobs of this group.
    #[arg(long)]
    group: Option<String>,
    /// active, paused or completed.
    #[arg(long)]
    state: Option<String>,
    /// Only jobs whose labels match this selector (`team=data,env!=dev,critical`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// At most this many jobs (1 to 1000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// The `next` cursor printed by the previous page.
    #[arg(long, value_name = "CURSOR")]
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
    /// Only firings scheduled at or after this time: RFC 3339, `now`, or an
    /// offset such as -3h, -2d.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    since: Option<When>,
    /// At most this many firings (1 to 1000).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// The `next` cursor printed by the previous page.
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

fn duration(text: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(text)
        .map_err(|e| format!("{text:?}: {e}; write e.g. 2h or 30m"))?;
    if d.is_zero() {
        return Err("must be more than zero".into());
    }
    Ok(d)
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
    let now = Utc::now();
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
        ApiCommand::Delete { id } => job(client.delete_job(id).await.map_err(api_failure)?)?,
        ApiCommand::Pause(args) | ApiCommand::Resume(args) => {
            pause_or_resume(matches!(command, ApiCommand::Pause(_)), args, client, now).await?
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
            dry_run,
        } => {
            let request = BackfillRequest {
                id: id.clone(),
                from: from.at(now),
                to: to.at(now),
                limit: *limit,
                dry_run: *dry_run,
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
            let mut page = client.list_firings(&request).await.map_err(api_failure)?;
            if let Some(since) = args.since {
                since_only(&mut page, since.at(now));
            }
            to_json(&page)?
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
    print_text(command, &reply);
    Ok(())
}

/// A reply as text: a table, or the ids a command made.
fn print_text(command: &ApiCommand, reply: &Value) {
    match command {
        ApiCommand::Trigger { .. } => {
            println!("{}", printable(reply["firing_id"].as_str().unwrap_or("")))
        }
        ApiCommand::Backfill { .. } => {
            for id in reply["firing_ids"].as_array().into_iter().flatten() {
                println!("{}", printable(id.as_str().unwrap_or("")));
            }
            if reply["dry_run"].as_bool() == Some(true) {
                println!("{}", dry_run_summary(reply));
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
}

/// The last line of a dry-run backfill: how many firings it would stage,
/// how many of them the overlap policy would skip, and that nothing was
/// staged.
fn dry_run_summary(reply: &Value) -> String {
    let staged = reply["firing_ids"].as_array().map_or(0, Vec::len);
    let skipped = reply["skipped_by_overlap"].as_u64().unwrap_or(0);
    let plural = if staged == 1 { "" } else { "s" };
    format!(
        "dry run: {staged} firing{plural} would be staged, up to {skipped} of them skipped by \
         the job's overlap policy; nothing was staged"
    )
}

/// Keeps the firings of a page scheduled at or after `since`. Pages are
/// newest first, so once one is cut short the next is older still: no `next`.
fn since_only(page: &mut ListFiringsReply, since: DateTime<Utc>) {
    let before = page.firings.len();
    page.firings.retain(|f| f.scheduled_at >= since);
    if page.firings.len() < before {
        page.next = None;
    }
}

/// `pause` or `resume`: one job by id, or many by `-l` or `--group`.
async fn pause_or_resume(
    paused: bool,
    args: &PauseArgs,
    client: &Client,
    now: DateTime<Utc>,
) -> Result<Value, Failure> {
    let job = |job| {
        to_json(&JobReply {
            job,
            warnings: Vec::new(),
        })
    };
    let until = match (args.until, args.for_) {
        (Some(until), _) => Some(until.at(now)),
        (None, Some(length)) => Some(
            chrono::Duration::from_std(length)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .ok_or_else(|| usage("--for: is too long"))?,
        ),
        (None, None) => None,
    };
    if !paused && until.is_some() {
        return Err(usage(
            "--until/--for: only pause takes them; resume ends a pause now",
        ));
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
