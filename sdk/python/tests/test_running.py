"""The registry of runs: one claim per attempt, listed until reported, stopped by fence and shutdown."""

import asyncio

from chime_worker.running import MAX_LISTED_RUNNING, RECENT_FOR, Running


def test_an_attempt_is_claimed_once_until_long_after_it_finished():
    running = Running()
    control = running.claim("job@1#1")
    assert control is not None
    assert running.claim("job@1#1") is None, "running"
    assert running.cancel("job@1#1", "replaced")
    assert control.stopped_event.is_set()
    control.cancel("second reason")
    assert control.stopped.reason == "replaced"
    assert control.stopped.outcome == "cancelled"
    running.finish("job@1#1", 0.0)
    assert running.claim("job@1#1") is None, "just finished"
    assert not running.cancel("job@1#1", "late")
    running.finish("job@2#1", RECENT_FOR)
    assert running.claim("job@1#1") is not None, "forgotten after RECENT_FOR"


def test_claims_after_a_shutdown_grace_come_back_interrupted():
    running = Running()
    first = running.claim("job@1#1")
    assert running.interrupt_all("worker shutting down") == 1
    assert (first.stopped.outcome, first.stopped.interrupted) == ("failed", "shutdown")
    late = running.claim("job@2#1")
    assert late.stopped.reason == "worker shutting down"


def test_heartbeats_list_starts_until_their_report_is_acknowledged():
    running = Running()
    running.claim("job@1#1")
    assert running.listed() == ["job@1#1"], "asked to start"
    running.claim("job@2#1")
    running.release("job@2#1")
    assert running.listed() == ["job@1#1"], "refused: not listed"
    running.accepted("job@1#1")
    running.finish("job@1#1", 0.0)
    assert running.listed() == ["job@1#1"], "report unsent"
    running.reported("job@1#1")
    assert running.listed() == []
    for i in range(MAX_LISTED_RUNNING + 1):
        running.accepted(f"job@{i}#1")
    assert running.listed() is None, "past the bound the list is left out"


def test_a_fence_fails_every_run_until_lifted():
    running = Running()
    first = running.claim("job@1#1")
    assert running.fence("fenced: no heartbeat for 4.0s") == 1
    assert (first.stopped.outcome, first.stopped.interrupted) == ("failed", "fenced")
    during = running.claim("job@2#1")
    assert during.stopped.reason == "fenced: no heartbeat for 4.0s"
    running.release("job@2#1")
    running.unfence()
    assert running.claim("job@3#1").stopped is None


def test_the_fence_falls_when_the_lease_runs_out_and_lifts_on_a_fresh_beat():
    from chime_worker.fence import Fence
    from chime_worker.metrics import Metrics
    from chime_worker.status import WorkerStatus

    async def scenario():
        running, status = Running(), WorkerStatus()
        fence = Fence(4.0, 0.0, running, status, Metrics("g"))
        run = running.claim("job@1#1")
        assert fence.check(3.999) is None
        fence.renew(2.0, 3.0)
        assert fence.check(5.999) is None
        assert fence.check(6.0) == 1
        assert fence.fenced and status.fenced
        assert run.stopped.reason == "fenced: no heartbeat for 4.0s"
        assert fence.check(7.0) is None, "once"
        # A beat sent before the fence but acknowledged after its own lease ran out proves nothing.
        fence.renew(3.0, 8.0)
        assert fence.fenced
        fence.renew(9.0, 9.1)
        assert not fence.fenced and not status.fenced
        assert running.claim("job@2#1").stopped is None
        await asyncio.wait_for(fence.lifted(), 1)

    asyncio.run(scenario())
