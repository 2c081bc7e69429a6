"""The worker's heartbeat: its info under ``<group>.<worker id>`` in KV ``chime-workers``.

The bucket drops a key ``worker_ttl`` (15 s) after its last write, which is
how the scheduler learns that a worker died. Each acknowledged beat renews
the worker's :class:`~chime_worker.fence.Fence` lease. Each beat lists the
firings the worker runs (``running``), so the scheduler finds a firing it
recorded as started here that this worker does not run within two beats,
the handlers it offers (``handlers``, for operators; the scheduler
ignores fields it does not know), and that it takes offers (``offers``:
the scheduler gives a share of each broadcast job only to such workers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from nats.js.kv import KeyValue

from ._version import __version__
from .aio import first_of
from .fence import Fence
from .running import Running
from .slots import Slots
from .subjects import heartbeat_key
from .timefmt import format_time, utc_now

log = logging.getLogger("chime_worker")

#: After a failed beat the next comes after this share of the interval.
RETRY_SHARE = 4
#: The longest one beat waits for its acknowledgement, in seconds.
BEAT_TIMEOUT = 1.0
#: What the heartbeat's ``version`` says.
VERSION = f"{__version__} (python)"


class Heartbeat:
    """Puts the worker's info every interval."""

    def __init__(
        self,
        kv: KeyValue,
        worker_id: str,
        group: str,
        slots: Slots,
        running: Running,
        handlers: list[str],
        interval: float,
    ) -> None:
        self._kv = kv
        self._id = worker_id
        self._group = group
        self._slots = slots
        self._running = running
        self._handlers = handlers
        self.interval = interval
        self.started_at = utc_now()
        self.key = heartbeat_key(group, worker_id)

    def info(self) -> dict[str, Any]:
        """The value written now."""
        info: dict[str, Any] = {
            "id": self._id,
            "group": self._group,
            "threads": self._slots.threads,
            "in_flight": self._slots.in_flight,
            "version": VERSION,
            "started_at": format_time(self.started_at),
        }
        running = self._running.listed()
        if running is not None:
            info["running"] = running
        info["handlers"] = self._handlers
        # The worker always subscribes to its offer subject (offers.py).
        info["offers"] = True
        return info

    async def beat_once(self) -> float:
        """One beat; returns the monotonic instant just before it was sent."""
        value = json.dumps(self.info()).encode()
        sent = time.monotonic()
        await asyncio.wait_for(self._kv.put(self.key, value), timeout=min(self.interval, BEAT_TIMEOUT))
        return sent

    async def run(self, fence: Fence, stop: asyncio.Event) -> None:
        """Beats every interval until ``stop``, renewing ``fence`` with each beat
        acknowledged; a failed beat is tried again after a quarter of the interval."""
        retry = max(self.interval / RETRY_SHARE, 0.05)
        pause = self.interval
        failing = False
        while True:
            await first_of(stop.wait(), timeout=pause)
            if stop.is_set():
                return
            try:
                sent = await self.beat_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                pause = retry
                if not failing:
                    failing = True
                    log.warning("heartbeat failed; retrying in %gs: %s", retry, error or type(error).__name__)
                continue
            fence.renew(sent, time.monotonic())
            if failing:
                failing = False
                log.info("heartbeat restored")
            pause = self.interval

    async def remove(self) -> None:
        """Deletes the key: the worker left cleanly."""
        try:
            await asyncio.wait_for(self._kv.delete(self.key), timeout=5.0)
        except Exception as error:
            log.warning("cannot delete the heartbeat key (it expires on its own): %s", error or "timed out")
