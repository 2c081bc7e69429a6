//! `chimectl import crontab FILE [--system] [--tz ZONE] [--paused]
//! [--group G] [--apply]`: a crontab as `shell` jobs (the library's
//! `crontab` reads it), printed as the YAML `apply` takes, or applied at
//! once like `apply` does.

use crate::code::show;
use crate::table::printable;
use crate::Failure;
use anyhow::Context as _;
use chime_common::client::Client;
use chimectl::crontab::{self, host, Crontab, Options};
use chimectl::manifests::{Manifest, Source};
use chimectl::plan::Plan;
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// What to import.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// A crontab as jobs of the shell handler; prints them as YAML for
    /// `apply` unless --apply.
    #[command(after_help = "Examples:\n  \
        chimectl import crontab my-crontab > jobs.yaml\n  \
        chimectl import crontab --system --tz Europe/Berlin --paused /etc/crontab --apply\n\n\
        Each schedule line becomes a job `cron-<program>` in the zone of the CRON_TZ= line \
        above it, running `sh -c COMMAND` with the environment lines above it. @reboot, an \
        unescaped % (cron's standard input) and a user name after the time fields without \
        --system are refused, naming the line.")]
    Crontab(CrontabArgs),
}

/// `import crontab` flags.
#[derive(Debug, Args)]
pub struct CrontabArgs {
    /// The crontab file (`-` reads stdin).
    file: PathBuf,
    /// A system crontab (/etc/crontab, /etc/cron.d/*): the sixth field is
    /// the user to run as, kept as the label `cron-user`.
    #[arg(long)]
    system: bool,
    /// Time zone of the lines without a CRON_TZ= line above them
    /// [default: this machine's zone, with a note saying which].
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// The jobs start paused (`chimectl resume -l imported-from=crontab`
    /// starts them).
    #[arg(long)]
    paused: bool,
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
    let (options, host_zone) = options(args)?;
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
    let imported = crontab::import(&text, &options).map_err(|errors| {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| printable(&format!("{file}: {e}")))
            .collect();
        Failure::Usage(lines.join("\n"))
    })?;
    for note in &imported.notes {
        eprintln!("chimectl: note: {file}: {}", printable(note));
    }
    if let (Some(host), Some(first)) = (&host_zone, imported.in_default_zone.first()) {
        eprintln!(
            "chimectl: note: {file}: line {first}{}: no CRON_TZ= above it: runs in {}, this \
             machine's zone (from {}); give --tz ZONE for another",
            match imported.in_default_zone.len() - 1 {
                0 => String::new(),
                n => format!(" and {n} more"),
            },
            printable(&host.zone),
            host.source
        );
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

/// The import's options; the machine's zone when `--tz` is not given, to
/// say so.
fn options(args: &CrontabArgs) -> Result<(Options, Option<host::HostZone>), Failure> {
    let (zone, host_zone) = match &args.tz {
        Some(zone) => {
            if zone.parse::<chrono_tz::Tz>().is_err() {
                return Err(Failure::Usage(format!(
                    "--tz: {:?} is not an IANA time zone (such as Europe/Berlin or UTC)",
                    printable(zone)
                )));
            }
            (zone.clone(), None)
        }
        None => {
            let host = host::host_zone();
            (host.zone.clone(), Some(host))
        }
    };
    let options = Options {
        group: args.group.clone(),
        system: args.system,
        zone,
        paused: args.paused,
        known_users: host::known_users(),
    };
    Ok((options, host_zone))
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
        .map(|job| Manifest {
            source: Source {
                file: file.to_path_buf(),
                index: None,
                line: Some(job.line),
            },
            spec: job.spec.clone(),
            // A job that exists keeps its pause; a new one starts as --paused says.
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
