"""Reading a firing message: its headers and JSON body (docs/PROTOCOL.md, "Firing messages").

A message whose headers are missing or invalid, or whose body is not JSON,
is not a firing: :func:`parse_firing` raises :class:`BadMessage` naming the
header at fault, and the worker terminates the message (drops it, for an
offer, which must also name this worker: :func:`check_addressee`). The checks are the
Rust worker's, so every worker rejects the same messages.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .firing_id import FiringId, parse_firing_id
from .timefmt import parse_time
from .trace import parse_traceparent

FIRING_ID = "Chime-Firing-Id"
JOB_ID = "Chime-Job-Id"
HANDLER = "Chime-Handler"
SCHEDULED_AT = "Chime-Scheduled-At"
DUE_AT = "Chime-Due-At"
ATTEMPT = "Chime-Attempt"
PRIORITY = "Chime-Priority"
DEADLINE = "Chime-Deadline"
TIMEOUT_MS = "Chime-Timeout-Ms"
SHARD = "Chime-Shard"
SHARDS = "Chime-Shards"
WORKER_ID = "Chime-Worker-Id"
TRACEPARENT = "traceparent"

_U32 = re.compile(r"\+?\d{1,10}")
_U64 = re.compile(r"\+?\d{1,20}")


class BadMessage(Exception):
    """Why a message is not a firing; ``header`` names the header at fault, if one is."""

    def __init__(self, message: str, header: str | None = None) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True, slots=True)
class FiringMessage:
    """A firing message, checked."""

    firing_id: FiringId
    job_id: str
    handler: str
    scheduled_at: datetime
    due_at: datetime
    attempt: int
    priority: int
    #: The cut-off if the run starts at once (``Chime-Deadline``).
    deadline: datetime
    #: ``Chime-Timeout-Ms`` in seconds, if present.
    timeout: float | None
    payload: Any
    shard: int | None
    shards: int | None
    #: The ``traceparent`` header if it is a valid W3C trace context.
    traceparent: str | None
    #: Lower-case hex SHA-256 of the body exactly as received (the start request's).
    payload_sha256: str


def _value(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _need(headers: Mapping[str, str], name: str) -> str:
    value = _value(headers, name)
    if value is None:
        raise BadMessage(f"header {name} is missing", name)
    return value


def _invalid(name: str, reason: str) -> BadMessage:
    return BadMessage(f"header {name} is invalid: {reason}", name)


def _u32(headers: Mapping[str, str], name: str) -> int:
    text = _need(headers, name)
    if not _U32.fullmatch(text) or int(text) > 2**32 - 1:
        raise _invalid(name, f"{text!r} is not a whole number")
    return int(text)


def _time(headers: Mapping[str, str], name: str, text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as e:
        raise _invalid(name, str(e)) from None


def parse_firing(headers: Mapping[str, str] | None, body: bytes) -> FiringMessage:
    """Reads a firing from a message's headers and body."""
    if not headers:
        raise BadMessage("the message has no headers")
    try:
        firing_id = parse_firing_id(_need(headers, FIRING_ID))
    except ValueError as e:
        raise _invalid(FIRING_ID, str(e)) from None
    job_id = _need(headers, JOB_ID)
    if job_id != firing_id.job_id:
        raise _invalid(JOB_ID, f"{job_id!r} is not the job of firing {firing_id}")
    handler = _need(headers, HANDLER)
    scheduled_at = _time(headers, SCHEDULED_AT, _need(headers, SCHEDULED_AT))
    due_text = _value(headers, DUE_AT)
    due_at = scheduled_at if due_text is None else _time(headers, DUE_AT, due_text)
    attempt = _u32(headers, ATTEMPT)
    if attempt != firing_id.attempt:
        raise _invalid(ATTEMPT, f"{attempt} is not the attempt of firing {firing_id}")
    priority_text = _need(headers, PRIORITY)
    if not re.fullmatch(r"\+?\d{1,3}", priority_text) or int(priority_text) > 9:
        raise _invalid(PRIORITY, "must be an integer from 0 to 9")
    deadline = _time(headers, DEADLINE, _need(headers, DEADLINE))
    timeout_text = _value(headers, TIMEOUT_MS)
    timeout = None
    if timeout_text is not None:
        if not _U64.fullmatch(timeout_text) or int(timeout_text) > 2**64 - 1:
            raise _invalid(TIMEOUT_MS, f"{timeout_text!r} is not a whole number of milliseconds")
        timeout = int(timeout_text) / 1000.0
    shard, shards = _read_shard(headers, firing_id)
    payload = _read_body(body)
    return FiringMessage(
        firing_id=firing_id,
        job_id=job_id,
        handler=handler,
        scheduled_at=scheduled_at,
        due_at=due_at,
        attempt=attempt,
        priority=int(priority_text),
        deadline=deadline,
        timeout=timeout,
        payload=payload,
        shard=shard,
        shards=shards,
        traceparent=parse_traceparent(headers.get(TRACEPARENT)),
        payload_sha256=hashlib.sha256(body).hexdigest(),
    )


def check_addressee(headers: Mapping[str, str] | None, worker_id: str) -> None:
    """An offer is a firing addressed to one worker: its ``Chime-Worker-Id`` must be ``worker_id``."""
    addressee = _value(headers or {}, WORKER_ID)
    if addressee is None:
        raise BadMessage(f"header {WORKER_ID} is missing", WORKER_ID)
    if addressee != worker_id:
        raise _invalid(WORKER_ID, f"the offer is for worker {addressee!r}, not for {worker_id!r}")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _read_body(body: bytes) -> Any:
    """The payload: ``None`` for an empty body, else strict JSON in UTF-8."""
    if not body.strip():
        return None
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as e:
        raise BadMessage(f"the body is not JSON: {e}") from None


def _read_shard(headers: Mapping[str, str], firing_id: FiringId) -> tuple[int | None, int | None]:
    """Both shard headers present exactly when the id names a shard, the shard below the count."""
    index_text, count_text = _value(headers, SHARD), _value(headers, SHARDS)
    if firing_id.shard is None:
        if index_text is not None or count_text is not None:
            raise _invalid(SHARD, f"firing {firing_id} is not a shard")
        return None, None
    if index_text is None:
        raise BadMessage(f"header {SHARD} is missing", SHARD)
    if count_text is None:
        raise BadMessage(f"header {SHARDS} is missing", SHARDS)
    if not _U32.fullmatch(index_text) or int(index_text) > 2**32 - 1:
        raise _invalid(SHARD, f"{index_text!r} is not a whole number")
    # A broadcast to a single worker is shard 0 of 1.
    if not _U32.fullmatch(count_text) or not 1 <= int(count_text) <= 2**32 - 1:
        raise _invalid(SHARDS, "must be a whole number above 0")
    index, count = int(index_text), int(count_text)
    if index != firing_id.shard or index >= count:
        raise _invalid(SHARD, f"{index} of {count} is not the shard of firing {firing_id}")
    return index, count
