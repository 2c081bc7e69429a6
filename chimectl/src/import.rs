//! `chimectl import crontab FILE [--group G] [--apply]`: a crontab as
//! `shell` jobs (the library's `crontab` reads it), printed as the YAML
//! `apply` takes, or applied at once like `apply` does.

use crate::code::show;
use crate::table::printable;
use crate::Failure;
use anyhow::Context as _;
use chime_common::client::Client;
use chimectl::crontab::{self, Crontab};
use chimectl::manifests::{Manifest, Source};
use chimectl::plan::Plan;
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// What to import.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// A crontab (user format, with CRON_TZ= and environment lines) as jobs
    /// of the shell handler; prints them as YAML for `apply` unless --apply.
    Crontab(CrontabArgs),
}

/// `import crontab` flags.
#[derive(Debug, Args)]
pub struct CrontabArgs {
    /// The crontab file (`-` reads stdin).
    file: PathBuf,
    /// Put every job in this group.
    #[arg(long)]
    group: Option<String>,
    /// Create or change the jobs now (as `apply` does) instead of printing them.
    #[arg(long)]
    apply: bool,
}

impl ImportCommand {
    /// Whether running it needs a server.
    pub fn needs_server(&self) -> bool {
        match self {
            ImportCommand::Crontab(args) => args.apply,
        }
    }
}

/// Reads the crontab; `client` is there when [`ImportCommand::needs_server`].
pub async fn run(
    command: &ImportCommand,
    client: Option<&Client>,
    as_json: bool,
) -> Result<(), Failure> {
    let ImportCommand::Crontab(args) = command;
    let text = if args.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("cannot read the crontab from stdin")?;
        s
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("cannot read {}", args.file.display()))?
    };
    let file = args.file.display().to_string();
    let imported = crontab::import(&text, args.group.as_deref()).map_err(|errors| {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| printable(&format!("{file}: {e}")))
            .collect();
        Failure::Usage(lines.join("\n"))
    })?;
    for note in &imported.notes {
        eprintln!("chimectl: note: {file}: {}", printable(note));
    }
    match client {
        Some(client) if args.apply => apply(client, &imported, &args.file, as_json).await,
        _ if as_json => {
            let jobs: Vec<&serde_json::Value> = imported.jobs.iter().map(|j| &j.value).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&jobs).unwrap_or_default()
            );
            Ok(())
        }
        _ => {
            let yaml = crontab::to_yaml(&imported)
                .map_err(|e| Failure::Other(anyhow::anyhow!("cannot write YAML: {e}")))?;
            print!("{yaml}");
            Ok(())
        }
    }
}

async fn apply(
    client: &Client,
    imported: &Crontab,
    file: &std::path::Path,
    as_json: bool,
) -> Result<(), Failure> {
    let manifests: Vec<Manifest> = imported
        .jobs
        .iter()
        .enumerate()
        .map(|(i, job)| Manifest {
            source: Source {
                file: file.to_path_buf(),
                index: Some(i),
            },
            spec: job.spec.clone(),
            sets_paused: false,
        })
        .collect();
    let plan = Plan::make(client, &manifests, None)
        .await
        .map_err(crate::api::api_failure)?;
    let report = plan.apply(client).await;
    show(&plan, &report, false, as_json)?;
    match report.failed.len() {
        0 => Ok(()),
        n => Err(Failure::Other(anyhow::anyhow!(
            "{n} job(s) were not applied; see above"
        ))),
    }
}
