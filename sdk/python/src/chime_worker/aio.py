"""Small asyncio helpers shared by the worker's loops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def first_of(*waits: Awaitable[Any], timeout: float | None = None) -> None:
    """Waits until the first of ``waits`` is done, at most ``timeout`` seconds;
    the others are cancelled. The loops use it to sleep until whichever of
    stop, wake-up or timer comes first."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
