//! `chimectl`: Chime's command-line client.
//!
//! This file only parses the command line and dispatches; each subcommand
//! lives in its own file. Bad input exits with status 2 and one line on
//! stderr that names the flag at fault.

mod api;
mod calendar;
mod code;
mod group;
mod ics;
mod import;
mod preview;
mod table;

use chime_runtime::connection::ConnectError;
use clap::{Parser, Subcommand};
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
        default_value = "chime"
    )]
    subject_prefix: String,

    /// How long to wait for a reply.
    #[arg(long, global = true, default_value = "5s", value_parser = timeout)]
    timeout: std::time::Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the next firing times of a schedule (offline unless --exclude asks the server).
    Preview(preview::PreviewArgs),
    #[command(flatten)]
    Api(api::ApiCommand),
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
    /// Turn another scheduler's jobs into Chime's.
    #[command(subcommand)]
    Import(import::ImportCommand),
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    let result = match &cli.command {
        Command::Preview(args) if args.needs_server() => match client(&cli).await {
            Ok(client) => preview::run(args, Some(&client), cli.json).await,
            Err(e) => Err(e),
        },
        Command::Preview(args) => preview::run(args, None, cli.json).await,
        Command::Api(command) => match client(&cli).await {
            Ok(client) => api::run(command, &client, cli.json).await,
            Err(e) => Err(e),
        },
        Command::Calendar { command } => match client(&cli).await {
            Ok(client) => calendar::run(command, &client, cli.json).await,
            Err(e) => Err(e),
        },
        Command::Group { command } => match client(&cli).await {
            Ok(client) => group::run(command, &client, cli.json).await,
            Err(e) => Err(e),
        },
        Command::Code(command) => match client(&cli).await {
            Ok(client) => code::run(command, &client, cli.json).await,
            Err(e) => Err(e),
        },
        Command::Import(command) if command.needs_server() => match client(&cli).await {
            Ok(client) => import::run(command, Some(&client), cli.json).await,
            Err(e) => Err(e),
        },
        Command::Import(command) => import::run(command, None, cli.json).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            print_error(&message);
            ExitCode::from(USAGE)
        }
        Err(Failure::Other(e)) => {
            print_error(&format!("{e:#}"));
            ExitCode::FAILURE
        }
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
    /// Anything else: status 1.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

/// Help and version go to stdout as clap prints them; usage errors become
/// one line on stderr, like every other input error.
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
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("chimectl: {first} (see --help)");
            ExitCode::from(USAGE)
        }
    }
}
