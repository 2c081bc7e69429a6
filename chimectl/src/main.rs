//! `chimectl`: Chime's command-line client.
//!
//! This file only parses the command line and dispatches; each subcommand
//! lives in its own file. Bad input exits with status 2 and one line on
//! stderr that names the flag at fault.

mod preview;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "chimectl", version, about = "Chime's command-line client")]
struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// NATS server to reach the schedulers through.
    #[arg(
        long,
        global = true,
        env = "CHIME_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    // Read by the API subcommands; `preview` needs no server.
    #[allow(dead_code)]
    nats_url: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the next firing times of a schedule (offline, needs no server).
    Preview(preview::PreviewArgs),
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
        Command::Preview(args) => preview::run(args, cli.json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("chimectl: {message}");
            ExitCode::from(USAGE)
        }
        Err(Failure::Other(e)) => {
            eprintln!("chimectl: {e:#}");
            ExitCode::FAILURE
        }
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
