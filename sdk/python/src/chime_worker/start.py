"""Asking the scheduler to start a firing: request/reply on the worker's own
``chime.worker.v1.start.<group>.<worker id>``, and what its answer means.

A timed-out request is asked once more: the first waits a quarter of the
start timeout (a request that reached a replica as it died is answered by
another half a second later), the second the whole of it (a slow but live
store). The scheduler answers a repeated start from the same worker the
same way, so asking twice is safe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from .timefmt import parse_time

START_ATTEMPTS = 2
FIRST_ATTEMPT_SHARE = 4
#: Deliveries of one firing the scheduler keeps rejecting before the worker drops it.
MAX_REJECTED_DELIVERIES = 8

#: Refusal reasons the metric label may take; any other is ``unspecified``.
REFUSALS = frozenset(
    {
        "already_started",
        "already_finished",
        "unknown_firing",
        "skipped",
        "queued",
        "cancelled",
        "wrong_group",
        "not_as_staged",
        "wrong_worker",
    }
)


@dataclass(frozen=True, slots=True)
class Accepted:
    """Run it; the scheduler's deadline, if it sent a readable one."""

    deadline: datetime | None


@dataclass(frozen=True, slots=True)
class Refused:
    """Drop it (ack, do not run); the reason if it is one this worker knows."""

    refusal: str | None


@dataclass(frozen=True, slots=True)
class Unavailable:
    """No decision (no scheduler, timeout, garbage, ``unavailable``): NAK it however often."""

    error: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """The scheduler cannot decide this firing for a reason of its own: asked
    again a bounded number of times, then dropped."""

    error: str


StartDecision = Accepted | Refused | Unavailable | Rejected


def rejected_delay(nak_delay: float, delivered: int) -> float:
    """How long a rejected firing stays away after its ``delivered``-th
    delivery: ``nak_delay`` doubling per delivery, at most a minute."""
    doublings = min(max(delivered - 1, 0), 16)
    return min(nak_delay * (1 << doublings), 60.0)


def decide(payload: bytes) -> StartDecision:
    """The decision a start reply carries. An unknown refusal is still a
    refusal; an unreadable deadline falls back to the message's own."""
    try:
        value: Any = json.loads(payload)
    except (ValueError, RecursionError) as e:
        shown = payload[:200].decode("utf-8", "replace")
        return Unavailable(f"unreadable start reply ({e}): {shown}")
    if not isinstance(value, dict):
        return Unavailable(f"unreadable start reply: {_short(value)}")
    accepted = value.get("accepted")
    if accepted is True:
        deadline = None
        if isinstance(value.get("deadline"), str):
            try:
                deadline = parse_time(value["deadline"])
            except ValueError:
                deadline = None
        return Accepted(deadline)
    if accepted is False:
        refusal = value.get("refusal")
        return Refused(refusal if refusal in REFUSALS else None)
    if "error" in value:
        error = value["error"]
        text = f"the scheduler answered with an error: {_short(error)}"
        if isinstance(error, dict) and error.get("code") == "unavailable":
            return Unavailable(text)
        return Rejected(text)
    return Unavailable(f"unreadable start reply: {_short(value)}")


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 500 else text[:500] + "..."


class Starter:
    """Asks to start firings for one worker of one group."""

    def __init__(self, client: NATS, subject: str, worker_id: str, group: str, timeout: float) -> None:
        self._client = client
        self._subject = subject
        self._worker_id = worker_id
        self._group = group
        self._timeout = timeout

    def request_body(self, firing_id: str, handler: str, payload_sha256: str) -> bytes:
        return json.dumps(
            {
                "firing_id": firing_id,
                "worker_id": self._worker_id,
                "group": self._group,
                "handler": handler,
                "payload_sha256": payload_sha256,
            },
            ensure_ascii=False,
        ).encode("utf-8")

    async def ask(self, firing_id: str, handler: str, payload_sha256: str) -> StartDecision:
        """Asks to start ``firing_id`` as it arrived (handler, body digest), and reads the decision."""
        body = self.request_body(firing_id, handler, payload_sha256)
        last = ""
        for attempt in range(1, START_ATTEMPTS + 1):
            wait = self._timeout / FIRST_ATTEMPT_SHARE if attempt == 1 else self._timeout
            try:
                reply = await self._client.request(self._subject, body, timeout=wait)
            except NatsTimeoutError:
                last = f"no answer within {wait:g}s"
                continue
            except NoRespondersError:
                return Unavailable("no scheduler answers start requests (no responders)")
            except Exception as e:
                return Unavailable(f"cannot send the start request: {e or type(e).__name__}")
            return decide(reply.data)
        return Unavailable(f"the start request timed out: {last}")
