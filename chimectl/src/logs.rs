//! `chimectl logs FIRING_ID`: a firing's whole stored output on stdout and
//! its error on stderr (`firings.get`), as `kubectl logs` prints a pod's;
//! `--json` prints the firing object.

use crate::api::api_failure;
use crate::table::printable_text;
use crate::Failure;
use anyhow::Context as _;
use chime_common::api::FiringReply;
use chime_common::client::Client;
use clap::Args;
use std::io::Write as _;

/// `logs` arguments.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The firing's id, as `chimectl history` lists it (`JOB@MS#ATTEMPT`;
    /// quote it, `#` starts a shell comment).
    firing_id: String,
}

/// Prints the output and the error.
pub async fn run(args: &LogsArgs, client: &Client, as_json: bool) -> Result<(), Failure> {
    let firing = client
        .get_firing(&args.firing_id)
        .await
        .map_err(api_failure)?;
    if as_json {
        // Through a JSON value, as every command prints the server's reply.
        let reply =
            serde_json::to_value(FiringReply { firing }).context("cannot show the firing")?;
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    if let Some(output) = firing.output.as_deref().filter(|o| !o.is_empty()) {
        let text = printable_text(output);
        write!(out, "{text}").context("writing to stdout")?;
        if !text.ends_with('\n') {
            writeln!(out).context("writing to stdout")?;
        }
    }
    out.flush().context("writing to stdout")?;
    let id = &args.firing_id;
    if !firing.state.is_final() {
        eprintln!(
            "chimectl: {id} is {}: its output is stored when it ends",
            firing.state
        );
    }
    if let Some(error) = &firing.error {
        eprintln!("chimectl: {id} ended {}:", firing.state);
        for line in printable_text(error).lines() {
            eprintln!("  {line}");
        }
    }
    Ok(())
}
