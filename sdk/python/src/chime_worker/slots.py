"""Threads as slots: a firing holds one from fetch until its run ends.

``free = threads - in_flight`` is how many messages the pull loop may
fetch; a slot coming back wakes the pull loop. The worker runs on one event
loop, so plain counters are enough.
"""

from __future__ import annotations

import asyncio

from .metrics import Metrics


class Slots:
    def __init__(self, threads: int, metrics: Metrics) -> None:
        self.threads = threads
        self.in_flight = 0
        self._metrics = metrics
        self._freed = asyncio.Event()
        metrics.set_in_flight(0, threads)

    @property
    def free(self) -> int:
        return self.threads - self.in_flight

    def try_take(self) -> bool:
        """Takes a free thread; ``False`` when none is free."""
        if self.in_flight >= self.threads:
            return False
        self.in_flight += 1
        self._metrics.set_in_flight(self.in_flight, self.threads)
        return True

    def give_back(self) -> None:
        """Frees a thread taken with :meth:`try_take`."""
        self.in_flight = max(self.in_flight - 1, 0)
        self._metrics.set_in_flight(self.in_flight, self.threads)
        self._freed.set()

    async def freed(self) -> None:
        """Returns once a thread was freed since the last call."""
        await self._freed.wait()
        self._freed.clear()
