"""Running a handler: outcomes and error texts as the Rust worker reports them."""

import asyncio
from datetime import timedelta

from chime_worker import HandlerError
from chime_worker.context import FiringContext
from chime_worker.run import run
from chime_worker.running import RunControl
from chime_worker.timefmt import utc_now

GRACE = 0.2


def ctx(deadline_in: float, max_output: int = 8) -> FiringContext:
    now = utc_now()
    return FiringContext(
        firing_id="job@1#1", job_id="job", handler="h", scheduled_at=now, due_at=now, attempt=1, priority=5,
        payload=None, deadline=now + timedelta(seconds=deadline_in), shard=None, shards=None, traceparent=None,
        worker_id="w", max_output_bytes=max_output,
    )


def go(handler, context=None, control=None, grace=GRACE):
    return asyncio.run(_go(handler, context, control, grace))


async def _go(handler, context, control, grace):
    return await run(handler, context or ctx(5), control or RunControl(), grace)


def test_success_keeps_the_output_tail():
    async def h(c):
        return "0123456789"

    report = go(h)
    assert (report.outcome, report.output, report.error) == ("succeeded", "23456789", None)
    assert report.started_at <= report.finished_at


def test_returned_values_become_text():
    async def as_bytes(c):
        return b"a\0b\xff"

    async def as_json(c):
        return {"n": [1, 2]}

    async def nothing(c):
        return None

    assert go(as_bytes, ctx(5, 64)).output == "a\ufffdb\ufffd"
    assert go(as_json, ctx(5, 64)).output == '{"n": [1, 2]}'
    assert go(nothing).output is None


def test_failures_and_exceptions_are_failed():
    async def bad(c):
        raise HandlerError("bad", output="out")

    report = go(bad)
    assert (report.outcome, report.error, report.output) == ("failed", "bad", "out")

    async def crash(c):
        raise KeyError("name")

    report = go(crash)
    assert (report.outcome, report.error) == ("failed", "KeyError: 'name'")
    report = go(None)
    assert (report.outcome, report.error) == ("failed", "no handler named h on this worker")


def test_the_deadline_cuts_a_run_off():
    async def forever(c):
        await asyncio.sleep(30)

    report = go(forever, ctx(0.1))
    assert report.outcome == "timed_out"
    assert report.error.startswith("timed out: the deadline ") and " passed after 0." in report.error
    assert report.duration < 2

    async def watches(c):
        await c.cancelled.wait()
        raise HandlerError("stopped", output="partial")

    report = go(watches, ctx(0.1))
    assert (report.outcome, report.output) == ("timed_out", "partial")

    async def instant(c):
        return "never"

    report = go(instant, ctx(-1))
    assert report.outcome == "timed_out"
    assert report.error.endswith("passed before the run started")


def test_a_handler_failing_at_its_own_deadline_timed_out():
    async def own_timeout(c):
        await asyncio.sleep(c.remaining())
        raise HandlerError("request timed out")

    report = go(own_timeout, ctx(0.1), grace=5)
    assert report.outcome == "timed_out"
    assert report.error.startswith("timed out")


def test_a_cancel_reports_its_reason_and_a_fence_its_interruption():
    async def forever(c):
        await asyncio.sleep(30)

    async def stop_later(control, how):
        await asyncio.sleep(0.05)
        how(control)

    async def scenario(how):
        control = RunControl()
        stopper = asyncio.create_task(stop_later(control, how))
        report = await run(forever, ctx(30), control, GRACE)
        await stopper
        return report

    report = asyncio.run(scenario(lambda c: c.cancel("replaced")))
    assert (report.outcome, report.error, report.interrupted) == ("cancelled", "replaced", None)
    report = asyncio.run(scenario(lambda c: c.interrupt("fenced", "fenced: no heartbeat for 4.0s")))
    assert (report.outcome, report.error, report.interrupted) == ("failed", "fenced: no heartbeat for 4.0s", "fenced")


def test_a_handler_that_returns_when_stopped_does_not_read_as_succeeded():
    async def obedient(c):
        await c.cancelled.wait()
        return "stopped early"

    async def scenario():
        control = RunControl()
        asyncio.get_running_loop().call_later(0.05, control.interrupt, "shutdown", "worker shutting down")
        return await run(obedient, ctx(30, 64), control, GRACE)

    report = asyncio.run(scenario())
    assert (report.outcome, report.interrupted, report.output) == ("failed", "shutdown", "stopped early")


def test_a_long_error_is_cleaned_and_capped():
    async def loud(c):
        raise HandlerError("bad\0" + "é" * 8192)

    error = go(loud).error
    assert error.startswith("bad\ufffdé")
    assert len(error.encode()) <= 8192
