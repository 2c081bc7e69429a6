//! `chimectl`: Chime's command-line client.
//!
//! This file only parses the command line and dispatches; each subcommand
//! lives in its own file, and `help.rs` lays out `--help`. Bad input exits
//! with status 2 and says on stderr what to fix, naming the flag at fault.

mod alerts;
mod api;
mod audit;
mod calendar;
mod code;
mod get;
mod group;
mod help;
mod ics;
mod import;
mod logs;
mod preview;
mod table;
mod when;

use chime_runtime::connection::ConnectError;
use clap::{FromArgMatches as _, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "chimectl", version, about = "Chime's command-line client")]
struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(flatten)]
    nats: chime_runtime::connection::NatsConnection,

    /// Subject prefix of the installation.
    #[arg(
        long,
        global = true,
        env = "CHIME_SUBJECT_PREFIX",
        default_value = "chime",
        help_heading = help::CONNECTION
    )]
    subject_prefix: String,

    /// How long to wait for NATS and for each reply.
    #[arg(long, global = true, default_value = "5s", value_parser = timeout, help_heading = help::CONNECTION)]
    timeout: std::time::Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the next firing times of a schedule, or of a stored job.
    Preview(preview::PreviewArgs),
    #[command(flatten)]
    Api(api::ApiCommand),
    /// Show a job whole: its spec, state, pause and next instants.
    #[command(
        after_help = "Example:\n  chimectl get nightly-report\n  chimectl get nightly-report --json"
    )]
    Get(get::GetArgs),
    /// Print a firing's whole output and error.
    #[command(
        after_help = "Example:\n  chimectl history nightly-report     # the FIRING ID column\n  \
                            chimectl logs 'nightly-report@1767225600000#1'"
    )]
    Logs(logs::LogsArgs),
    /// List recent alerts (failed, lost, late, missed firings …), newest first.
    #[command(
        after_help = "Example:\n  chimectl alerts --since -1d\n  chimectl alerts --kind firing_failed --job nightly-report"
    )]
    Alerts(alerts::AlertsArgs),
    /// List the audit trail: who changed what, when, with what outcome.
    #[command(after_help = "Example:\n  chimectl audit --target nightly-report --limit 10")]
    Audit(audit::AuditArgs),
    /// Exclusion calendars: put, import (.ics), list, get, delete.
    Calendar {
        #[command(subcommand)]
        command: calendar::CalendarCommand,
    },
    /// Limits of whole groups: put, list, get.
    Group {
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    #[command(flatten)]
    Code(code::CodeCommand),
    /// Turn another scheduler's jobs into Chime's (offline unless --apply).
    #[command(subcommand)]
    Import(import::ImportCommand),
}

impl Command {
    /// The exit status of a failure that is not the user's input: 1, but
    /// 2 for `diff`, whose 1 means "something would change".
    fn error_status(&self) -> u8 {
        match self {
            Command::Code(code::CodeCommand::Diff(_)) => 2,
            _ => 1,
        }
    }
}

fn timeout(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Connects to NATS and builds the API client.
async fn client(cli: &Cli) -> Result<chime_common::client::Client, Failure> {
    chime_common::Subjects::validate_prefix(&cli.subject_prefix)
        .map_err(|e| Failure::Usage(format!("--subject-prefix: {e}")))?;
    // One attempt: a command line fails fast rather than waiting for a server.
    let nats = tokio::time::timeout(
        cli.timeout,
        cli.nats.connect("chimectl", std::time::Duration::ZERO),
    )
    .await
    .map_err(|_| {
        Failure::Other(anyhow::anyhow!(
            "cannot connect to NATS at {} within {:?}",
            cli.nats.redacted_url(),
            cli.timeout
        ))
    })?
    .map_err(|e| match e {
        ConnectError::Settings(message) => Failure::Usage(message),
        other => Failure::Other(other.into()),
    })?;
    Ok(chime_common::client::Client::new(nats)
        .with_subjects(chime_common::Subjects::new(cli.subject_prefix.clone()))
        .with_timeout(cli.timeout))
}

/// Exit status for input the user must fix (the same as clap's usage errors).
const USAGE: u8 = 2;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match help::command::<Cli>()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    let result = run(&cli).await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            print_error(&message);
            ExitCode::from(USAGE)
        }
        Err(Failure::Other(e)) => {
            print_error(&format!("{e:#}"));
            ExitCode::from(cli.command.error_status())
        }
        Err(Failure::Status(status)) => ExitCode::from(status),
    }
}

