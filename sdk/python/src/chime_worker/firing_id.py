"""Firing ids: ``<job id>@<scheduled ms>#<attempt>``, or
``<job id>@<scheduled ms>.<shard>#<attempt>`` for a shard of a sharded job.

Job ids never contain ``@``, so the id splits at its last ``@`` and then at
the first ``#``. Numbers are read as the Rust worker reads them (an
optional sign on the instant, digits only for the shard), so a message one
worker rejects is rejected by every worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_I64 = re.compile(r"[+-]?\d{1,19}")
_U32 = re.compile(r"\+?\d{1,10}")
_DIGITS = re.compile(r"\d{1,10}")
_I64_RANGE = (-(2**63), 2**63 - 1)
_U32_MAX = 2**32 - 1


@dataclass(frozen=True, slots=True)
class FiringId:
    """One attempt of one scheduled instant (one shard of it) of one job."""

    job_id: str
    scheduled_ms: int
    shard: int | None
    attempt: int

    def __str__(self) -> str:
        instant = str(self.scheduled_ms) if self.shard is None else f"{self.scheduled_ms}.{self.shard}"
        return f"{self.job_id}@{instant}#{self.attempt}"


def parse_firing_id(text: str) -> FiringId:
    """Reads a firing id; raises ``ValueError`` naming the text when it is not one."""

    def bad() -> ValueError:
        return ValueError(
            f"{text!r} is not a firing id (<job id>@<scheduled ms>#<attempt> or "
            "<job id>@<scheduled ms>.<shard>#<attempt>)"
        )

    job_id, at, rest = text.rpartition("@")
    if not at or not job_id:
        raise bad()
    instant, hash_, attempt_text = rest.partition("#")
    if not hash_:
        raise bad()
    ms_text, dot, shard_text = instant.partition(".")
    shard = None
    if dot:
        if not _DIGITS.fullmatch(shard_text) or int(shard_text) > _U32_MAX:
            raise bad()
        shard = int(shard_text)
    if not _I64.fullmatch(ms_text) or not _U32.fullmatch(attempt_text):
        raise bad()
    ms, attempt = int(ms_text), int(attempt_text)
    if not _I64_RANGE[0] <= ms <= _I64_RANGE[1] or attempt > _U32_MAX:
        raise bad()
    return FiringId(job_id=job_id, scheduled_ms=ms, shard=shard, attempt=attempt)
