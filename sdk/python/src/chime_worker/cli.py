"""Command-line settings of the SDK's programs, each with a ``CHIME_...`` environment twin.

The names and meanings are the Rust worker's and the conformance
interface's (``--nats-url``, ``--group``, ``--worker-id``,
``--subject-prefix``, ``--threads``, ``--drain-grace``, ``--count``), so a
test or a deployment drives every worker the same way. A bad value, from
the command line or the environment, is an error naming the flag.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .config import WorkerConfig
from .connection import DEFAULT_URL, NatsOptions

_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*")


def parse_duration(text: str) -> float:
    """Seconds from ``2.5``, ``2.5s``, ``500ms`` or ``1m``."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (seconds, or e.g. 500ms, 2s, 1m)")
    value = float(match.group(1))
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]


def parse_count(text: str) -> int:
    if not re.fullmatch(r"\s*\d{1,9}\s*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def parse_port(text: str) -> int:
    port = parse_count(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return port


# flag, environment variable, type, default, help
_FLAGS: list[tuple[str, str, Callable[[str], Any], Any, str]] = [
    ("--nats-url", "CHIME_NATS_URL", str, DEFAULT_URL, "NATS server URL(s), comma-separated"),
    ("--nats-user", "CHIME_NATS_USER", str, None, "NATS user name; needs --nats-password"),
    ("--nats-password", "CHIME_NATS_PASSWORD", str, None, "NATS password; needs --nats-user"),
    ("--nats-token", "CHIME_NATS_TOKEN", str, None, "NATS authentication token"),
    ("--nats-creds", "CHIME_NATS_CREDS", str, None, "NATS credentials file (JWT and NKey seed)"),
    ("--nats-nkey", "CHIME_NATS_NKEY", str, None, "file holding a NATS nkey seed (SU...)"),
    ("--nats-tls-ca", "CHIME_NATS_TLS_CA", str, None, "CA certificate (PEM) to verify the NATS server with"),
    ("--nats-tls-cert", "CHIME_NATS_TLS_CERT", str, None, "client certificate (PEM); needs --nats-tls-key"),
    ("--nats-tls-key", "CHIME_NATS_TLS_KEY", str, None, "client key (PEM); needs --nats-tls-cert"),
    ("--nats-inbox-prefix", "CHIME_NATS_INBOX_PREFIX", str, None, "subject prefix of reply inboxes"),
    ("--nats-connect-wait", "CHIME_NATS_CONNECT_WAIT", parse_duration, 10.0, "keep trying to reach NATS this long"),
    ("--group", "CHIME_GROUP", str, "default", "the group whose firings this worker runs"),
    ("--worker-id", "CHIME_WORKER_ID", str, None, "worker id (default: <hostname>-<8 random hex>)"),
    ("--subject-prefix", "CHIME_SUBJECT_PREFIX", str, "chime", "subject prefix of the installation"),
    ("--threads", "CHIME_THREADS", parse_count, 2, "firings run at once"),
    ("--drain-grace", "CHIME_DRAIN_GRACE", parse_duration, 30.0, "on SIGTERM, how long runs may finish"),
    ("--heartbeat-interval", "CHIME_HEARTBEAT_INTERVAL", parse_duration, 2.0, "heartbeat period"),
    ("--fence-margin", "CHIME_FENCE_MARGIN", parse_duration, 2.0, "key TTL minus this is the heartbeat lease"),
    ("--poll-interval", "CHIME_POLL_INTERVAL", parse_duration, 1.0, "idle fallback wake-up"),
    ("--metrics-port", "CHIME_METRICS_PORT", parse_port, None, "serve /metrics, /healthz, /readyz on this port"),
    ("--count", "CHIME_COUNT", parse_count, 0, "exit after this many finished events were stored (0: run until signalled)"),
]


def build_parser(prog: str, description: str, env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """A parser of every flag; a flag's default is its environment variable when set."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag, var, kind, default, help_text in _FLAGS:
        shown = "" if default is None else f" (default {default})"
        parser.add_argument(flag, type=kind, default=None, help=f"{help_text}{shown} [env {var}]")
        parser.set_defaults(**{_dest(flag): _env_or(parser, flag, var, kind, default, env)})
    return parser


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _env_or(
    parser: argparse.ArgumentParser, flag: str, var: str, kind: Callable[[str], Any], default: Any, env: Mapping[str, str]
) -> Any:
    text = env.get(var)
    if text is None or text == "":
        return default
    try:
        return kind(text)
    except (argparse.ArgumentTypeError, ValueError) as e:
        parser.error(f"{flag} (from {var}): {e}")


def parse_args(
    argv: Sequence[str] | None, prog: str, description: str, env: Mapping[str, str] | None = None
) -> argparse.Namespace:
    parser = build_parser(prog, description, env)
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    return args


def nats_options(args: argparse.Namespace) -> NatsOptions:
    return NatsOptions(
        url=args.nats_url,
        user=args.nats_user,
        password=args.nats_password,
        token=args.nats_token,
        creds_file=args.nats_creds,
        nkey_file=args.nats_nkey,
        tls_ca=args.nats_tls_ca,
        tls_cert=args.nats_tls_cert,
        tls_key=args.nats_tls_key,
        inbox_prefix=args.nats_inbox_prefix,
        connect_wait=args.nats_connect_wait,
    )


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    config = WorkerConfig(
        group=args.group,
        threads=args.threads,
        subject_prefix=args.subject_prefix,
        drain_grace=args.drain_grace,
        heartbeat_interval=args.heartbeat_interval,
        fence_margin=args.fence_margin,
        poll_interval=args.poll_interval,
        metrics_port=args.metrics_port,
    )
    if args.worker_id is not None:
        config.worker_id = args.worker_id
    return config
