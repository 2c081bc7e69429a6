"""The worker's clock offset from the NATS server, measured on the firings it fetches.

JetStream stamps every message with the server's time when it stored it
(the ack subject's timestamp). ``local receive time - that stamp`` is the
offset of the local clock (positive: ahead) plus the time the message spent
in the stream and on the wire, never negative; so the smallest sample of a
recent window is the tightest estimate and an upper bound. Workers compare
wall-clock deadlines with their own clock, so an offset shows up as runs cut
off early or late; ``chime_clock_offset_seconds`` makes it visible.
"""

from __future__ import annotations

from collections import deque

#: How far back samples count, in seconds.
OFFSET_WINDOW = 300.0
#: The most samples held.
MAX_SAMPLES = 1024


class ClockOffset:
    """The minimum of the offset samples seen within a window."""

    def __init__(self, window: float = OFFSET_WINDOW) -> None:
        self.window = window
        # Samples that can still become the minimum: times and offsets both
        # increase from front to back; the front is the window's minimum.
        self._candidates: deque[tuple[float, float]] = deque()

    def observe(self, now: float, published_ns: int, received_ns: int) -> float:
        """Records a message stored at ``published_ns`` (server clock) and received at
        ``received_ns`` (local clock), at monotonic time ``now``; returns the sample in seconds."""
        sample = (received_ns - published_ns) / 1e9
        while self._candidates and self._candidates[-1][1] >= sample:
            self._candidates.pop()
        if len(self._candidates) >= MAX_SAMPLES:
            self._candidates.popleft()
        self._candidates.append((now, sample))
        return sample

    def estimate(self, now: float) -> float | None:
        """The smallest sample of the window at monotonic time ``now``; ``None`` without one."""
        while self._candidates and now - self._candidates[0][0] > self.window:
            self._candidates.popleft()
        return self._candidates[0][1] if self._candidates else None