/// Runs the command the line names, connecting first when it needs a server.
async fn run(cli: &Cli) -> Result<(), Failure> {
    let json = cli.json;
    match &cli.command {
        Command::Preview(args) if args.needs_server() => {
            preview::run(args, Some(&client(cli).await?), json).await
        }
        Command::Preview(args) => preview::run(args, None, json).await,
        Command::Api(command) => api::run(command, &client(cli).await?, json).await,
        Command::Get(args) => get::run(args, &client(cli).await?, json).await,
        Command::Logs(args) => logs::run(args, &client(cli).await?, json).await,
        Command::Alerts(args) => alerts::run(args, &client(cli).await?, json).await,
        Command::Audit(args) => audit::run(args, &client(cli).await?, json).await,
        Command::Calendar { command } => calendar::run(command, &client(cli).await?, json).await,
        Command::Group { command } => group::run(command, &client(cli).await?, json).await,
        Command::Code(command) => code::run(command, &client(cli).await?, json).await,
        Command::Import(command) if command.needs_server() => {
            import::run(command, Some(&client(cli).await?), json).await
        }
        Command::Import(command) => import::run(command, None, json).await,
    }
}

/// An error on stderr, each of its lines (one per problem) made printable.
fn print_error(message: &str) {
    for line in message.lines() {
        eprintln!("chimectl: {}", table::printable(line));
    }
}

/// Why a command failed, which decides the exit status.
#[derive(Debug)]
enum Failure {
    /// The input is wrong: status 2, the message says what to fix.
    Usage(String),
    /// Anything else: status 1 (2 for `diff`).
    Other(anyhow::Error),
    /// The command printed its answer and exits with this status (`diff`:
    /// 1 when something would change).
    Status(u8),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

/// Help and version go to stdout as clap prints them; a usage error goes
/// to stderr as clap words it (the missing arguments named, its "did you
/// mean" tips kept), without the usage and "for more information" lines.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(if e.use_stderr() { USAGE } else { 0 })
        }
        _ => {
            print_error(&clap_message(&e.to_string()));
            ExitCode::from(USAGE)
        }
    }
}

/// The lines of clap's error text worth printing: the error and what it
/// lists (missing arguments, tips), up to its usage line.
fn clap_message(text: &str) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.trim().is_empty())
        .map(str::to_string)
        .collect();
    match lines.first_mut() {
        Some(first) => {
            *first = first.strip_prefix("error: ").unwrap_or(first).to_string();
            if !first.ends_with(':') {
                first.push_str(" (see --help)");
            }
        }
        None => lines.push("invalid arguments (see --help)".into()),
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_keep_their_tips_and_the_names_of_missing_arguments() {
        let text = "error: unrecognized subcommand 'lst'\n\n  tip: a similar subcommand exists: \
                    'list'\n\nUsage: chimectl [OPTIONS] <COMMAND>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_message(text),
            "unrecognized subcommand 'lst' (see --help)\n  tip: a similar subcommand exists: 'list'"
        );
        let text =
            "error: the following required arguments were not provided:\n  --from <TIME>\n  \
                    --to <TIME>\n\nUsage: chimectl backfill --from <TIME> --to <TIME> <ID>\n";
        assert_eq!(
            clap_message(text),
            "the following required arguments were not provided:\n  --from <TIME>\n  --to <TIME>"
        );
    }
}
