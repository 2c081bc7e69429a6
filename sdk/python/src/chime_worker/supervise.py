"""Supervised background loops: a loop that fails or stops early is started again.

The worker's loops (fetching, heartbeat, fence) must outlive any surprise
from the client library or a bug: a dead heartbeat loop would fence the
worker for good, a dead fetch loop would leave it idle. As in the Rust
worker's supervisor, each restart waits 100 ms doubling to 30 s and is
counted in ``chime_service_restarts_total``; a run that lasted 30 s counts as
healthy (the pause and the failure count start over), and a service that
failed 5 times in a row makes ``/healthz`` answer 503 naming it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .metrics import Metrics

log = logging.getLogger("chime_worker")

FIRST_RESTART = 0.1
MAX_RESTART = 30.0
#: A run that lasts this long, in seconds, counts as healthy.
HEALTHY_AFTER = 30.0
#: Failures in a row that make the worker unhealthy.
UNHEALTHY_AFTER = 5


class ServiceHealth:
    """The supervised services' failures in a row and last errors, for ``/healthz``."""

    def __init__(self) -> None:
        self._failures: dict[str, tuple[int, str]] = {}

    def failed(self, name: str, error: str, healthy_run: bool) -> None:
        count = 0 if healthy_run else self._failures.get(name, (0, ""))[0]
        self._failures[name] = (count + 1, error)

    def failing(self) -> list[tuple[str, str]]:
        """The services that keep failing, with their last error."""
        return [(name, error) for name, (count, error) in sorted(self._failures.items()) if count >= UNHEALTHY_AFTER]


async def supervise(
    name: str, loop: Callable[[], Awaitable[None]], stop: asyncio.Event, metrics: Metrics, health: ServiceHealth
) -> None:
    """Runs ``loop()`` until ``stop`` is set, starting it again whenever it
    raises or returns before that."""
    delay = FIRST_RESTART
    while True:
        began = time.monotonic()
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            log.exception("service %s failed", name)
        else:
            if stop.is_set():
                return
            error = "stopped early"
            log.error("service %s stopped early", name)
        if stop.is_set():
            return
        healthy_run = time.monotonic() - began >= HEALTHY_AFTER
        if healthy_run:
            delay = FIRST_RESTART
        health.failed(name, error, healthy_run)
        metrics.service_restart(name)
        log.info("restarting service %s in %gs", name, delay)
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
            return
        except asyncio.TimeoutError:
            pass
        delay = min(delay * 2, MAX_RESTART)
