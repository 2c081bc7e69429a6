"""What a handler sees of the firing it runs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .timefmt import utc_now


@dataclass(frozen=True)
class FiringContext:
    """One firing, as handed to a handler: the firing as the scheduler
    published it, and what the worker decided when it started it."""

    #: ``<job id>@<scheduled ms>#<attempt>`` (``...@<ms>.<shard>#<attempt>`` for a shard).
    firing_id: str
    job_id: str
    #: The handler name the firing asked for.
    handler: str
    #: The instant the schedule produced.
    scheduled_at: datetime
    #: When the firing was due for publishing: the scheduled instant, or later for a retry.
    due_at: datetime
    #: 1, 2, ...
    attempt: int
    #: 0-9.
    priority: int
    #: The job's payload, decoded from JSON (``None`` when the message had no body).
    payload: Any
    #: When the run is cut off. The worker enforces it: past it ``cancelled``
    #: is set and, ``stop_grace`` later, the handler's task is cancelled.
    deadline: datetime
    #: A sharded job's shard (0 ... ``shards`` - 1; a broadcast job's share is one); ``None`` when unsharded.
    shard: int | None
    #: How many shards the instant has; ``None`` when unsharded.
    shards: int | None
    #: The firing's W3C ``traceparent``; ``None`` when absent or malformed.
    traceparent: str | None
    #: The id of the worker running the firing.
    worker_id: str
    #: The bound on the output tail the worker keeps; a handler buffering output need keep no more.
    max_output_bytes: int
    #: Set on a cancel request, at the deadline, when the worker fences itself
    #: and at the end of a shutdown's drain grace. Long handlers should watch
    #: it and return promptly.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    def remaining(self) -> float:
        """Seconds until the deadline (0 once it passed)."""
        return max((self.deadline - utc_now()).total_seconds(), 0.0)

    async def sleep(self, seconds: float) -> bool:
        """Sleeps ``seconds``, returning early when the run is stopped;
        ``True`` if it slept the whole time, ``False`` if it was stopped."""
        try:
            await asyncio.wait_for(self.cancelled.wait(), timeout=max(seconds, 0.0))
        except asyncio.TimeoutError:
            return True
        return False
