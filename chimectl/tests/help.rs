//! `chimectl --help` and its usage errors as a newcomer meets them: the
//! built binary, no server.

use std::process::{Command, Output};

fn chimectl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chimectl"))
        .args(args)
        .env_remove("CHIME_NATS_URL")
        .output()
        .expect("the chimectl binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn the_commands_are_grouped_and_the_connection_flags_listed_once() {
    let help = chimectl(&["--help"]);
    assert!(help.status.success(), "{}", stderr(&help));
    let text = stdout(&help);
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in\n{text}"))
    };
    assert!(
        at("Usage: chimectl [OPTIONS] <COMMAND>") < at("Jobs:"),
        "{text}"
    );
    assert!(at("Jobs:\n  list ") < at("Firings:\n  history "), "{text}");
    assert!(at("Firings:") < at("Operations:\n  workers "), "{text}");
    assert!(
        at("Operations:") < at("Offline (no server needed):\n  preview "),
        "{text}"
    );
    assert!(
        at("Offline") < at("Connection:\n      --nats-url <URL>"),
        "{text}"
    );
    assert!(!text.contains("Commands:"), "{text}");
    assert_eq!(text.matches("--nats-url <URL>").count(), 1, "{text}");

    let get = stdout(&chimectl(&["get", "--help"]));
    assert!(!get.contains("--nats-url <URL>"), "{get}");
    assert!(
        get.contains("Example:\n  chimectl get nightly-report"),
        "{get}"
    );
    assert!(get.contains("`chimectl --help` lists them"), "{get}");
    assert_eq!(stdout(&chimectl(&["help", "get"])), get);
    // Hidden from help, the connection flags still work after the command.
    let late = chimectl(&[
        "get",
        "x",
        "--nats-url",
        "nats://127.0.0.1:1",
        "--timeout",
        "1s",
    ]);
    assert_eq!(late.status.code(), Some(1), "{}", stderr(&late));
    assert!(
        stderr(&late).contains("nats://127.0.0.1:1"),
        "{}",
        stderr(&late)
    );
}

#[test]
fn usage_errors_keep_the_tips_and_the_missing_arguments() {
    let typo = chimectl(&["lst"]);
    assert_eq!(typo.status.code(), Some(2));
    assert_eq!(
        stderr(&typo),
        "chimectl: unrecognized subcommand 'lst' (see --help)\n\
         chimectl:   tip: a similar subcommand exists: 'list'\n"
    );
    let missing = chimectl(&["backfill", "nightly"]);
    assert_eq!(missing.status.code(), Some(2));
    let err = stderr(&missing);
    assert!(
        err.contains("--from <TIME>") && err.contains("--to <TIME>"),
        "{err}"
    );
    let flag = chimectl(&["list", "--limt", "5"]);
    let err = stderr(&flag);
    assert!(
        err.contains("tip: a similar argument exists: '--limit'"),
        "{err}"
    );
    let time = chimectl(&["preview", "--cron", "@daily", "--from", "3h"]);
    assert_eq!(time.status.code(), Some(2));
    assert!(
        stderr(&time).contains("needs its sign"),
        "{}",
        stderr(&time)
    );
    assert!(time.stdout.is_empty());
}
