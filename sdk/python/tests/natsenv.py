"""The world a worker runs in, without a scheduler, for the SDK's tests against a real
nats-server: Chime's streams, bucket and a group's consumers (as a scheduler creates
them), a stand-in for the scheduler's start service, a reader of finished events, and a
publisher of firing messages (and offers) with the contract's headers. The Rust suites use the same
stand-ins (tests/src/worker_env), so the SDK is driven by exactly the messages of
docs/PROTOCOL.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, KeyValueConfig, RetentionPolicy, StreamConfig

from chime_worker.subjects import BANDS, Subjects
from chime_worker.timefmt import format_time, utc_now


def nats_server_binary() -> str | None:
    found = os.environ.get("CHIME_NATS_SERVER") or shutil.which("nats-server")
    return found if found and os.access(found, os.X_OK) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """A nats-server with JetStream on a free port and a store of its own."""

    def __init__(self, binary: str) -> None:
        self.port = free_port()
        self.store = tempfile.mkdtemp(prefix="chime-sdk-nats-")
        self.process = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nats-server did not start within 20 s")

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.store, ignore_errors=True)


_instants = itertools.count(1_800_000_000_000, 1000)


@dataclass
class Firing:
    """A firing message as a scheduler publishes it."""

    group: str
    job_id: str
    handler: str
    payload: Any = field(default_factory=dict)
    priority: int = 5
    attempt: int = 1
    timeout: float = 60.0
    shard: tuple[int, int] | None = None
    traceparent: str | None = None
    scheduled_ms: int = field(default_factory=lambda: next(_instants))
    msg_id_suffix: str = ""

    @property
    def id(self) -> str:
        instant = str(self.scheduled_ms) if self.shard is None else f"{self.scheduled_ms}.{self.shard[0]}"
        return f"{self.job_id}@{instant}#{self.attempt}"

    @property
    def band(self) -> str:
        return "high" if self.priority >= 7 else "normal" if self.priority >= 4 else "low"

    def body(self) -> bytes:
        return json.dumps(self.payload).encode()

    def headers(self) -> dict[str, str]:
        now = utc_now()
        scheduled = format_time(datetime.fromtimestamp(self.scheduled_ms / 1000, tz=timezone.utc))
        headers = {
            "Nats-Msg-Id": self.id + self.msg_id_suffix,
            "Chime-Firing-Id": self.id,
            "Chime-Job-Id": self.job_id,
            "Chime-Handler": self.handler,
            "Chime-Scheduled-At": scheduled,
            "Chime-Due-At": format_time(now),
            "Chime-Attempt": str(self.attempt),
            "Chime-Priority": str(self.priority),
            "Chime-Deadline": format_time(now + timedelta(seconds=self.timeout)),
            "Chime-Timeout-Ms": str(int(self.timeout * 1000)),
        }
        if self.shard is not None:
            headers["Chime-Shard"], headers["Chime-Shards"] = str(self.shard[0]), str(self.shard[1])
        if self.traceparent is not None:
            headers["traceparent"] = self.traceparent
        return headers


class Responder:
    """A stand-in for the scheduler's start service: accepts the first worker to ask for a
    firing (and that worker again), refuses others ``already_started``; or refuses, or
    answers an error, to everything."""

    def __init__(self, nc: Any, subjects: Subjects, mode: str = "accept", value: str = "", run_for: float = 30.0):
        self.nc, self.subjects, self.mode, self.value, self.run_for = nc, subjects, mode, value, run_for
        self.requests: list[tuple[float, dict[str, Any], str]] = []
        self.owners: dict[str, str] = {}
        self.sub: Any = None

    async def start(self) -> Responder:
        self.sub = await self.nc.subscribe(f"{self.subjects.prefix}.worker.v1.start.>", cb=self._answer)
        await self.nc.flush()
        return self

    async def stop(self) -> None:
        await self.sub.unsubscribe()

    async def _answer(self, msg: Any) -> None:
        request = json.loads(msg.data)
        self.requests.append((time.monotonic(), request, msg.subject))
        if self.mode == "error":
            reply: dict[str, Any] = {"error": {"code": self.value, "message": "cannot decide"}}
        elif self.mode == "refuse":
            reply = {"accepted": False, "refusal": self.value}
        else:
            owner = self.owners.setdefault(request["firing_id"], request["worker_id"])
            if owner == request["worker_id"]:
                reply = {"accepted": True, "deadline": format_time(utc_now() + timedelta(seconds=self.run_for))}
            else:
                reply = {"accepted": False, "refusal": "already_started"}
        await self.nc.publish(msg.reply, json.dumps(reply).encode())


class Env:
    """A NATS server with Chime's topology and a client on it."""

    def __init__(self, url: str, prefix: str = "chime", worker_ttl: float = 15.0) -> None:
        self.url = url
        self.subjects = Subjects(prefix)
        self.worker_ttl = worker_ttl
        self.nc: Any = None
        self.js: Any = None
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

    async def __aenter__(self) -> Env:
        self.nc = await nats.connect(self.url)
        self.js = self.nc.jetstream()
        s = self.subjects
        await self.js.add_stream(StreamConfig(
            name=s.fire_stream, subjects=[f"{s.prefix}.fire.>"], retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=120,
        ))
        await self.js.add_stream(StreamConfig(
            name=s.events_stream, subjects=[f"{s.prefix}.events.>"], retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=120,
        ))
        await self.create_bucket()

        async def on_event(msg: Any) -> None:
            self.events.put_nowait((msg.subject, json.loads(msg.data)))

        await self.nc.subscribe(f"{s.prefix}.events.finished.>", cb=on_event)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.nc.close()

    async def create_bucket(self) -> None:
        await self.js.create_key_value(KeyValueConfig(
            bucket=self.subjects.workers_bucket, history=1, ttl=self.worker_ttl,
        ))

    async def create_group(self, group: str) -> None:
        """The group's three consumers, as a scheduler creates them (ack wait 5 s, as in the Rust suites)."""
        for band in BANDS:
            await self.js.add_consumer(self.subjects.fire_stream, ConsumerConfig(
                durable_name=self.subjects.fire_consumer(group, band),
                filter_subject=f"{self.subjects.prefix}.fire.{group}.{band}",
                ack_policy=AckPolicy.EXPLICIT, ack_wait=5, max_ack_pending=20000, max_deliver=-1,
            ))

    async def responder(self, mode: str = "accept", value: str = "", run_for: float = 30.0) -> Responder:
        return await Responder(self.nc, self.subjects, mode, value, run_for).start()

    async def publish(self, firing: Firing) -> str:
        subject = f"{self.subjects.prefix}.fire.{firing.group}.{firing.band}"
        await self.js.publish(subject, firing.body(), headers=firing.headers())
        return firing.id

    async def offer(self, firing: Firing, worker_id: str, addressee: str | None = None) -> str:
        """Offers ``firing`` to ``worker_id`` as a scheduler offers a broadcast job's firing:
        core NATS on the worker's offer subject, ``Chime-Worker-Id`` naming ``addressee``
        (by default the worker itself)."""
        headers = {**firing.headers(), "Chime-Worker-Id": addressee or worker_id}
        await self.nc.publish(self.subjects.offer(firing.group, worker_id), firing.body(), headers=headers)
        await self.nc.flush()
        return firing.id

    async def publish_raw(self, group: str, headers: dict[str, str] | None, body: bytes, band: str = "normal") -> None:
        await self.js.publish(f"{self.subjects.prefix}.fire.{group}.{band}", body, headers=headers)

    async def ring(self, group: str) -> None:
        await self.nc.publish(self.subjects.ready(group), b"")
        await self.nc.flush()

    async def event_of(self, firing_id: str, timeout: float = 20.0) -> dict[str, Any]:
        """The finished event of ``firing_id`` (others read meanwhile are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            _subject, event = await asyncio.wait_for(self.events.get(), max(deadline - time.monotonic(), 0.01))
            if event["firing_id"] == firing_id:
                return event

    async def fire_messages(self) -> int:
        return (await self.js.stream_info(self.subjects.fire_stream)).state.messages

    async def heartbeat(self, group: str, worker_id: str) -> dict[str, Any] | None:
        kv = await self.js.key_value(self.subjects.workers_bucket)
        try:
            entry = await kv.get(f"{group}.{worker_id}")
        except Exception:
            return None
        return json.loads(entry.value) if entry.value else None


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


async def eventually(what: str, check: Any, timeout: float = 10.0) -> Any:
    """Polls ``check()`` (sync or async) until it is truthy; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.05)
