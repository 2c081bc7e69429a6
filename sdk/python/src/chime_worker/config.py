"""The worker's settings: defaults in one place, checked once.

Durations are in seconds. The defaults are the Rust worker's, and
:meth:`WorkerConfig.validate` refuses what it refuses, with the same
messages, so one set of settings means the same in every language.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import unicodedata
from dataclasses import dataclass, field

from .errors import ConfigError
from .subjects import DEFAULT_PREFIX, check_prefix
from .text import MAX_OUTPUT_BYTES, MAX_OUTPUT_LIMIT

DEFAULT_GROUP = "default"
MAX_GROUP_LEN = 64
MAX_WORKER_ID_LEN = 128
MAX_HANDLER_NAME_LEN = 128
#: How much longer than ``stop_grace`` the fence margin must be: timers run late on a loaded machine.
FENCE_SLACK = 0.25

_GROUP_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_WORKER_ID = re.compile(r"[A-Za-z0-9_-]+")


def default_threads() -> int:
    """The number of CPUs (1 if unknown)."""
    return os.cpu_count() or 1


def default_worker_id() -> str:
    """``<hostname>-<8 random hex digits>``, the hostname cut to valid characters."""
    host = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in socket.gethostname())
    host = host[:64].strip("-") or "worker"
    return f"{host}-{secrets.token_hex(4)}"


def check_group(group: str) -> str | None:
    """Why ``group`` is not a group name, or ``None``: 1-64 of ``A-Z a-z 0-9 . _ -``,
    dots separating non-empty subject tokens."""
    if not 1 <= len(group) <= MAX_GROUP_LEN:
        return f"must be 1 to {MAX_GROUP_LEN} characters, found {len(group)}"
    if not _GROUP_CHARS.fullmatch(group) or not group.isascii():
        bad = next(c for c in group if not (c.isascii() and (c.isalnum() or c in "._-")))
        return f"{bad!r} is not allowed; use only A-Z a-z 0-9 . _ -"
    if any(not token for token in group.split(".")):
        return "dots must separate non-empty parts (no leading, trailing or double dots)"
    return None


def check_worker_id(worker_id: str) -> str | None:
    """Why ``worker_id`` is not a worker id, or ``None``: 1-128 of ``A-Z a-z 0-9 - _``
    (it is a KV key and a subject token)."""
    if not 1 <= len(worker_id) <= MAX_WORKER_ID_LEN:
        return f"must be 1 to {MAX_WORKER_ID_LEN} characters"
    if not _WORKER_ID.fullmatch(worker_id) or not worker_id.isascii():
        bad = next(c for c in worker_id if not (c.isascii() and (c.isalnum() or c in "-_")))
        return f"{bad!r} is not allowed; use only A-Z a-z 0-9 - _"
    return None


def check_handler_name(name: str) -> str | None:
    """Why ``name`` cannot name a handler, or ``None``."""
    if not 1 <= len(name) <= MAX_HANDLER_NAME_LEN:
        return f"must be 1 to {MAX_HANDLER_NAME_LEN} characters"
    if any(unicodedata.category(c) == "Cc" for c in name):
        return "must not contain control characters"
    if name.strip() != name:
        return "must not start or end with whitespace"
    return None


@dataclass
class WorkerConfig:
    """How a worker runs. Every field has the Rust worker's default."""

    #: The group whose firings it runs.
    group: str = DEFAULT_GROUP
    #: Firings run at once (default: the number of CPUs).
    threads: int = field(default_factory=default_threads)
    #: A KV key and subject token; a restarted worker should take a new one.
    worker_id: str = field(default_factory=default_worker_id)
    #: Prefix of every subject, stream and bucket name, for several installations on one NATS.
    subject_prefix: str = DEFAULT_PREFIX
    #: Idle fallback wake-up: redeliveries and missed doorbells are picked up this late at most.
    poll_interval: float = 1.0
    #: Heartbeat period; must be well under the heartbeat lease.
    heartbeat_interval: float = 2.0
    #: On shutdown, how long running firings may take before they are stopped.
    drain_grace: float = 30.0
    #: On shutdown, how long unsent finished events are retried after the runs ended.
    flush_grace: float = 10.0
    #: Output tail kept per firing, in bytes.
    max_output_bytes: int = MAX_OUTPUT_BYTES
    #: How long a start request waits for the scheduler (the first of two waits a quarter of it).
    start_timeout: float = 2.0
    #: How long a firing that was not started stays away (NAK delay).
    nak_delay: float = 1.0
    #: The ``expires`` of every fetch: how long an empty band is waited on.
    fetch_expiry: float = 0.01
    #: After a handler is told to stop (deadline, cancel, fence, shutdown), how
    #: long it may take to return before its task is cancelled.
    stop_grace: float = 1.0
    #: The worker fences itself once no heartbeat was acknowledged for the
    #: bucket's key TTL minus this; must exceed ``stop_grace`` by ``FENCE_SLACK``.
    fence_margin: float = 2.0
    #: Serve ``/metrics``, ``/healthz`` and ``/readyz`` on this port (needs
    #: ``prometheus_client``: ``pip install 'chime-worker[metrics]'``); ``None``: not served.
    metrics_port: int | None = None
    #: The address the metrics port listens on.
    metrics_host: str = "127.0.0.1"

    def lease(self, worker_ttl: float) -> float:
        """How long the worker runs firings without an acknowledged heartbeat:
        ``worker_ttl - fence_margin``."""
        least = self.stop_grace + FENCE_SLACK
        if self.fence_margin < least:
            raise ConfigError(
                "fence_margin",
                f"must be at least stop_grace + {FENCE_SLACK}s ({least}s), found {self.fence_margin}s; "
                "otherwise a run may outlive the heartbeat key",
            )
        lease = worker_ttl - self.fence_margin
        if lease <= 0:
            raise ConfigError(
                "fence_margin",
                f"must be shorter than the workers bucket's key TTL ({worker_ttl}s), found {self.fence_margin}s",
            )
        return lease

    def validate(self, worker_ttl: float | None = None) -> None:
        """Checks every setting; with the heartbeat bucket's key TTL, the lease too.
        Raises :class:`ConfigError` naming the setting."""
        for setting, reason in (
            ("group", check_group(self.group)),
            ("worker_id", check_worker_id(self.worker_id)),
            ("subject_prefix", check_prefix(self.subject_prefix)),
        ):
            if reason is not None:
                value = getattr(self, setting)
                raise ConfigError(setting, f"{value!r} is invalid: {reason}")
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 1:
            raise ConfigError("threads", "must be at least 1 (it is the number of firings run at once)")
        positive = {
            "poll_interval": self.poll_interval,
            "heartbeat_interval": self.heartbeat_interval,
            "start_timeout": self.start_timeout,
            "fetch_expiry": self.fetch_expiry,
        }
        for setting, value in positive.items():
            if not value >= 0.001:
                raise ConfigError(setting, f"must be at least 1ms, found {value}s")
        others = {
            "drain_grace": self.drain_grace,
            "flush_grace": self.flush_grace,
            "nak_delay": self.nak_delay,
            "stop_grace": self.stop_grace,
        }
        for setting, value in others.items():
            if not value >= 0:
                raise ConfigError(setting, f"must not be negative, found {value}s")
        if not 1 <= self.max_output_bytes <= MAX_OUTPUT_LIMIT:
            raise ConfigError(
                "max_output_bytes", f"must be from 1 to {MAX_OUTPUT_LIMIT}, found {self.max_output_bytes}"
            )
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metrics_port", f"must be a port from 0 to 65535, found {self.metrics_port}")
        if worker_ttl is None:
            return
        lease = self.lease(worker_ttl)
        if self.heartbeat_interval >= lease:
            raise ConfigError(
                "heartbeat_interval",
                f"must be shorter than the heartbeat lease ({lease}s: the workers bucket's key TTL "
                f"{worker_ttl}s minus fence_margin {self.fence_margin}s), found {self.heartbeat_interval}s; "
                "otherwise the worker fences itself between beats",
            )
