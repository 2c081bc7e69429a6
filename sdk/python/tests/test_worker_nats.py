"""A worker against a real nats-server, driven by the messages of docs/PROTOCOL.md:
pulling, the start exchange and each answer, runs, reports, heartbeats, cancels,
fencing, shutdown, metrics."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import nats

from chime_worker import FiringContext, HandlerError, Worker
from natsenv import Env, Firing, eventually, sha256

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def scenario(nats_url: str, body: Callable[[Env], Awaitable[None]], **env: Any) -> None:
    async def main() -> None:
        async with Env(nats_url, **env) as e:
            await asyncio.wait_for(body(e), 90)

    asyncio.run(main())


async def started(env: Env, group: str, handlers: dict[str, Any], **settings: Any) -> tuple[Worker, Any]:
    settings = {"threads": 2, "worker_id": "w1", "heartbeat_interval": 0.5, "poll_interval": 0.25,
                "subject_prefix": env.subjects.prefix, **settings}
    worker = Worker(group=group, **settings)
    for name, handler in handlers.items():
        worker.add_handler(name, handler)
    client = await nats.connect(env.url)
    await asyncio.wait_for(worker.start(client), 20)
    return worker, client


async def stopped(worker: Worker, client: Any) -> Any:
    report = await worker.shutdown()
    await client.close()
    return report


def metric(worker: Worker, line: str) -> bool:
    return line in worker.metrics.render().decode()


def metric_value(worker: Worker, series: str) -> float:
    for line in worker.metrics.render().decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split(" ")[1])
    return 0.0


def test_a_firing_runs_end_to_end_with_its_context(nats_url: str) -> None:
    seen: list[FiringContext] = []

    async def echo(ctx: FiringContext) -> str:
        seen.append(ctx)
        return json.dumps(ctx.payload)

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        # A long poll interval: only the doorbell makes the worker fetch at once.
        worker, client = await started(env, "py", {"echo": echo}, poll_interval=30.0)
        beat = await env.heartbeat("py", "w1")
        assert beat is not None
        assert (beat["id"], beat["group"], beat["threads"], beat["in_flight"]) == ("w1", "py", 2, 0)
        assert beat["running"] == [] and beat["handlers"] == ["echo"]

        firing = Firing("py", "from-python", "echo", payload={"hello": "world", "n": [1, 2, 3]},
                            shard=(3, 8), traceparent=TRACEPARENT)
        fid = await env.publish(firing)
        await env.ring("py")
        event = await env.event_of(fid, timeout=5)
        assert (event["worker_id"], event["outcome"]) == ("w1", "succeeded"), event
        assert json.loads(event["output"]) == firing.payload
        assert event["started_at"] <= event["finished_at"]
        ctx = seen[0]
        assert (ctx.firing_id, ctx.job_id, ctx.attempt, ctx.shard, ctx.shards) == (fid, "from-python", 1, 3, 8)
        assert ctx.traceparent == TRACEPARENT and ctx.worker_id == "w1"
        _, request, subject = responder.requests[0]
        assert subject == "chime.worker.v1.start.py.w1"
        assert request == {"firing_id": fid, "worker_id": "w1", "group": "py", "handler": "echo",
                           "payload_sha256": sha256(firing.body())}
        await eventually("acked", lambda: _zero(env.fire_messages()))
        await stopped(worker, client)
        assert await env.heartbeat("py", "w1") is None, "heartbeat key deleted"

    scenario(nats_url, body)


async def _zero(count: Awaitable[int]) -> bool:
    return await count == 0


def test_bad_messages_are_terminated_counted_and_never_started(nats_url: str) -> None:
    ran: list[str] = []

    async def echo(ctx: FiringContext) -> str:
        ran.append(ctx.firing_id)
        return "ok"

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        worker, client = await started(env, "py", {"echo": echo})
        good = Firing("py", "job", "echo").headers()
        await env.publish_raw("py", None, b"{}")
        await env.publish_raw("py", {**good, "Chime-Priority": "12", "Nats-Msg-Id": "x1"}, b"{}")
        await env.publish_raw("py", {**good, "Nats-Msg-Id": "x2"}, b"{not json")
        await env.ring("py")
        await eventually("three bad messages counted", lambda: metric(worker, 'chime_worker_bad_messages_total{group="py"} 3.0'))
        await eventually("terminated", lambda: _zero(env.fire_messages()))
        assert responder.requests == [] and ran == []
        fid = await env.publish(Firing("py", "after", "echo"))
        await env.ring("py")
        assert (await env.event_of(fid))["outcome"] == "succeeded"
        await stopped(worker, client)

    scenario(nats_url, body)


def test_a_refused_start_is_acked_and_not_run(nats_url: str) -> None:
    ran: list[str] = []

    async def echo(ctx: FiringContext) -> str:
        ran.append(ctx.firing_id)
        return "ok"

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder("refuse", "already_started")
        worker, client = await started(env, "py", {"echo": echo})
        await env.publish(Firing("py", "job", "echo"))
        await env.ring("py")
        await eventually("acked", lambda: _zero(env.fire_messages()))
        assert len(responder.requests) == 1 and ran == []
        assert metric(worker, 'chime_worker_start_refusals_total{group="py",reason="already_started"} 1.0')
        await stopped(worker, client)

    scenario(nats_url, body)


def test_without_a_scheduler_a_firing_is_handed_back_with_a_delay_and_never_run(nats_url: str) -> None:
    ran: list[str] = []

    async def echo(ctx: FiringContext) -> str:
        ran.append(ctx.firing_id)
        return "ok"

    async def body(env: Env) -> None:
        await env.create_group("py")
        worker, client = await started(env, "py", {"echo": echo})
        await env.publish(Firing("py", "job", "echo"))
        await env.ring("py")
        await eventually("handed back twice", lambda: metric(
            worker, 'chime_worker_start_refusals_total{group="py",reason="scheduler_unavailable"} 2.0'), timeout=15)
        consumer = await env.js.consumer_info(env.subjects.fire_stream, env.subjects.fire_consumer("py", "normal"))
        assert consumer.num_redelivered >= 1
        assert await env.fire_messages() == 1, "never terminated"
        assert ran == []
        # The scheduler comes back: the firing runs.
        await env.responder()
        await eventually("run once the scheduler answers", lambda: ran, timeout=15)
        await stopped(worker, client)

    scenario(nats_url, body)


def test_a_rejected_start_comes_back_later_each_time(nats_url: str) -> None:
    async def echo(ctx: FiringContext) -> str:
        return "ok"

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder("error", "internal")
        worker, client = await started(env, "py", {"echo": echo})
        await env.publish(Firing("py", "job", "echo"))
        await env.ring("py")
        await eventually("asked three times", lambda: len(responder.requests) >= 3, timeout=15)
        times = [at for at, _request, _subject in responder.requests]
        # NAKed 1 s after the first delivery, 2 s after the second.
        assert times[1] - times[0] >= 0.9, times
        assert times[2] - times[1] >= 1.9, times
        assert await env.fire_messages() == 1
        await stopped(worker, client)

    scenario(nats_url, body)


def test_a_cancel_request_stops_the_run_with_its_reason(nats_url: str) -> None:
    async def sleep(ctx: FiringContext) -> str:
        if not await ctx.sleep(30):
            return "stopped early"
        return "slept"

    async def body(env: Env) -> None:
        await env.create_group("py")
        await env.responder()
        worker, client = await started(env, "py", {"sleep": sleep})
        fid = await env.publish(Firing("py", "long", "sleep"))
        await env.ring("py")
        await eventually("listed as running", lambda: _listed(env, fid))
        cancel = env.subjects.cancel("w1")
        answer = await env.nc.request(cancel, json.dumps({"firing_id": "other@1#1", "reason": "x"}).encode(), timeout=5)
        assert json.loads(answer.data) == {"running": False}
        answer = await env.nc.request(cancel, b"{garbage", timeout=5)
        assert json.loads(answer.data) == {"running": False}
        answer = await env.nc.request(cancel, json.dumps({"firing_id": fid, "reason": "replaced"}).encode(), timeout=5)
        assert json.loads(answer.data) == {"running": True}
        event = await env.event_of(fid, timeout=5)
        assert (event["outcome"], event["error"], event["output"]) == ("cancelled", "replaced", "stopped early")
        assert "interrupted" not in event
        await stopped(worker, client)

    scenario(nats_url, body)


async def _listed(env: Env, fid: str) -> bool:
    beat = await env.heartbeat("py", "w1")
    return beat is not None and fid in beat.get("running", [])


def test_a_second_delivery_of_a_running_attempt_is_dropped(nats_url: str) -> None:
    runs: list[str] = []

    async def sleep(ctx: FiringContext) -> str:
        runs.append(ctx.firing_id)
        await ctx.sleep(1.0)
        return "done"

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        worker, client = await started(env, "py", {"sleep": sleep})
        firing = Firing("py", "twice", "sleep")
        fid = await env.publish(firing)
        await env.ring("py")
        await eventually("running", lambda: runs)
        firing.msg_id_suffix = "~1"  # the same attempt in a second message
        await env.publish(firing)
        await env.ring("py")
        await eventually("dropped", lambda: metric(
            worker, 'chime_worker_start_refusals_total{group="py",reason="duplicate_delivery"} 1.0'))
        assert (await env.event_of(fid))["outcome"] == "succeeded"
        assert runs == [fid] and len(responder.requests) == 1
        await stopped(worker, client)

    scenario(nats_url, body)


def test_the_highest_band_is_fetched_first(nats_url: str) -> None:
    order: list[str] = []

    async def record(ctx: FiringContext) -> str:
        order.append(ctx.job_id)
        return ""

    async def body(env: Env) -> None:
        await env.create_group("py")
        await env.responder()
        for job, priority in (("low", 1), ("normal", 5), ("high", 9), ("low2", 0), ("high2", 8)):
            await env.publish(Firing("py", job, "record", priority=priority))
        worker, client = await started(env, "py", {"record": record}, threads=1)
        await eventually("all ran", lambda: len(order) == 5)
        assert order == ["high", "high2", "normal", "low", "low2"]
        await stopped(worker, client)

    scenario(nats_url, body)


def test_a_worker_that_cannot_heartbeat_fences_itself_and_recovers(nats_url: str) -> None:
    ran: list[str] = []

    async def sleep(ctx: FiringContext) -> str:
        ran.append(ctx.job_id)
        await ctx.sleep(30)
        return "stopped"

    async def body(env: Env) -> None:
        await env.create_group("py")
        responder = await env.responder()
        # Key TTL 3 s, margin 1.5 s: a lease of 1.5 s.
        worker, client = await started(
            env, "py", {"sleep": sleep}, fence_margin=1.5, heartbeat_interval=0.4, drain_grace=0.5
        )
        fid = await env.publish(Firing("py", "long", "sleep"))
        await env.ring("py")
        await eventually("running", lambda: ran)
        await env.js.delete_key_value(env.subjects.workers_bucket)  # every heartbeat now fails
        lost = time.monotonic()
        event = await env.event_of(fid, timeout=10)
        assert (event["outcome"], event["interrupted"]) == ("failed", "fenced"), event
        assert event["error"].startswith("fenced: no heartbeat for "), event
        assert time.monotonic() - lost < 3.0, "stopped within the lease (and the stop grace)"
        assert worker.not_ready().startswith("fenced")
        assert metric(worker, 'chime_worker_fenced_total{group="py"} 1.0')
        # Fenced: nothing is started.
        requests = len(responder.requests)
        waiting = await env.publish(Firing("py", "waiting", "sleep"))
        await env.ring("py")
        await asyncio.sleep(1.0)
        assert len(responder.requests) == requests and ran == ["long"]
        # Heartbeats written again lift the fence; the waiting firing runs.
        await env.create_bucket()
        await eventually("fence lifted", lambda: worker.not_ready() is None)
        await eventually("the waiting firing runs", lambda: "waiting" in ran, timeout=10)
        await eventually("the waiting firing listed", lambda: _listed(env, waiting))
        await stopped(worker, client)

    scenario(nats_url, body, worker_ttl=3.0)


def test_a_finished_event_is_retried_until_jetstream_stores_it(nats_url: str) -> None:
    async def quick(ctx: FiringContext) -> str:
        await ctx.sleep(0.5)
        return "done"

    async def body(env: Env) -> None:
        await env.create_group("py")
        await env.responder()
        worker, client = await started(env, "py", {"quick": quick})
        await env.js.delete_stream(env.subjects.events_stream)
        fid = await env.publish(Firing("py", "job", "quick"))
        await env.ring("py")
        await eventually("publishing failed", lambda: metric_value(worker, 'chime_worker_report_retries_total{group="py"}') >= 1)
        assert fid in (await env.heartbeat("py", "w1"))["running"], "listed until stored"
        await env.js.add_stream(name=env.subjects.events_stream, subjects=[f"{env.subjects.prefix}.events.>"],
                                retention="workqueue")
        await eventually("stored", lambda: _stored(env))
        await eventually("no longer listed", lambda: _not_listed(env, fid))
        report = await stopped(worker, client)
        assert report.unsent_events == 0

    scenario(nats_url, body)


async def _stored(env: Env) -> bool:
    return (await env.js.stream_info(env.subjects.events_stream)).state.messages == 1


async def _not_listed(env: Env, fid: str) -> bool:
    beat = await env.heartbeat("py", "w1")
    return beat is not None and fid not in beat["running"]


def test_shutdown_lets_runs_finish_within_the_grace_and_interrupts_the_rest(nats_url: str) -> None:
    runs: list[str] = []

    async def sleep(ctx: FiringContext) -> str:
        runs.append(ctx.firing_id)
        seconds = ctx.payload["seconds"]
        if not await ctx.sleep(seconds):
            raise HandlerError("cancelled", output="partial")
        return f"slept {seconds}"

    async def body(env: Env) -> None:
        await env.create_group("py")
        await env.responder()
        worker, client = await started(env, "py", {"sleep": sleep}, drain_grace=1.0)
        short = await env.publish(Firing("py", "short", "sleep", payload={"seconds": 0.3}))
        long = await env.publish(Firing("py", "long", "sleep", payload={"seconds": 30}))
        await env.ring("py")
        await eventually("both running", lambda: len(runs) == 2)
        report = await stopped(worker, client)
        assert (report.drained, report.interrupted, report.unsent_events) == (False, 1, 0)
        events = {e["firing_id"]: e for e in [await env.event_of(short), await env.event_of(long)]}
        assert (events[short]["outcome"], events[short]["output"]) == ("succeeded", "slept 0.3")
        assert (events[long]["outcome"], events[long]["error"], events[long]["interrupted"]) == (
            "failed", "worker shutting down", "shutdown")
        assert events[long]["output"] == "partial"
        assert await env.heartbeat("py", "w1") is None

    scenario(nats_url, body)


def test_a_worker_waits_for_a_scheduler_and_says_so(nats_url: str) -> None:
    async def echo(ctx: FiringContext) -> str:
        return "ok"

    async def body(env: Env) -> None:
        await env.responder()
        worker = Worker(group="later", threads=1, worker_id="w1", metrics_port=0, heartbeat_interval=0.5)
        worker.add_handler("echo", echo)
        client = await nats.connect(env.url)
        starting = asyncio.create_task(worker.start(client))
        await eventually("registered before its consumers exist", lambda: env.heartbeat("later", "w1"))
        url = f"http://127.0.0.1:{worker.metrics_port}"
        status, text = await _get(f"{url}/readyz")
        assert (status, text) == (503, "starting: waiting for a scheduler to create consumer fire_g_later_high\n")
        assert (await _get(f"{url}/healthz"))[0] == 200
        assert not starting.done()
        await env.create_group("later")
        await asyncio.wait_for(starting, 10)
        assert await _get(f"{url}/readyz") == (200, "ready\n")
        fid = await env.publish(Firing("later", "job", "echo"))
        await env.ring("later")
        await env.event_of(fid)
        status, text = await _get(f"{url}/metrics")
        assert status == 200
        assert 'chime_worker_firings_total{group="later",handler="echo",outcome="succeeded"} 1.0' in text
        assert (await _get(f"{url}/nope"))[0] == 404
        await stopped(worker, client)

    scenario(nats_url, body)


async def _get(url: str) -> tuple[int, str]:
    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    return await asyncio.to_thread(fetch)


def test_a_dotted_group_under_another_prefix_runs_and_caps_its_output(nats_url: str) -> None:
    async def loud(ctx: FiringContext) -> str:
        return "é" * 1000 + "end"

    async def body(env: Env) -> None:
        await env.create_group("eu.reports")
        await env.responder(run_for=0.5)
        worker, client = await started(env, "eu.reports", {"loud": loud, "slow": _slow}, max_output_bytes=100)
        fid = await env.publish(Firing("eu.reports", "job", "loud"))
        await env.ring("eu.reports")
        subject, event = await env.events.get()
        assert subject == "acme.events.finished.eu.reports.w1"
        assert event["firing_id"] == fid and event["outcome"] == "succeeded"
        assert event["output"].endswith("end") and len(event["output"].encode()) <= 100
        assert await env.heartbeat("eu.reports", "w1") is not None
        # The deadline of the accepted start (0.5 s) cuts the run off.
        slow = await env.publish(Firing("eu.reports", "slow", "slow"))
        await env.ring("eu.reports")
        event = await env.event_of(slow)
        assert event["outcome"] == "timed_out" and event["error"].startswith("timed out: the deadline")
        await stopped(worker, client)

    scenario(nats_url, body, prefix="acme")


async def _slow(ctx: FiringContext) -> str:
    await asyncio.sleep(30)
    return "never"
