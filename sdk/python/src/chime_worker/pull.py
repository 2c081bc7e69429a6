"""The fetch loop: pulls as many firings as there are free threads, highest band first
(docs/PROTOCOL.md section 2).

- ``free = threads - in_flight``; nothing is fetched that cannot start now
  (no pull-ahead: a buffered message would run down its ack wait).
- A round fetches up to ``free`` from ``high``, then what is still free from
  ``normal``, then from ``low``. Each fetch is a pull request with ``batch``,
  ``no_wait`` and a short ``expires``, spoken on the wire (nats-py's fetch
  has a floor on its expiry): the server answers at once with what is
  there, and a status message ends the batch.
- A band that returned fewer messages than asked is drained and not fetched
  again until the doorbell ``chime.ready.<group>`` names it or the poll
  interval passes (redeliveries, missed doorbells).
- A doorbell that rings while a fetch is in flight is remembered (the bands
  it names are noted, and the note is taken before the next round), so the
  loop never sleeps with firings waiting.
- While the worker is fenced it fetches nothing.
- Each fetched message's server timestamp feeds the clock offset estimate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from .ackinfo import AckInfo, parse_ack_subject
from .aio import first_of
from .clock import ClockOffset
from .fence import Fence
from .metrics import Metrics
from .slots import Slots
from .subjects import BANDS, Subjects, doorbell_bands

log = logging.getLogger("chime_worker")

#: How long after ``expires`` a fetch whose end-of-batch status never came is given up on.
LOST_STATUS_MARGIN = 5.0
#: Statuses that end a batch normally: no messages now (404), ``expires`` passed (408).
_BATCH_OVER = {"404", "408"}


class FetchError(Exception):
    pass


class Puller:
    """The fetch loop of one worker."""

    def __init__(
        self,
        client: NATS,
        subjects: Subjects,
        group: str,
        slots: Slots,
        fence: Fence,
        metrics: Metrics,
        poll_interval: float,
        fetch_expiry: float,
        spawn: Callable[[Msg], None],
    ) -> None:
        self._client = client
        self._subjects = subjects
        self._group = group
        self._slots = slots
        self._fence = fence
        self._metrics = metrics
        self._poll_interval = poll_interval
        self._fetch_expiry = fetch_expiry
        self._spawn = spawn
        self._consumers = [subjects.fire_consumer(group, band) for band in BANDS]
        self._clock = ClockOffset()
        self.maybe_work = [True, True, True]
        self._rung: set[str] = set()
        self._wake = asyncio.Event()
        self._subscriptions: list[Subscription] = []

    async def open(self) -> None:
        """Subscribes to the doorbell."""
        self._subscriptions = [
            await self._client.subscribe(self._subjects.ready(self._group), cb=self._on_doorbell),
        ]

    async def close(self) -> None:
        for subscription in self._subscriptions:
            try:
                await subscription.unsubscribe()
            except Exception as error:
                log.debug("unsubscribing the fetch loop: %s", error)
        self._subscriptions = []

    async def _on_doorbell(self, msg: Msg) -> None:
        self._rung.update(doorbell_bands(msg.data))
        self._wake.set()

    async def _hand_back(self, msg: Msg) -> None:
        """A firing that came after its pull request was over goes back at once, for any worker."""
        if (msg.headers or {}).get("Status") or self._ack_info(msg) is None:
            return
        try:
            await self._client.publish(msg.reply, b"-NAK")
        except Exception as error:
            log.debug("cannot hand back a late message: %s", error)

    def _ack_info(self, msg: Msg) -> AckInfo | None:
        info = parse_ack_subject(msg.reply)
        if info is None or info.stream != self._subjects.fire_stream or info.consumer not in self._consumers:
            return None
        return info

    def take_doorbells(self) -> None:
        """Notes the bands doorbells named since the last round; cleared before fetching."""
        self._wake.clear()
        for i, band in enumerate(BANDS):
            if band in self._rung:
                self.maybe_work[i] = True
        self._rung.clear()

    async def run(self, stop: asyncio.Event) -> None:
        """Fetches and dispatches until ``stop`` is set."""
        next_poll = time.monotonic() + self._poll_interval
        while not stop.is_set():
            if self._fence.fenced:
                await first_of(stop.wait(), self._fence.lifted())
                self.maybe_work = [True, True, True]
                continue
            self.take_doorbells()
            fetched, errors = await self.run_once()
            free = self._slots.free
            if not errors and fetched and free > 0 and any(self.maybe_work):
                continue
            if self._wake.is_set():
                continue
            waits: list[Awaitable[object]] = [stop.wait(), self._wake.wait()]
            if free == 0:
                waits.append(self._slots.freed())
            timeout = max(next_poll - time.monotonic(), 0.0)
            await first_of(*waits, timeout=timeout)
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + self._poll_interval
                self.maybe_work = [True, True, True]

    async def run_once(self) -> tuple[int, int]:
        """One round: up to the free threads, high band first. Returns (fetched, errors)."""
        fetched = errors = 0
        for i, consumer in enumerate(self._consumers):
            free = self._slots.free
            if free == 0:
                break
            if not self.maybe_work[i]:
                continue
            try:
                got = await self.fetch(consumer, free)
            except FetchError as error:
                self._metrics.fetch_error()
                errors += 1
                log.warning("fetching firings of band %s failed: %s", BANDS[i], error)
                continue
            fetched += got
            if got < free:
                self.maybe_work[i] = False
        return fetched, errors

    async def fetch(self, consumer: str, batch: int) -> int:
        """One pull request for up to ``batch`` messages on an inbox of its own
        (JetStream delivers under the messages' own subjects, so only the
        subscription tells requests apart); dispatches each as it arrives."""
        queue: asyncio.Queue[Msg] = asyncio.Queue()
        inbox = self._client.new_inbox()
        try:
            subscription = await self._client.subscribe(inbox, cb=_put_into(queue))
        except Exception as error:
            raise FetchError(f"cannot subscribe to a reply inbox: {error}") from error
        got = 0
        try:
            request = {"batch": batch, "no_wait": True, "expires": int(self._fetch_expiry * 1e9)}
            try:
                await self._client.publish(self._subjects.pull_request(consumer), json.dumps(request).encode(), reply=inbox)
            except Exception as error:
                raise FetchError(f"cannot send the pull request: {error}") from error
            give_up = time.monotonic() + self._fetch_expiry + LOST_STATUS_MARGIN
            while got < batch:
                try:
                    msg = await asyncio.wait_for(queue.get(), timeout=max(give_up - time.monotonic(), 0.0))
                except asyncio.TimeoutError:
                    raise FetchError("the server did not end the batch") from None
                status = (msg.headers or {}).get("Status")
                if status:
                    if status in _BATCH_OVER:
                        break
                    description = (msg.headers or {}).get("Description", "")
                    raise FetchError(f"status {status} {description}".strip())
                if self._accept(msg):
                    got += 1
        finally:
            try:
                await subscription.unsubscribe()
            except Exception as error:
                log.debug("unsubscribing a reply inbox: %s", error)
            while not queue.empty():
                await self._hand_back(queue.get_nowait())
        return got

    def _accept(self, msg: Msg) -> bool:
        """Takes a thread for a fetched firing and starts its task; a message that is
        not a delivery of this group's consumers (published into the inbox) is dropped."""
        info = self._ack_info(msg)
        if info is None:
            log.warning("ignoring a message in the fetch inbox that is not a firing delivery (reply %r)", msg.reply)
            return False
        now = time.monotonic()
        self._clock.observe(now, info.timestamp_ns, time.time_ns())
        estimate = self._clock.estimate(now)
        if estimate is not None:
            self._metrics.clock_offset(estimate)
        if not self._slots.try_take():
            # An offer took the thread while the fetch was in flight.
            log.info("fetched a firing after an offer took its thread; handing it back")
            asyncio.ensure_future(self._hand_back(msg))
            return False
        self._spawn(msg)
        return True



def _put_into(queue: asyncio.Queue[Msg]) -> Callable[[Msg], Awaitable[None]]:
    async def put(msg: Msg) -> None:
        queue.put_nowait(msg)

    return put
