"""How a firing message reached the worker, and how the worker settles it.

A pulled message is a JetStream delivery: the worker acks, NAKs or
terminates it on its ack subject (docs/PROTOCOL.md sections 3 and 4). An
offer, a broadcast job's firing addressed to this worker (section 4,
"Offers"), is a core NATS message: there is nothing to settle, and the
scheduler offers it again every second until it starts. Both take the one
path of :class:`~chime_worker.dispatch.Dispatcher`; only the acker differs.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Protocol

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from .ackinfo import parse_ack_subject

log = logging.getLogger("chime_worker")

ACK = b"+ACK"
TERM = b"+TERM"


def nak(delay: float) -> bytes:
    """``-NAK {"delay": <ns>}``: redelivered after ``delay`` seconds."""
    return b"-NAK " + json.dumps({"delay": int(delay * 1e9)}).encode()


class Acker(Protocol):
    """Settles one firing message."""

    #: The message's delivery count, 1 on the first delivery.
    delivered: int
    #: What a bad message's settlement does, for the log.
    discards: str

    async def ack(self, firing_id: str | None = None) -> None: ...

    async def nak(self, delay: float, firing_id: str | None = None) -> None: ...

    async def term(self, firing_id: str | None = None) -> None: ...


class JetStreamAcker:
    """Acks, NAKs and terminates a fetched message on its ack subject."""

    discards = "terminating"

    def __init__(self, client: NATS, msg: Msg) -> None:
        self._client = client
        self._reply = msg.reply
        info = parse_ack_subject(msg.reply)
        self.delivered = info.delivered if info is not None else 1

    async def _send(self, body: bytes, firing_id: str | None) -> None:
        try:
            await self._client.publish(self._reply, body)
        except Exception as error:
            log.warning("firing %s: cannot acknowledge (%s); JetStream will redeliver it: %s", firing_id, body[:4], error)

    async def ack(self, firing_id: str | None = None) -> None:
        await self._send(ACK, firing_id)

    async def nak(self, delay: float, firing_id: str | None = None) -> None:
        await self._send(nak(delay), firing_id)

    async def term(self, firing_id: str | None = None) -> None:
        await self._send(TERM, firing_id)


class OfferAcker:
    """An offer is not a JetStream message: whatever becomes of it, nothing is sent."""

    delivered = 1
    discards = "dropping"

    async def ack(self, firing_id: str | None = None) -> None:
        pass

    async def nak(self, delay: float, firing_id: str | None = None) -> None:
        pass

    async def term(self, firing_id: str | None = None) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Delivery:
    """A firing message as it arrived, and how to settle it."""

    msg: Msg
    acker: Acker
    #: For an offer, the worker its ``Chime-Worker-Id`` must name (this one).
    addressee: str | None = None

    @property
    def what(self) -> str:
        return "offer" if self.addressee is not None else "message"


def pulled(client: NATS, msg: Msg) -> Delivery:
    """A message fetched from one of the group's consumers."""
    return Delivery(msg, JetStreamAcker(client, msg))


def offered(msg: Msg, worker_id: str) -> Delivery:
    """An offer on this worker's offer subject."""
    return Delivery(msg, OfferAcker(), addressee=worker_id)
