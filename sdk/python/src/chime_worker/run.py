"""Running one accepted firing: its handler in a task of its own, under its
deadline and stop signal, exceptions caught and output bounded.

A stop (deadline, cancel request, fence, end of the drain grace) sets the
handler's ``ctx.cancelled``; the handler then has ``stop_grace`` to return
(its output is kept if it does) before its task is cancelled. The outcomes
and error texts are the Rust worker's (worker/src/firing/run.rs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import text
from .context import FiringContext
from .handler import Handler, HandlerError, output_text
from .running import RunControl, StopReason
from .timefmt import format_time, utc_now
from .trace import firing_span

log = logging.getLogger("chime_worker")

#: How long a handler's task may take to end once cancelled before the run is
#: reported anyway (a handler that swallows ``CancelledError`` cannot be stopped).
CANCEL_WAIT = 0.1


@dataclass(frozen=True, slots=True)
class RunReport:
    """How a run ended, ready for a finished event."""

    outcome: str
    error: str | None
    output: str | None
    started_at: datetime
    finished_at: datetime
    #: Monotonic run time, in seconds.
    duration: float
    interrupted: str | None = None


class _Run:
    """One run's clock and bounds, to build its report."""

    def __init__(self, ctx: FiringContext) -> None:
        self.ctx = ctx
        self.started_at = utc_now()
        self.started = time.monotonic()

    def report(
        self, outcome: str, error: str | None, output: Any = None, interrupted: str | None = None
    ) -> RunReport:
        kept = None if output is None else text.tail(output, self.ctx.max_output_bytes)
        return RunReport(
            outcome=outcome,
            error=None if error is None else text.head(error, text.MAX_ERROR_BYTES),
            output=kept or None,
            started_at=self.started_at,
            finished_at=utc_now(),
            duration=time.monotonic() - self.started,
            interrupted=interrupted,
        )

    def stopped(self, stop: StopReason, output: Any) -> RunReport:
        return self.report(stop.outcome, stop.reason, output, stop.interrupted)


def _error_text(error: BaseException) -> str:
    if isinstance(error, HandlerError):
        return error.message
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _output_of(task: asyncio.Task[Any]) -> Any:
    """What a finished task produced as output: its result, or a HandlerError's output."""
    if task.cancelled():
        return None
    error = task.exception()
    if error is None:
        return output_text(task.result())
    return error.output if isinstance(error, HandlerError) else None


async def _call(handler: Handler, ctx: FiringContext) -> Any:
    attributes = {"chime.firing_id": ctx.firing_id, "chime.job_id": ctx.job_id, "chime.attempt": ctx.attempt}
    with firing_span(ctx.handler, ctx.traceparent, attributes):
        return await handler(ctx)


async def run(handler: Handler | None, ctx: FiringContext, control: RunControl, stop_grace: float) -> RunReport:
    """Runs ``ctx`` with ``handler`` (``None``: no handler of that name here) until it
    returns, its deadline passes, or ``control`` is stopped."""
    one = _Run(ctx)
    if handler is None:
        return one.report("failed", f"no handler named {ctx.handler} on this worker")
    remaining = (ctx.deadline - one.started_at).total_seconds()
    if remaining <= 0:
        return one.report("timed_out", f"the deadline {format_time(ctx.deadline)} passed before the run started")
    if control.stopped is not None:
        return one.stopped(control.stopped, None)

    task = asyncio.create_task(_call(handler, ctx), name=f"firing {ctx.firing_id}")
    stop_wait = asyncio.create_task(control.stopped_event.wait())
    try:
        await asyncio.wait({task, stop_wait}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_wait.cancel()
    # A stop comes first: a handler that returns as soon as it notices the
    # stop is often done already, and must not read as succeeded or failed.
    if control.stopped is None and task.done():
        return _finished(one, task)

    ctx.cancelled.set()
    await asyncio.wait({task}, timeout=stop_grace)
    if task.done():
        output = _output_of(task)
    else:
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_WAIT)
        if not task.done():
            log.error("firing %s: the handler ignores cancellation and still runs; reporting it stopped", ctx.firing_id)
        output = None
    if control.stopped is not None:
        return one.stopped(control.stopped, output)
    elapsed = time.monotonic() - one.started
    return one.report(
        "timed_out", f"timed out: the deadline {format_time(ctx.deadline)} passed after {elapsed:.3f}s", output
    )


def _finished(one: _Run, task: asyncio.Task[Any]) -> RunReport:
    """The report of a handler that ended on its own."""
    if task.cancelled():
        return one.report("failed", "the handler's task was cancelled")
    error = task.exception()
    if error is None:
        return one.report("succeeded", None, output_text(task.result()))
    output = error.output if isinstance(error, HandlerError) else None
    if not isinstance(error, HandlerError):
        log.warning(
            "firing %s: the handler raised %s", one.ctx.firing_id, type(error).__name__, exc_info=error
        )
    if utc_now() >= one.ctx.deadline:
        # A handler that enforces the deadline itself (a request timeout) failed because of it.
        deadline = format_time(one.ctx.deadline)
        return one.report("timed_out", f"timed out: the deadline {deadline} passed ({_error_text(error)})", output)
    return one.report("failed", _error_text(error), output)
