"""The conformance worker's arguments: flags, environment fallbacks, defaults, and errors naming the flag."""

import subprocess
import sys

import pytest

from chime_worker import cli
from chime_worker.cli import parse_duration

PROG, DESC = "conformance", "test"


def parse(argv, env=None):
    return cli.parse_args(argv, PROG, DESC, env or {})


def test_defaults_follow_the_conformance_interface():
    args = parse([])
    assert args.nats_url == "nats://127.0.0.1:4222"
    assert (args.group, args.worker_id, args.subject_prefix) == ("default", None, "chime")
    assert (args.threads, args.drain_grace, args.count) == (2, 30.0, 0)
    config = cli.worker_config(args)
    assert config.threads == 2 and config.drain_grace == 30.0
    assert config.worker_id  # generated


def test_flags_win_over_the_environment_and_the_environment_over_defaults():
    env = {"CHIME_NATS_URL": "nats://env:4222", "CHIME_GROUP": "eu.reports", "CHIME_WORKER_ID": "w-env",
           "CHIME_SUBJECT_PREFIX": "other", "CHIME_THREADS": "7"}
    args = parse([], env)
    assert (args.nats_url, args.group, args.worker_id, args.subject_prefix, args.threads) == (
        "nats://env:4222", "eu.reports", "w-env", "other", 7)
    args = parse(["--group", "cli", "--threads", "3", "--drain-grace", "0.5", "--count", "4"], env)
    assert (args.group, args.threads, args.drain_grace, args.count) == ("cli", 3, 0.5, 4)
    options = cli.nats_options(parse(["--nats-user", "u", "--nats-password", "p"], env))
    assert (options.url, options.user, options.password) == ("nats://env:4222", "u", "p")


def test_durations_take_seconds_or_units():
    assert parse_duration("2") == 2.0
    assert parse_duration("0.5") == 0.5
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1m") == 60.0


@pytest.mark.parametrize(
    "argv, env, flag",
    [
        (["--threads", "0"], {}, "--threads"),
        (["--threads", "two"], {}, "--threads"),
        (["--drain-grace", "-1"], {}, "--drain-grace"),
        (["--count", "1.5"], {}, "--count"),
        (["--metrics-port", "70000"], {}, "--metrics-port"),
        ([], {"CHIME_THREADS": "many"}, "--threads"),
        (["--no-such-flag"], {}, "--no-such-flag"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(argv, env, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(argv, env)
    assert exit_.value.code == 2
    assert flag in capsys.readouterr().err


def run_module(*argv):
    return subprocess.run(
        [sys.executable, "-m", "chime_worker.conformance", *argv],
        capture_output=True, text=True, timeout=60,
    )


def test_the_program_refuses_bad_settings_before_connecting():
    result = run_module("--group", "a..b")
    assert result.returncode == 2
    assert "group" in result.stderr and "dots" in result.stderr
    assert result.stdout == ""
    result = run_module("--worker-id", "a.b")
    assert result.returncode == 2 and "worker_id" in result.stderr


def test_the_program_exits_1_naming_the_url_when_nats_is_unreachable():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_module("--nats-url", f"nats://127.0.0.1:{port}", "--nats-connect-wait", "1")
    assert result.returncode == 1
    assert f"cannot reach NATS at nats://127.0.0.1:{port} within 1s" in result.stderr
    assert result.stdout == ""
