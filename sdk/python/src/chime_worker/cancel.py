"""Cancel requests: core NATS ``chime.cancel.<worker id>``, ``{"firing_id", "reason"}`` each.

A request for a firing that runs here stops it (outcome ``cancelled``, error
= the reason); requests for other firings and unreadable ones are ignored.
A request with a reply subject is answered ``{"running": true|false}``.
"""

from __future__ import annotations

import json
import logging

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from .firing_id import parse_firing_id
from .running import Running

log = logging.getLogger("chime_worker")


def read_cancel(body: bytes) -> tuple[str, str] | None:
    """The firing id and reason of a cancel request, ``None`` when it is not one."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(request, dict):
        return None
    firing_id, reason = request.get("firing_id"), request.get("reason")
    if not isinstance(firing_id, str) or not isinstance(reason, str):
        return None
    try:
        return str(parse_firing_id(firing_id)), reason
    except ValueError:
        return None


class CancelListener:
    def __init__(self, client: NATS, running: Running) -> None:
        self._client = client
        self._running = running

    async def on_request(self, msg: Msg) -> None:
        request = read_cancel(msg.data)
        if request is None:
            log.warning("ignoring an unreadable cancel request")
            found = False
        else:
            firing_id, reason = request
            found = self._running.cancel(firing_id, reason)
            log.info("cancel request for %s (%s): %s", firing_id, reason, "stopping it" if found else "not running here")
        if msg.reply:
            try:
                await self._client.publish(msg.reply, json.dumps({"running": found}).encode())
            except Exception as error:
                log.debug("cannot answer a cancel request: %s", error)
