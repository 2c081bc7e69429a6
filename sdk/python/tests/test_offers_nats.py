"""Offers against a real nats-server (docs/PROTOCOL.md section 4, "Offers"): the firings of
broadcast jobs, sent by the scheduler to one worker on core NATS, started through the same
exchange as a pulled firing, and dropped, never held, when they cannot start."""

from __future__ import annotations

import asyncio
from typing import Any

from chime_worker import FiringContext
from natsenv import Env, Firing, eventually, sha256
from test_worker_nats import metric, scenario, started, stopped


def recorder(seen: list[FiringContext]) -> Any:
    async def record(ctx: FiringContext) -> str:
        seen.append(ctx)
        return f"shard {ctx.shard} of {ctx.shards}"

    return record


def test_the_heartbeat_says_the_worker_takes_offers(nats_url: str) -> None:
    async def body(env: Env) -> None:
        await env.create_group("py")
        worker, client = await started(env, "py", {"record": recorder([])})
        beat = await env.heartbeat("py", "w1")
        assert beat is not None and beat["offers"] is True, beat
        await stopped(worker, client)

    scenario(nats_url, body)


def test_an_offer_addressed_to_the_worker_is_started_run_and_reported(nats_url: str) -> None:
    seen: list[FiringContext] = []

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        # A long poll interval: nothing comes from the consumers meanwhile.
        worker, client = await started(env, "py", {"record": recorder(seen)}, poll_interval=30.0)
        firing = Firing("py", "everywhere", "record", payload={"to": "all"}, shard=(1, 3))
        fid = await env.offer(firing, "w1")
        event = await env.event_of(fid, timeout=10)
        assert (event["worker_id"], event["outcome"], event["output"]) == ("w1", "succeeded", "shard 1 of 3"), event
        _, request, subject = responder.requests[0]
        assert subject == "chime.worker.v1.start.py.w1"
        assert request == {"firing_id": fid, "worker_id": "w1", "group": "py", "handler": "record",
                           "payload_sha256": sha256(firing.body())}
        assert (seen[0].firing_id, seen[0].payload, seen[0].shard, seen[0].shards) == (fid, {"to": "all"}, 1, 3)
        assert len(responder.requests) == 1
        await stopped(worker, client)

    scenario(nats_url, body)


def test_a_broadcast_to_one_worker_is_shard_0_of_1_under_the_subject_prefix(nats_url: str) -> None:
    seen: list[FiringContext] = []

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        worker, client = await started(env, "py", {"record": recorder(seen)})
        fid = await env.offer(Firing("py", "alone", "record", shard=(0, 1)), "w1")
        event = await env.event_of(fid, timeout=10)
        assert (event["outcome"], event["output"]) == ("succeeded", "shard 0 of 1"), event
        assert (seen[0].shard, seen[0].shards) == (0, 1)
        assert responder.requests[0][2] == "acme.worker.v1.start.py.w1"
        assert metric(worker, 'chime_worker_bad_messages_total{group="py"} 0.0')
        await stopped(worker, client)

    scenario(nats_url, body, prefix="acme")


def test_an_offer_for_another_worker_is_counted_and_dropped_unstarted(nats_url: str) -> None:
    seen: list[FiringContext] = []

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        worker, client = await started(env, "py", {"record": recorder(seen)})
        await env.offer(Firing("py", "misrouted", "record", shard=(0, 2)), "w1", addressee="w2")
        await eventually("counted as a bad message",
                         lambda: metric(worker, 'chime_worker_bad_messages_total{group="py"} 1.0'))
        assert responder.requests == [] and seen == []
        # The worker still takes the offers that are its own.
        fid = await env.offer(Firing("py", "routed", "record", shard=(1, 2)), "w1")
        assert (await env.event_of(fid))["outcome"] == "succeeded"
        assert [request["firing_id"] for _, request, _ in responder.requests] == [fid]
        await stopped(worker, client)

    scenario(nats_url, body)


def test_an_offer_while_every_thread_is_busy_is_dropped_unstarted(nats_url: str) -> None:
    release = asyncio.Event()
    seen: list[FiringContext] = []

    async def block(ctx: FiringContext) -> str:
        await release.wait()
        return "released"

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        worker, client = await started(env, "py", {"block": block, "record": recorder(seen)}, threads=1)
        busy = await env.offer(Firing("py", "busy", "block", shard=(0, 1)), "w1")
        await eventually("the only thread taken", lambda: _in_flight(env, 1))
        dropped = Firing("py", "dropped", "record", shard=(0, 1))
        await env.offer(dropped, "w1")
        # Offers are handled in order: once this misaddressed one is counted, the one before it was handled.
        await env.offer(Firing("py", "probe", "record", shard=(0, 1)), "w1", addressee="w2")
        await eventually("the probe counted", lambda: metric(worker, 'chime_worker_bad_messages_total{group="py"} 1.0'))
        release.set()
        assert (await env.event_of(busy))["outcome"] == "succeeded"
        assert [request["firing_id"] for _, request, _ in responder.requests] == [busy]
        assert seen == []
        await eventually("the thread back", lambda: _in_flight(env, 0))
        # The scheduler offers the dropped firing again; now it runs.
        await env.offer(dropped, "w1")
        assert (await env.event_of(dropped.id))["outcome"] == "succeeded"
        await stopped(worker, client)

    scenario(nats_url, body)


def test_a_refused_offer_is_not_run_and_frees_its_thread(nats_url: str) -> None:
    seen: list[FiringContext] = []

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder("refuse", "wrong_worker")
        worker, client = await started(env, "py", {"record": recorder(seen)}, threads=1)
        await env.offer(Firing("py", "refused", "record", shard=(0, 1)), "w1")
        await eventually("refused", lambda: metric(
            worker, 'chime_worker_start_refusals_total{group="py",reason="wrong_worker"} 1.0'))
        await eventually("its thread back and nothing listed", lambda: _idle(env))
        assert len(responder.requests) == 1 and seen == []
        await stopped(worker, client)

    scenario(nats_url, body)


async def _in_flight(env: Env, count: int) -> bool:
    beat = await env.heartbeat("py", "w1")
    return beat is not None and beat["in_flight"] == count


async def _idle(env: Env) -> bool:
    beat = await env.heartbeat("py", "w1")
    return beat is not None and beat["in_flight"] == 0 and beat.get("running") == []
