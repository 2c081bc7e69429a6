"""The firings this worker holds now, and those it finished lately.

Cancel requests find a run here by firing id; heartbeats list the firings
the worker owes the scheduler a report on (:meth:`Running.listed`). It also
keeps one attempt from running twice here: JetStream can deliver an attempt
again (a lost ack, an ack after the ack wait) and the scheduler accepts a
repeated start from the same worker, so the worker itself drops a delivery
of an attempt it is running or has just finished.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

#: How long a finished attempt is remembered, in seconds.
RECENT_FOR = 600.0
#: The most finished attempts remembered.
RECENT_MAX = 10_000
#: The most firing ids a heartbeat lists; past it the list is left out.
MAX_LISTED_RUNNING = 1_000


@dataclass(frozen=True, slots=True)
class StopReason:
    """Why a run was stopped from outside, and the outcome it then reports."""

    outcome: str
    reason: str
    #: ``fenced`` or ``shutdown`` when the worker stopped the run for a fault not the job's.
    interrupted: str | None = None


class RunControl:
    """How one run is stopped from outside: an event and the first reason given."""

    def __init__(self) -> None:
        self.stopped_event = asyncio.Event()
        self.stopped: StopReason | None = None

    def cancel(self, reason: str) -> None:
        """Cancels the run (outcome ``cancelled``); the first reason is the one reported."""
        self._stop(StopReason("cancelled", reason))

    def interrupt(self, interrupted: str, reason: str) -> None:
        """Stops the run for a fault of the worker or of NATS: it reports
        ``failed`` with ``interrupted``, which the scheduler runs again
        without spending the job's attempts."""
        self._stop(StopReason("failed", reason, interrupted))

    def _stop(self, stop: StopReason) -> None:
        if self.stopped is None:
            self.stopped = stop
        self.stopped_event.set()


class Running:
    """Firings held by this worker."""

    def __init__(self) -> None:
        self._running: dict[str, RunControl] = {}
        # Accepted starts whose finished event JetStream has not acknowledged.
        self._listed: set[str] = set()
        self._recent: set[str] = set()
        self._recent_order: deque[tuple[float, str]] = deque()
        self._closed: str | None = None
        self._fenced: str | None = None

    def claim(self, firing_id: str) -> RunControl | None:
        """Claims ``firing_id`` for a start; ``None`` when this worker holds or just finished it.
        After a shutdown's grace or during a fence the claim comes back already stopped."""
        if firing_id in self._running or firing_id in self._recent:
            return None
        control = RunControl()
        if self._closed is not None:
            control.interrupt("shutdown", self._closed)
        elif self._fenced is not None:
            control.interrupt("fenced", self._fenced)
        self._running[firing_id] = control
        return control

    def release(self, firing_id: str) -> None:
        """Gives back a claim whose start was not accepted."""
        self._running.pop(firing_id, None)

    def accepted(self, firing_id: str) -> None:
        """The scheduler accepted the start: listed in heartbeats until :meth:`reported`."""
        self._listed.add(firing_id)

    def reported(self, firing_id: str) -> None:
        """JetStream acknowledged the finished event (or the worker gave up on it)."""
        self._listed.discard(firing_id)

    def listed(self) -> list[str] | None:
        """What a heartbeat lists as running: every start asked for or accepted
        whose finished event is not acknowledged yet; ``None`` past
        :data:`MAX_LISTED_RUNNING` (the scheduler then judges the worker by its key alone)."""
        ids = self._listed | self._running.keys()
        if len(ids) > MAX_LISTED_RUNNING:
            return None
        return sorted(ids)

    def finish(self, firing_id: str, now: float) -> None:
        """The run of ``firing_id`` ended at monotonic time ``now``."""
        self._running.pop(firing_id, None)
        while self._recent_order:
            at, old = self._recent_order[0]
            if now - at < RECENT_FOR and len(self._recent_order) < RECENT_MAX:
                break
            self._recent_order.popleft()
            self._recent.discard(old)
        if firing_id not in self._recent:
            self._recent.add(firing_id)
            self._recent_order.append((now, firing_id))

    def cancel(self, firing_id: str, reason: str) -> bool:
        """Cancels the run of ``firing_id``; ``False`` if it does not run here."""
        control = self._running.get(firing_id)
        if control is None:
            return False
        control.cancel(reason)
        return True

    def interrupt_all(self, reason: str) -> int:
        """Stops every run, and every run claimed later, at the end of a
        shutdown's drain grace: ``failed``, interrupted by the shutdown, never
        ``cancelled``. Returns how many ran."""
        self._closed = reason
        for control in self._running.values():
            control.interrupt("shutdown", reason)
        return len(self._running)

    def fence(self, reason: str) -> int:
        """Stops every run, and every run claimed until :meth:`unfence`,
        ``failed`` and interrupted by the fence. Returns how many ran."""
        self._fenced = reason
        for control in self._running.values():
            control.interrupt("fenced", reason)
        return len(self._running)

    def unfence(self) -> None:
        self._fenced = None

    def __len__(self) -> int:
        return len(self._running)
