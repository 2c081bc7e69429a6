//! The yardsticks against real services at a tiny rate: the transport
//! floor publishes, starts and appends every firing exactly once, and the
//! limit measures every operation, so that the figures they give are of
//! work actually done.

use std::collections::BTreeMap;

use chime_tests::{PgCluster, PgClusterOptions, PG_URL_ENV};
use clap::Parser;

use crate::cost::MACHINE_CPU_NOTE;
use crate::limit::{FIRING_LABEL, LIMIT_NOTE};
use crate::report::Row;
use crate::{limit, transport_floor, Args};

/// The `name=number` figures of a note.
fn figures(note: &str) -> BTreeMap<String, f64> {
    note.split(',')
        .filter_map(|part| {
            let (name, value) = part.split_once('=')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn assert_every_firing_once(row: &Row) {
    assert!(row.expected > 0, "{row:?}");
    assert_eq!((row.lost, row.duplicates), (0, 0), "{row:?}");
    assert_eq!(row.succeeded, row.expected, "{row:?}");
    assert_eq!(
        row.started, row.expected,
        "each firing's start token won once"
    );
    assert_eq!(row.notes["history_duplicates"], "0");
    let step = figures(&row.notes["step"]);
    let due = step["due"];
    assert!(due >= row.expected as f64, "{step:?}");
    for figure in ["published", "start_tokens", "appended", "appended_firings"] {
        assert_eq!(step[figure], due, "{figure} of the step: {step:?}");
    }
    assert!(row.notes.contains_key(MACHINE_CPU_NOTE), "{row:?}");
}

fn assert_every_operation_measured(rows: &[Row]) {
    let ops = |label: &str| -> f64 {
        let row = rows.iter().find(|r| r.label == label).expect(label);
        row.notes["ops"].parse().expect("a count")
    };
    assert!(ops("JetStream publish+ack") > 0.0);
    assert_eq!(
        ops("consume+ack"),
        ops("JetStream publish+ack"),
        "every published message consumed and acked"
    );
    assert!(ops("KV create") > 0.0);
    assert!(ops("PostgreSQL COPY row") >= 10.0);
    let firing = rows
        .iter()
        .find(|r| r.label == FIRING_LABEL)
        .expect("a firing's row");
    let limit: f64 = firing.notes[LIMIT_NOTE].parse().expect("a rate");
    assert!(limit > 0.0, "{firing:?}");
}

/// One test for both, as both point the harness at the private server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transport_floor_starts_and_appends_every_firing_once_and_the_limit_measures_each_operation(
) {
    // The bench refuses a server without autovacuum, as the shared test
    // server may be; a private one has it on.
    let pg = PgCluster::start(PgClusterOptions::default());
    std::env::set_var(PG_URL_ENV, pg.url(""));
    let args = |scenario: &str, more: &[&str]| {
        let base = ["chime-bench", scenario, "--warmup", "1", "--step", "2"];
        Args::parse_from(base.iter().chain(more))
    };
    let rows = transport_floor::run(&args("transport-floor", &["--rates", "50,20"]))
        .await
        .expect("the transport floor runs");
    assert_eq!(rows.len(), 2);
    rows.iter().for_each(assert_every_firing_once);
    let rows = limit::run(&args("limit", &["--limit-copy-rows", "10"]))
        .await
        .expect("the limit runs");
    assert_every_operation_measured(&rows);
}
