//! `chimectl --help` laid out for a newcomer: the commands grouped by what
//! they act on (jobs, firings, operations, offline), the NATS connection
//! flags in a section of their own listed once at the top instead of in
//! every command's help, and an example at the end of each command's.
//!
//! clap lists subcommands under one heading only, so the top-level
//! listing is written here from [`SECTIONS`] into the help template, and
//! clap's own listing is hidden; a test keeps [`SECTIONS`] and the
//! commands in step.

use clap::{Arg, Command, CommandFactory};
use std::fmt::Write as _;

/// The help heading of the connection flags (`--nats-*`,
/// `--subject-prefix`, `--timeout`).
pub const CONNECTION: &str = chime_runtime::connection::HELP_HEADING;

/// The top-level commands, grouped as `chimectl --help` lists them.
pub const SECTIONS: [(&str, &[&str]); 4] = [
    (
        "Jobs",
        &[
            "list", "get", "put", "delete", "pause", "resume", "trigger", "apply", "diff", "export",
        ],
    ),
    ("Firings", &["history", "logs", "backfill", "cancel"]),
    (
        "Operations",
        &["workers", "alerts", "audit", "calendar", "group"],
    ),
    ("Offline (no server needed)", &["preview", "import"]),
];

/// What the top-level help ends with.
const AFTER_HELP: &str = "\
Times (--from, --to, --until, --since) take RFC 3339 (2026-03-28T02:30:00Z), `now`, or an offset \
from now: -3h, +30m, in 30m, -2d.
Exit status: 0 done; 1 failed; 2 bad input (the message names the flag). \
`diff`: 0 nothing would change, 1 something would, 2 or more on error.
See `chimectl COMMAND --help` (or `chimectl help COMMAND`) for a command's flags and an example.";

/// What each command's help ends with, after its example.
const CONNECTION_POINTER: &str = "Connection flags (--nats-url, --nats-user, --nats-creds, …, \
--subject-prefix, --timeout) are taken by every command: `chimectl --help` lists them.";

/// The command line of `T`, with chimectl's help layout.
pub fn command<T: CommandFactory>() -> Command {
    let mut command = T::command();
    let listing = listing(&command);
    let connection: Vec<Arg> = command
        .get_arguments()
        .filter(|arg| arg.get_help_heading() == Some(CONNECTION))
        .cloned()
        .collect();
    // Before clap builds the command: building indexes each command's
    // arguments, and an argument changed afterwards breaks that index.
    for sub in command.get_subcommands_mut() {
        *sub = point_to_connection(std::mem::take(sub), &connection).hide(true);
    }
    command.build();
    // clap adds `help` while building; it is named in AFTER_HELP instead.
    for sub in command.get_subcommands_mut() {
        if sub.get_name() == "help" {
            *sub = std::mem::take(sub).hide(true);
        }
    }
    let styles = command.get_styles().clone();
    let header = styles.get_header();
    let mut template =
        String::from("{before-help}{about-with-newline}\n{usage-heading} {usage}\n\n");
    for (heading, lines) in listing {
        let _ = writeln!(template, "{header}{heading}:{header:#}");
        for line in lines {
            let _ = writeln!(template, "{line}");
        }
        template.push('\n');
    }
    template.push_str("{all-args}{after-help}");
    command
        .override_usage("chimectl [OPTIONS] <COMMAND> [ARGS]")
        .help_template(template)
        .after_help(AFTER_HELP)
}

/// Each section's lines, `  name  about`, aligned across sections.
fn listing(command: &Command) -> Vec<(&'static str, Vec<String>)> {
    let width = SECTIONS
        .iter()
        .flat_map(|(_, names)| names.iter())
        .map(|name| name.len())
        .max()
        .unwrap_or(0);
    SECTIONS
        .iter()
        .map(|(heading, names)| {
            let lines = names
                .iter()
                .map(|name| {
                    let about = command
                        .find_subcommand(name)
                        .and_then(Command::get_about)
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    format!("  {name:<width$}  {about}")
                })
                .collect();
            (*heading, lines)
        })
        .collect()
}

/// The command (and its subcommands) with the connection flags hidden
/// from its help and a line saying where they are instead. clap would
/// copy the global flags in, shown; a hidden copy of each, put first,
/// takes their place.
fn point_to_connection(mut command: Command, connection: &[Arg]) -> Command {
    for arg in connection {
        if command.get_arguments().all(|a| a.get_id() != arg.get_id()) {
            command = command.arg(arg.clone().hide(true));
        }
    }
    let after = match command.get_after_help() {
        Some(text) => format!("{text}\n\n{CONNECTION_POINTER}"),
        None => CONNECTION_POINTER.to_string(),
    };
    command = command.after_help(after);
    for sub in command.get_subcommands_mut() {
        *sub = point_to_connection(std::mem::take(sub), connection);
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chimectl() -> Command {
        command::<crate::Cli>()
    }

    /// Every command below the top one, with its path (`calendar put`).
    fn all_commands(command: &Command, path: &str, out: &mut Vec<(String, Command)>) {
        for sub in command.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let name = format!("{path} {}", sub.get_name()).trim().to_string();
            out.push((name.clone(), sub.clone()));
            all_commands(sub, &name, out);
        }
    }

    #[test]
    fn every_command_is_listed_under_exactly_one_heading() {
        let command = chimectl();
        let listed: Vec<&str> = SECTIONS
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect();
        let mut names: Vec<&str> = command
            .get_subcommands()
            .map(Command::get_name)
            .filter(|name| *name != "help")
            .collect();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        names.sort_unstable();
        assert_eq!(sorted, names, "SECTIONS and the commands differ");
        let help = command.clone().render_help().to_string();
        for (heading, names) in SECTIONS {
            assert!(help.contains(&format!("{heading}:")), "{help}");
            for name in names {
                assert_eq!(
                    help.matches(&format!("\n  {name} ")).count(),
                    1,
                    "{name} is listed once: {help}"
                );
            }
        }
        assert!(!help.contains("Commands:"), "{help}");
        assert!(help.contains("Connection:\n      --nats-url"), "{help}");
    }

    #[test]
    fn every_argument_is_documented_and_every_command_has_an_example() {
        let mut commands = Vec::new();
        all_commands(&chimectl(), "", &mut commands);
        for (name, command) in &commands {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(
                    arg.get_help().is_some(),
                    "chimectl {name}: {id} has no help"
                );
            }
            if command.has_subcommands() {
                continue;
            }
            let after = command
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(
                after.contains(&format!("chimectl {name}")),
                "chimectl {name} has no example: {after}"
            );
            let help = command.clone().render_help().to_string();
            assert!(
                !help.contains("--nats-url <URL>"),
                "chimectl {name} lists the connection: {help}"
            );
            assert!(help.contains("`chimectl --help` lists them"), "{help}");
        }
    }
}
