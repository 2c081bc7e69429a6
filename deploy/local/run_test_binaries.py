#!/usr/bin/env python3
"""Runs the workspace's test binaries several at a time (deploy/local/test.sh).

`cargo test` runs one test binary after another. Most of Chime's end-to-end
suites spend their time waiting (for a lease to lapse, a killed replica to be
replaced, a firing to come due), so run one at a time they leave the machine
mostly idle and the suite takes as long as all of their waits added up. This
builds the binaries as `cargo test` does (`--no-run`), runs up to `--jobs` of
them at once, each the way cargo runs it (in its package's directory, with
`CARGO` and `CARGO_MANIFEST_DIR` set), prints each one's output whole when it
ends, and then runs the doc-tests. It runs the whole workspace's tests;
test.sh uses `cargo test` itself when it is given a filter or options.

Not cargo-nextest: it runs every test in a process of its own, which would
repeat for each test what the harness does once per process (building the
workspace's binaries, the record of ports it handed out), and it would have to
be compiled from crates.io on every fresh CI machine.

The worker SDKs' own suites (sdk/python, sdk/typescript) run in the same
pool, first, as commands in their folders: SDK_SUITES lists them. test.sh
installs what they need (nats-py and pytest, `npm ci`) beforehand.

Usage: run_test_binaries.py [--jobs N]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


@dataclass
class TestBinary:
    """One test executable cargo built (or an SDK's suite), and where to run it."""

    package: str
    target: str
    kind: str
    executable: str
    manifest_dir: str
    arguments: tuple[str, ...] = ()

    def label(self) -> str:
        return f"{self.package} {self.kind} {self.target}"


ROOT = Path(__file__).resolve().parents[2]

# The worker SDKs' suites: (package folder, suite name, command).
SDK_SUITES = [
    ("sdk/typescript", "unit", ["npm", "test", "--silent"]),
    ("sdk/typescript", "integration", ["npm", "run", "--silent", "test:integration"]),
    ("sdk/typescript", "readme example", ["npm", "run", "--silent", "test:e2e"]),
    # The tests also start the conformance worker as a program: it imports
    # the package from the source tree too.
    ("sdk/python", "unit and NATS", ["sh", "-c", 'PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m pytest -q']),
    ("sdk/python", "readme example", ["scripts/e2e-installed.sh"]),
]


def sdk_suites() -> list[TestBinary]:
    """The SDK suites as entries of the pool."""
    return [
        TestBinary(
            package=folder,
            target=name,
            kind="suite",
            executable=command[0],
            manifest_dir=str(ROOT / folder),
            arguments=tuple(command[1:]),
        )
        for folder, name, command in SDK_SUITES
    ]


@dataclass
class Outcome:
    """How one test binary's run ended, and what it printed."""

    binary: TestBinary
    returncode: int
    seconds: float
    output: str


def build(cargo: str) -> list[TestBinary]:
    """Builds the workspace's test binaries and returns them in a stable order."""
    command = [cargo, "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"]
    print("+ " + " ".join(command), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    binaries = []
    assert process.stdout is not None
    for line in process.stdout:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact":
            continue
        if not message.get("profile", {}).get("test") or not message.get("executable"):
            continue
        target = message["target"]
        manifest_dir = Path(message["manifest_path"]).parent
        binaries.append(
            TestBinary(
                package=manifest_dir.name,
                target=target["name"],
                kind="/".join(target["kind"]),
                executable=message["executable"],
                manifest_dir=str(manifest_dir),
            )
        )
    if process.wait() != 0:
        sys.exit(f"error: `{' '.join(command)}` failed")
    binaries.sort(key=lambda b: (b.package, b.kind, b.target))
    return binaries


def run(binary: TestBinary, cargo: str) -> Outcome:
    """Runs one test binary to its end, its output kept in a file."""
    env = dict(os.environ, CARGO=cargo, CARGO_MANIFEST_DIR=binary.manifest_dir)
    with tempfile.TemporaryFile(mode="w+") as output:
        started = time.monotonic()
        returncode = subprocess.call(
            [binary.executable, *binary.arguments],
            cwd=binary.manifest_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        seconds = time.monotonic() - started
        output.seek(0)
        return Outcome(binary, returncode, seconds, output.read())


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Builds the test binaries with `cargo test --no-run` and runs several at once."
    )
    parser.add_argument("--jobs", type=int, default=3, help="test binaries running at once (default 3)")
    options = parser.parse_args()
    if options.jobs < 1:
        parser.error("--jobs must be at least 1")

    cargo = os.environ.get("CARGO") or shutil.which("cargo") or "cargo"
    binaries = sdk_suites() + build(cargo)
    # The SDK suites run the scheduler and chimectl; the harness of the
    # Rust suites builds them on first use, these look for them built.
    programs = [cargo, "build", "--workspace", "--examples", "--bin", "chime-scheduler", "--bin", "chime-worker", "--bin", "chimectl"]
    print("+ " + " ".join(programs), flush=True)
    if subprocess.call(programs, stdin=subprocess.DEVNULL) != 0:
        sys.exit(f"error: `{' '.join(programs)}` failed")
    print(f"running {len(binaries)} test binaries and SDK suites, {options.jobs} at a time", flush=True)

    printing = threading.Lock()
    outcomes: list[Outcome] = []

    def run_and_print(binary: TestBinary) -> None:
        outcome = run(binary, cargo)
        verdict = "ok" if outcome.returncode == 0 else f"FAILED (exit status {outcome.returncode})"
        with printing:
            outcomes.append(outcome)
            print(f"\n     Ran {binary.label()} in {outcome.seconds:.1f} s: {verdict}", flush=True)
            print(outcome.output, end="", flush=True)

    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        for future in [pool.submit(run_and_print, b) for b in binaries]:
            future.result()

    failed = [o for o in outcomes if o.returncode != 0]
    print("\n     Test binaries by time:")
    for outcome in sorted(outcomes, key=lambda o: -o.seconds):
        mark = "" if outcome.returncode == 0 else "  FAILED"
        print(f"{outcome.seconds:8.1f} s  {outcome.binary.label()}{mark}")
    if failed:
        print("\nerror: these test binaries failed (their output is above):", file=sys.stderr)
        for outcome in failed:
            print(f"    {outcome.binary.label()}", file=sys.stderr)
        return 1

    # `--no-run` builds no doc-tests; cargo runs them itself.
    doc = [cargo, "test", "--workspace", "--doc"]
    print("\n+ " + " ".join(doc), flush=True)
    return subprocess.call(doc, stdin=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
