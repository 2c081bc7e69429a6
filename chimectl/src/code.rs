//! Jobs as code: `apply`, `diff` and `export` (the library's `plan` and
//! `manifests` do the work; this file reads the flags and prints). `diff`
//! answers with its exit status as `kubectl diff` does: 0 when nothing
//! would change, 1 when something would, 2 on error.

use crate::table::printable;
use crate::Failure;
use anyhow::Context as _;
use chime_common::client::Client;
use chimectl::manifests::{self, Problem};
use chimectl::plan::{exported, stored_jobs, Action, Plan, Report};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The jobs-as-code subcommands.
#[derive(Debug, Subcommand)]
pub enum CodeCommand {
    /// Create or change the jobs of YAML or JSON files (directories are read
    /// recursively); prints what is created, changed, unchanged and deleted.
    #[command(after_help = "Example:\n  chimectl apply -f jobs/ --dry-run\n  \
                            chimectl apply -f jobs/ --prune -l owner=etl")]
    Apply(ApplyArgs),
    /// Show, field by field, what `apply` would change, changing nothing;
    /// exits 0 when nothing would change, 1 when something would, 2 on error.
    #[command(
        after_help = "Example:\n  chimectl diff -f jobs/ --prune -l owner=etl || echo \"apply would change something\""
    )]
    Diff(DiffArgs),
    /// Print the stored jobs as files `apply` takes back unchanged.
    #[command(after_help = "Example:\n  chimectl export -l owner=etl --dir jobs/")]
    Export(ExportArgs),
}

/// The job files.
#[derive(Debug, Args)]
pub struct FilesArgs {
    /// A job file or a directory of them (`.yaml`, `.yml`, `.json`); repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
}

/// `apply` flags.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    files: FilesArgs,
    /// Print what would be done and change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    prune: PruneArgs,
}

/// `diff` flags.
#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    files: FilesArgs,
    #[command(flatten)]
    prune: PruneArgs,
}

/// Which stored jobs the files own, so those no file defines are deleted.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Also delete the stored jobs the selector (`-l`) matches that no file defines.
    #[arg(long)]
    prune: bool,
    /// With --prune: the label selector of the jobs the files own (`owner=etl`).
    #[arg(short = 'l', long)]
    selector: Option<String>,
}

impl PruneArgs {
    /// The selector to prune by, `None` without `--prune`.
    fn selector(&self) -> Result<Option<&str>, Failure> {
        match (self.prune, self.selector.as_deref()) {
            (true, Some(selector)) => Ok(Some(selector)),
            (false, None) => Ok(None),
            (true, None) => Err(Failure::Usage(
                "--prune needs -l SELECTOR, the labels of the jobs the files own (such as -l \
                 owner=etl): prune deletes the stored jobs it matches that no file defines"
                    .into(),
            )),
            (false, Some(_)) => Err(Failure::Usage(
                "-l/--selector: only used with --prune; add --prune or drop -l".into(),
            )),
        }
    }
}

/// `export` flags.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only jobs whose labels match this selector.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Write one file per job, `<DIR>/<id>.yaml`, instead of one list to stdout.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs one jobs-as-code subcommand.
pub async fn run(command: &CodeCommand, client: &Client, as_json: bool) -> Result<(), Failure> {
    match command {
        CodeCommand::Apply(args) => {
            let plan = make_plan(client, &args.files, args.prune.selector()?).await?;
            if args.dry_run {
                return show(&plan, &plan.preview(), true, as_json);
            }
            let report = plan.apply(client).await;
            show(&plan, &report, false, as_json)?;
            match report.failed.len() {
                0 => Ok(()),
                n => Err(Failure::Other(anyhow::anyhow!(
                    "{n} job(s) were not applied; see above"
                ))),
            }
        }
        CodeCommand::Diff(args) => {
            let plan = make_plan(client, &args.files, args.prune.selector()?).await?;
            show(&plan, &plan.preview(), true, as_json)?;
            if plan.is_empty() {
                Ok(())
            } else {
                Err(Failure::Status(1))
            }
        }
        CodeCommand::Export(args) => export(client, args, as_json).await,
    }
}

async fn make_plan(
    client: &Client,
    files: &FilesArgs,
    prune: Option<&str>,
) -> Result<Plan, Failure> {
    let manifests = manifests::read(&files.files).map_err(problems)?;
    Plan::make(client, &manifests, prune)
        .await
        .map_err(crate::api::api_failure)
}

fn problems(problems: Vec<Problem>) -> Failure {
    let lines: Vec<String> = problems.iter().map(|p| printable(&p.to_string())).collect();
    Failure::Usage(lines.join("\n"))
}

/// Prints a plan with the outcome of each job: a line per job (the field
/// changes under a changed one) and a summary, or all of it as JSON.
pub(crate) fn show(
    plan: &Plan,
    report: &Report,
    dry_run: bool,
    as_json: bool,
) -> Result<(), Failure> {
    if as_json {
        let fields: serde_json::Map<String, Value> = plan
            .steps
            .iter()
            .filter_map(|s| match &s.action {
                Action::Change { fields, .. } => Some((s.id.clone(), json!(fields))),
                _ => None,
            })
            .collect();
        let mut out = serde_json::to_value(report).unwrap_or_default();
        out["fields"] = Value::Object(fields);
        out["dry_run"] = json!(dry_run);
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    for step in &plan.steps {
        let file = step
            .source
            .as_ref()
            .map(|s| format!("  ({})", printable(&s.to_string())))
            .unwrap_or_default();
        if let Some(failed) = report.failed.iter().find(|f| f.id == step.id) {
            println!(
                "failed     {}{file}: {}",
                step.id,
                printable(&failed.error.to_string())
            );
            continue;
        }
        let word = match step.action {
            Action::Create => "created",
            Action::Change { .. } => "changed",
            Action::Unchanged => "unchanged",
            Action::Delete => "deleted",
        };
        println!("{word:<10} {}{file}", step.id);
        if let Action::Change { fields, .. } = &step.action {
            for change in fields {
                println!("    {}", printable(&change.to_string()));
            }
        }
    }
    println!(
        "{} created, {} changed, {} unchanged, {} deleted{}{}",
        report.created.len(),
        report.changed.len(),
        report.unchanged.len(),
        report.deleted.len(),
        match report.failed.len() {
            0 => String::new(),
            n => format!(", {n} failed"),
        },
        if dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        },
    );
    Ok(())
}

async fn export(client: &Client, args: &ExportArgs, as_json: bool) -> Result<(), Failure> {
    let mut jobs = stored_jobs(client, args.selector.as_deref())
        .await
        .map_err(crate::api::api_failure)?;
    jobs.sort_by(|a, b| a.spec.id.cmp(&b.spec.id));
    let specs: Vec<Value> = jobs.iter().map(exported).collect();
    let Some(dir) = &args.dir else {
        let text = if as_json {
            serde_json::to_string_pretty(&specs)
                .map(|t| t + "\n")
                .map_err(anyhow::Error::from)
        } else {
            serde_yaml_ng::to_string(&specs).map_err(anyhow::Error::from)
        };
        print!("{}", text.context("cannot write the jobs")?);
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for spec in &specs {
        let id = spec["id"].as_str().unwrap_or_default();
        // Ids are `A-Z a-z 0-9 . _ -`: a file name, never a path.
        let path = dir.join(format!("{id}.yaml"));
        let text = serde_yaml_ng::to_string(spec).context("cannot write a job as YAML")?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}", printable(&path.display().to_string()));
    }
    Ok(())
}
