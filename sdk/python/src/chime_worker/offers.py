"""Offers: the firings of broadcast jobs, addressed to this worker
(docs/PROTOCOL.md section 4, "Offers").

The scheduler sends each on ``chime.offer.<group>.<worker id>``, a core
NATS message with the headers and body of a firing message plus
``Chime-Worker-Id``, and offers it again every second until it starts. So
an offer is checked first (a bad one, or one for another worker, is
counted, logged and dropped); then one that cannot start now (no free
thread, fenced, draining) is dropped, not held; the rest take a thread and
the same path as a pulled message, with nothing to ack or NAK.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg

from .delivery import offered
from .dispatch import Dispatcher
from .fence import Fence
from .slots import Slots
from .status import WorkerStatus

log = logging.getLogger("chime_worker")


class OfferListener:
    """Takes the offers of one worker."""

    def __init__(
        self,
        worker_id: str,
        dispatcher: Dispatcher,
        slots: Slots,
        fence: Fence,
        status: WorkerStatus,
        spawn: Callable[[Awaitable[None]], None],
    ) -> None:
        self._worker_id = worker_id
        self._dispatcher = dispatcher
        self._slots = slots
        self._fence = fence
        self._status = status
        self._spawn = spawn

    def _cannot_start(self) -> str | None:
        """Why an offer cannot start now; ``None`` when it can."""
        if self._status.draining:
            return "draining"
        if self._fence.fenced:
            return "fenced"
        if self._slots.free <= 0:
            return "no free thread"
        return None

    async def on_offer(self, msg: Msg) -> None:
        delivery = offered(msg, self._worker_id)
        firing = await self._dispatcher.check(delivery)
        if firing is None:
            return
        why = self._cannot_start()
        if why is not None or not self._slots.try_take():
            log.info("firing %s: dropping its offer (%s); the scheduler offers it again", firing.firing_id, why or "no free thread")
            return
        # The spawned task gives the thread back when the run ends.
        self._spawn(self._dispatcher.take(delivery, firing))
