"""What the worker is doing now, for ``/readyz`` and :attr:`Worker.not_ready`:
waiting for its NATS objects, taking firings, fenced, or draining."""

from __future__ import annotations


class WorkerStatus:
    def __init__(self) -> None:
        #: Start-up finished: every NATS object found, the pull loop running.
        self.started = False
        self.fenced = False
        self.draining = False
        #: What start-up waits for, while it waits.
        self.waiting_for: str | None = None

    def not_ready(self) -> str | None:
        """Why the worker does not take firings now; ``None`` when it does."""
        if self.draining:
            return "draining: shutting down"
        if self.fenced:
            return "fenced: no heartbeat within its lease; runs stopped, not fetching"
        if not self.started:
            if self.waiting_for:
                return f"starting: waiting for {self.waiting_for}"
            return "starting"
        return None
