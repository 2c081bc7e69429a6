"""Handlers: async functions registered by name, and the error a run fails with.

The set is fixed once the worker starts, which also bounds the ``handler``
metric label: a firing for a name not registered is labelled ``unknown``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from .config import check_handler_name
from .context import FiringContext
from .errors import HandlerRegistrationError

#: A handler: an async function of the firing's context. What it returns is
#: the run's output: ``str`` as is, ``bytes`` decoded (invalid UTF-8 replaced),
#: ``None`` for no output, anything else as JSON.
Handler = Callable[[FiringContext], Awaitable[Any]]


class HandlerError(Exception):
    """A failed run: ``message`` becomes the firing's error, ``output`` (the
    output so far, if any) its output. Any other exception fails the run too,
    with ``<ExceptionType>: <message>`` as its error."""

    def __init__(self, message: str, output: str | bytes | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.output = output


def output_text(value: Any) -> str | bytes | None:
    """What a handler returned, as output: text or bytes kept, ``None`` for none, anything else as JSON."""
    if value is None or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


class Handlers:
    """Handlers by name."""

    def __init__(self) -> None:
        self._by_name: dict[str, Handler] = {}

    def add(self, name: str, handler: Handler) -> None:
        """Registers ``handler`` under ``name`` (what a job's ``handler`` field names)."""
        if not isinstance(name, str):
            raise HandlerRegistrationError(f"handler name {name!r} is invalid: must be a string")
        reason = check_handler_name(name)
        if reason is not None:
            raise HandlerRegistrationError(f"handler name {name!r} is invalid: {reason}")
        if name in self._by_name:
            raise HandlerRegistrationError(f"handler {name!r} is registered twice")
        if not (inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))):
            raise HandlerRegistrationError(
                f"handler {name!r} must be an async function (async def ...(ctx)); "
                "run blocking work inside it with asyncio.to_thread"
            )
        self._by_name[name] = handler

    def get(self, name: str) -> Handler | None:
        return self._by_name.get(name)

    def label(self, name: str) -> str:
        """The metric label for ``name``: itself if registered, else ``unknown``."""
        return name if name in self._by_name else "unknown"

    def names(self) -> list[str]:
        return sorted(self._by_name)
