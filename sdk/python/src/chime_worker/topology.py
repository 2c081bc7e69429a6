"""Finding Chime's NATS objects. Only schedulers create streams, buckets and
consumers (one owner, one set of settings); a worker looks them up and,
while one is missing, waits for a scheduler to create it, with no time limit.

A scheduler creates a group's three consumers when it has jobs of the group
or sees a heartbeat of a worker of the group, so a worker writes its first
heartbeat before it waits for its consumers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .status import WorkerStatus

log = logging.getLogger("chime_worker")

T = TypeVar("T")

#: First and longest pause between two looks, in seconds.
FIRST_RETRY = 0.1
MAX_RETRY = 5.0
#: How often a wait that goes on is logged again, in seconds.
LOG_EVERY = 30.0


def awaited(kind: str, name: str) -> str:
    """What a scheduler is asked to create, as logged and shown by ``/readyz``."""
    return f"a scheduler to create {kind} {name}"


async def wait_for(status: WorkerStatus, what: str, find: Callable[[], Awaitable[T]]) -> T:
    """Calls ``find`` until it succeeds, pausing 100 ms doubling to 5 s, logging
    what it waits for; ``status`` says so meanwhile. Cancel the task to give up."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    delay = FIRST_RETRY
    logged: float | None = None
    while True:
        try:
            found = await find()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            status.waiting_for = what
            if logged is None or loop.time() - logged >= LOG_EVERY:
                logged = loop.time()
                log.warning("waiting for %s (%.1fs so far): %s", what, loop.time() - began, error or type(error).__name__)
        else:
            if logged is not None:
                log.info("found %s after %.1fs", what.removeprefix("a scheduler to create "), loop.time() - began)
            status.waiting_for = None
            return found
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_RETRY)
