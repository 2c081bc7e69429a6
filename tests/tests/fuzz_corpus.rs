//! Replays the committed fuzz inputs on stable (docs/FUZZING.md): every
//! file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` goes
//! through the same body `cargo fuzz run <target>` runs, so what fuzzing
//! found once stays fixed without nightly or cargo-fuzz.

use chime_tests::fuzz_targets::{self, Target};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Every input of every target's directories; fails naming each input that
/// panics, after trying them all.
#[test]
fn every_committed_fuzz_input_passes() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut failed = Vec::new();
    for (name, body) in fuzz_targets::TARGETS {
        let inputs = inputs_of(&fuzz, name);
        assert!(
            !inputs.is_empty(),
            "fuzz/corpus/{name}/ holds no inputs to replay"
        );
        failed.extend(
            inputs
                .iter()
                .filter(|input| !passes(body, input))
                .map(|input| input.display().to_string()),
        );
    }
    assert!(
        failed.is_empty(),
        "{} inputs fail (their panics are printed above): {failed:#?}",
        failed.len()
    );
}

fn inputs_of(fuzz: &Path, name: &str) -> Vec<PathBuf> {
    let mut inputs: Vec<PathBuf> = ["corpus", "regressions"]
        .iter()
        .map(|kind| fuzz.join(kind).join(name))
        .filter(|dir| dir.is_dir())
        .flat_map(|dir| {
            std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .map(|entry| entry.expect("a directory entry").path())
                .collect::<Vec<_>>()
        })
        .collect();
    inputs.sort();
    inputs
}

fn passes(body: Target, input: &Path) -> bool {
    let data = std::fs::read(input).unwrap_or_else(|e| panic!("reading {}: {e}", input.display()));
    let passed = catch_unwind(AssertUnwindSafe(|| body(&data))).is_ok();
    if !passed {
        eprintln!("^ {}", input.display());
    }
    passed
}
