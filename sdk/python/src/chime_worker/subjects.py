"""Names of Chime's NATS objects under a subject prefix (docs/PROTOCOL.md).

With prefix ``P``, every leading ``chime.`` becomes ``P.``, ``CHIME_``
becomes ``P`` upper-cased with ``-`` turned into ``_``, and ``chime-``
becomes ``P-``. Kept in one place so a name is spelled once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Bands, highest first: the order in which firings are fetched.
BANDS: tuple[str, str, str] = ("high", "normal", "low")

DEFAULT_PREFIX = "chime"
_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,32}")


def check_prefix(prefix: str) -> str | None:
    """Why ``prefix`` is not a subject prefix, or ``None`` when it is one."""
    if not 1 <= len(prefix) <= 32:
        return "the subject prefix must be 1 to 32 characters"
    if not _PREFIX.fullmatch(prefix):
        return f"the subject prefix {prefix!r} may only contain A-Z a-z 0-9 - _"
    return None


@dataclass(frozen=True, slots=True)
class Subjects:
    prefix: str = DEFAULT_PREFIX

    @property
    def _upper(self) -> str:
        return self.prefix.upper().replace("-", "_")

    @property
    def fire_stream(self) -> str:
        return f"{self._upper}_FIRE"

    @property
    def events_stream(self) -> str:
        return f"{self._upper}_EVENTS"

    @property
    def workers_bucket(self) -> str:
        return f"{self.prefix}-workers"

    def fire_consumer(self, group: str, band: str) -> str:
        """``fire_g_<group>_<band>``; a dotted group by its UTF-8 bytes in hex
        (consumer names cannot hold dots)."""
        if "." in group:
            return f"fire_h_{group.encode('utf-8').hex()}_{band}"
        return f"fire_g_{group}_{band}"

    def pull_request(self, consumer: str) -> str:
        return f"$JS.API.CONSUMER.MSG.NEXT.{self.fire_stream}.{consumer}"

    def ready(self, group: str) -> str:
        return f"{self.prefix}.ready.{group}"

    def start(self, group: str, worker_id: str) -> str:
        return f"{self.prefix}.worker.v1.start.{group}.{worker_id}"

    def finished(self, group: str, worker_id: str) -> str:
        return f"{self.prefix}.events.finished.{group}.{worker_id}"

    def cancel(self, worker_id: str) -> str:
        return f"{self.prefix}.cancel.{worker_id}"

    def offer(self, group: str, worker_id: str) -> str:
        """Where the scheduler offers this worker the firings of broadcast jobs addressed to it."""
        return f"{self.prefix}.offer.{group}.{worker_id}"


def heartbeat_key(group: str, worker_id: str) -> str:
    """``<group>.<worker id>``: NATS permissions confine a group's workers to their keys."""
    return f"{group}.{worker_id}"


def doorbell_bands(body: bytes) -> list[str]:
    """The bands a doorbell names (``normal``, ``high,low``); all of them when
    the body is empty, unreadable or names something else."""
    try:
        names = [name.strip() for name in body.decode("utf-8").split(",")]
    except UnicodeDecodeError:
        return list(BANDS)
    if names and all(name in BANDS for name in names):
        return names
    return list(BANDS)
