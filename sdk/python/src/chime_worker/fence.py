"""Self-fencing: a worker that could not write a heartbeat for its whole lease
stops its runs before the scheduler can re-queue them (docs/PROTOCOL.md section 7).

The scheduler re-queues a firing only once its worker's heartbeat key is
gone, and the bucket drops a key ``worker_ttl`` after the server stored its
last write. Let ``s`` be the monotonic instant just before the newest
heartbeat put the server acknowledged: the key lives until at least
``s + worker_ttl``. The worker fences at ``s + lease`` with
``lease = worker_ttl - fence_margin``: every run is stopped (its handler's
``cancelled`` set, its task cancelled ``stop_grace`` later), and since
``fence_margin > stop_grace``, every run is over before any re-queue.
Monotonic time keeps this true whatever the wall clocks do.

Fenced runs end ``failed`` with ``interrupted: fenced``; while fenced the
worker fetches nothing and NAKs what it had fetched; the first heartbeat
sent less than a lease ago that is acknowledged lifts the fence.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .aio import first_of
from .metrics import Metrics
from .running import Running
from .status import WorkerStatus

log = logging.getLogger("chime_worker")


class Fence:
    """The worker's heartbeat lease and the fence that ends it."""

    def __init__(self, lease: float, renewed: float, running: Running, status: WorkerStatus, metrics: Metrics) -> None:
        self.lease = lease
        #: Monotonic send instant of the newest heartbeat the server acknowledged.
        self.renewed = renewed
        self.fenced = False
        self._running = running
        self._status = status
        self._metrics = metrics
        self._changed = asyncio.Event()
        self._lifted = asyncio.Event()
        self._lifted.set()

    def renew(self, sent: float, now: float) -> None:
        """A heartbeat sent at ``sent`` was acknowledged (observed at ``now``).
        Lifts the fence unless that heartbeat is itself older than the lease."""
        if sent > self.renewed:
            self.renewed = sent
            self._changed.set()
        if self.fenced and now < sent + self.lease:
            self.fenced = False
            self._status.fenced = False
            self._running.unfence()
            self._lifted.set()
            log.info("heartbeat written again: fence lifted, fetching firings again")

    async def lifted(self) -> None:
        """Returns once the worker is not fenced."""
        await self._lifted.wait()

    def check(self, now: float) -> int | None:
        """One check at monotonic ``now``: fences the worker if its lease ran out.
        Returns how many runs it stopped, ``None`` if it did not fence now."""
        if self.fenced:
            return None
        silent = now - self.renewed
        if silent < self.lease:
            return None
        reason = f"fenced: no heartbeat for {silent:.1f}s"
        self.fenced = True
        self._lifted.clear()
        self._status.fenced = True
        stopped = self._running.fence(reason)
        self._metrics.fenced()
        log.error(
            "%s: stopping %d run(s) and fetching nothing until a heartbeat succeeds, "
            "so that no firing runs here while the scheduler re-queues it",
            reason,
            stopped,
        )
        return stopped

    async def run(self, stop: asyncio.Event) -> None:
        """Checks whenever the lease can have run out, until ``stop``."""
        while not stop.is_set():
            if self.fenced:
                await first_of(stop.wait(), self._lifted.wait())
                continue
            self._changed.clear()
            expires_in = self.renewed + self.lease - time.monotonic()
            if expires_in <= 0:
                self.check(time.monotonic())
                continue
            await first_of(stop.wait(), self._changed.wait(), timeout=expires_in)

