"""The SDK's errors: each a case the caller can act on, naming the setting or thing at fault."""

from __future__ import annotations


class ChimeWorkerError(Exception):
    """Base class of every error this package raises."""


class ConfigError(ChimeWorkerError, ValueError):
    """A setting is invalid; ``setting`` names it."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"{setting} {reason}")
        self.setting = setting
        self.reason = reason


class HandlerRegistrationError(ChimeWorkerError, ValueError):
    """A handler name is invalid or registered twice."""


class ConnectError(ChimeWorkerError):
    """NATS could not be reached in time, or the server cannot run Chime."""
