"""A worker: handlers registered by name, started on a NATS connection, drained on shutdown.

Start-up (docs/PROTOCOL.md section 1): find the heartbeat bucket and read
its key TTL (the fencing lease depends on it), write the first heartbeat
(a scheduler creates the consumers of the groups it sees there), keep
heartbeating, wait for the streams and the group's three consumers,
subscribe to the doorbell, to cancel requests and to the worker's offers
(the firings of broadcast jobs addressed to it), then pull. A worker never
creates NATS objects, and waits, without a time limit, while one is missing.

Shutdown (section 9): stop fetching and taking offers; let runs finish
within the drain grace; stop the rest (``failed``, ``interrupted:
shutdown``); flush finished events within the flush grace; stop
heartbeating and delete the heartbeat key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from nats.aio.client import Client as NATS
from nats.js.client import JetStreamContext

from .admin import AdminServer
from .aio import first_of
from .cancel import CancelListener
from .config import WorkerConfig
from .connection import NatsOptions, connect
from .delivery import pulled
from .dispatch import Dispatcher, DispatchSettings
from .errors import ConfigError
from .fence import Fence
from .handler import Handler, Handlers
from .heartbeat import Heartbeat
from .metrics import Metrics, prometheus_available
from .offers import OfferListener
from .pull import Puller
from .report import Reporter
from .running import Running
from .slots import Slots
from .start import Starter
from .status import WorkerStatus
from .subjects import BANDS, Subjects
from .supervise import ServiceHealth, supervise
from .topology import awaited, wait_for

log = logging.getLogger("chime_worker")

H = TypeVar("H", bound=Handler)

#: The error of runs stopped at the end of a shutdown's drain grace.
SHUTDOWN_REASON = "worker shutting down"


@dataclass(frozen=True)
class ShutdownReport:
    """What a shutdown did."""

    #: Every run ended within the drain grace.
    drained: bool
    #: Runs stopped when the drain grace ended (reported interrupted).
    interrupted: int
    #: Finished events still unpublished when the flush grace ended.
    unsent_events: int


class Worker:
    """Runs the firings of one group with the handlers registered on it.

    ``Worker(group="reports", threads=8)``; settings are the fields of
    :class:`WorkerConfig` (or pass ``config=``). Register handlers with
    :meth:`handler`, then ``await worker.run(...)`` (connects, runs until
    SIGTERM or SIGINT, drains), or ``start``/``shutdown`` on your own connection.
    """

    def __init__(self, config: WorkerConfig | None = None, **settings: Any) -> None:
        try:
            self.config = dataclasses.replace(config or WorkerConfig(), **settings)
        except TypeError as e:
            raise ConfigError("settings", f"are invalid: {e}") from None
        self.config.validate()
        if self.config.metrics_port is not None and not prometheus_available():
            raise ConfigError(
                "metrics_port", "needs prometheus_client: pip install 'chime-worker[metrics]'"
            )
        self.subjects = Subjects(self.config.subject_prefix)
        self.metrics = Metrics(self.config.group)
        self.status = WorkerStatus()
        self.health = ServiceHealth()
        self._handlers = Handlers()
        self._report_listeners: list[Callable[[str, bool], None]] = []
        self._stop_requested = asyncio.Event()
        self._client: NATS | None = None
        self._parts: _Parts | None = None
        #: The port ``/metrics`` is served on once started (``None`` when not served).
        self.metrics_port: int | None = None

    @property
    def id(self) -> str:
        return self.config.worker_id

    @property
    def group(self) -> str:
        return self.config.group

    def handler(self, name: str) -> Callable[[H], H]:
        """Decorator registering an async function as the handler ``name``."""

        def register(fn: H) -> H:
            self.add_handler(name, fn)
            return fn

        return register

    def add_handler(self, name: str, fn: Handler) -> None:
        """Registers ``fn`` as the handler ``name`` (what a job's ``handler`` field names)."""
        if self._parts is not None:
            raise ConfigError("handlers", "are fixed once the worker started")
        self._handlers.add(name, fn)

    def on_reported(self, callback: Callable[[str, bool], None]) -> None:
        """Calls ``callback(firing_id, stored)`` when a finished event was stored
        by JetStream (``stored`` true) or given up at the end of a shutdown."""
        self._report_listeners.append(callback)

    def not_ready(self) -> str | None:
        """Why the worker does not take firings now (what ``/readyz`` says); ``None`` when it does."""
        if self._client is not None and not self._client.is_connected:
            return "not connected to NATS"
        return self.status.not_ready()

    def request_stop(self) -> None:
        """Asks :meth:`run` to shut down (what SIGTERM and SIGINT do)."""
        self._stop_requested.set()

    async def start(self, client: NATS) -> None:
        """Registers the worker and starts pulling on ``client``; returns once it
        is pulling. Cancel it to give up while it waits for a scheduler."""
        if self._parts is not None:
            raise ConfigError("start", "was called twice: a worker starts once")
        self._client = client
        parts = _Parts(self.metrics, self.health)
        try:
            await self._start(client, parts)
        except BaseException:
            await parts.stop_all()
            raise
        self._parts = parts

    async def _start(self, client: NATS, parts: _Parts) -> None:
        config = self.config
        js = client.jetstream()
        if config.metrics_port is not None:
            parts.admin = AdminServer(self.metrics, self.not_ready, self.health.failing)
            self.metrics_port = await parts.admin.start(config.metrics_host, config.metrics_port)
        bucket = self.subjects.workers_bucket
        kv = await wait_for(self.status, awaited("bucket", bucket), lambda: js.key_value(bucket))
        worker_ttl = (await kv.status()).ttl or 0.0
        lease = config.lease(worker_ttl)
        config.validate(worker_ttl)

        parts.slots = Slots(config.threads, self.metrics)
        parts.running = Running()
        parts.heartbeat = Heartbeat(
            kv, config.worker_id, config.group, parts.slots, parts.running, self._handlers.names(),
            config.heartbeat_interval,
        )
        first_beat = await wait_for(self.status, "the first heartbeat to be written", parts.heartbeat.beat_once)
        fence = Fence(lease, first_beat, parts.running, self.status, self.metrics)
        parts.spawn_background("heartbeat", lambda: parts.heartbeat.run(fence, parts.background_stop))
        parts.spawn_background("fence", lambda: fence.run(parts.background_stop))

        await self._wait_for_streams(js)
        parts.reporter = Reporter(
            js,
            self.subjects.finished(config.group, config.worker_id),
            parts.running,
            self.metrics,
            lambda: client.max_payload,
            self._reported,
        )
        starter = Starter(
            client, self.subjects.start(config.group, config.worker_id), config.worker_id, config.group,
            config.start_timeout,
        )
        settings = DispatchSettings(config.worker_id, config.nak_delay, config.stop_grace, config.max_output_bytes)
        dispatcher = Dispatcher(settings, starter, self._handlers, parts.running, parts.reporter, self.metrics)
        puller = Puller(
            client, self.subjects, config.group, parts.slots, fence, self.metrics, config.poll_interval,
            config.fetch_expiry, lambda msg: parts.spawn_firing(dispatcher.dispatch(pulled(client, msg))),
        )
        await puller.open()
        parts.puller = puller
        listener = CancelListener(client, parts.running)
        parts.cancels = await client.subscribe(self.subjects.cancel(config.worker_id), cb=listener.on_request)
        offers = OfferListener(config.worker_id, dispatcher, parts.slots, fence, self.status, parts.spawn_firing)
        parts.offers = await client.subscribe(self.subjects.offer(config.group, config.worker_id), cb=offers.on_offer)
        # Once the server has the subscriptions, no doorbell, cancel or offer sent after "ready" is missed.
        await _subscriptions_confirmed(client)
        parts.spawn_fetch(lambda: puller.run(parts.fetch_stop))
        self.status.started = True
        log.info(
            "worker %s of group %s ready: %d threads, handlers %s",
            config.worker_id, config.group, config.threads, ", ".join(self._handlers.names()) or "none",
        )

    async def _wait_for_streams(self, js: JetStreamContext) -> None:
        fire_stream = self.subjects.fire_stream
        for stream in (fire_stream, self.subjects.events_stream):
            await wait_for(self.status, awaited("stream", stream), functools.partial(js.stream_info, stream))
        for band in BANDS:
            name = self.subjects.fire_consumer(self.config.group, band)
            await wait_for(self.status, awaited("consumer", name), functools.partial(js.consumer_info, fire_stream, name))

    def _reported(self, firing_id: str, stored: bool) -> None:
        for listener in self._report_listeners:
            try:
                listener(firing_id, stored)
            except Exception:
                log.exception("a report listener failed")

    async def shutdown(self) -> ShutdownReport:
        """Stops gracefully (see the module docs) and returns what happened."""
        parts = self._parts
        if parts is None:
            raise ConfigError("shutdown", "needs a started worker")
        self._parts = None
        config = self.config
        log.info("worker shutting down: no more fetches (%d in flight)", parts.slots.in_flight)
        self.status.draining = True
        await parts.stop_fetching()
        drained, interrupted = await parts.drain(config.drain_grace, config.start_timeout * 1.25 + config.stop_grace)
        if not drained:
            log.warning("drain grace over: %d run(s) stopped, to be run again elsewhere", interrupted)
        unsent = await parts.reporter.flush(config.flush_grace)
        await parts.stop_all()
        await parts.heartbeat.remove()
        report = ShutdownReport(drained=drained, interrupted=interrupted, unsent_events=unsent)
        log.info("worker stopped: %s", report)
        return report

    async def run(
        self,
        nats: NatsOptions | str | None = None,
        *,
        client: NATS | None = None,
        handle_signals: bool = True,
        ready: Callable[[], None] | None = None,
    ) -> ShutdownReport:
        """Connects (unless given ``client``), starts, runs until SIGTERM or SIGINT
        (or :meth:`request_stop`), then shuts down and closes the connection it
        made. ``ready`` is called once the worker is pulling."""
        own = client is None
        if client is None:
            options = NatsOptions(url=nats) if isinstance(nats, str) else nats or NatsOptions()
            client = await connect(options, f"chime-worker {self.id}")
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self.request_stop)
        try:
            starting = asyncio.ensure_future(self.start(client))
            await first_of(asyncio.shield(starting), self._stop_requested.wait())
            if not starting.done():
                log.info("stop requested while starting; exiting")
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                return ShutdownReport(drained=True, interrupted=0, unsent_events=0)
            starting.result()
            if ready is not None:
                ready()
            await self._stop_requested.wait()
            return await self.shutdown()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            if own:
                await _close(client)


async def _subscriptions_confirmed(client: NATS) -> None:
    """Returns once the server has processed every subscription made so far.

    nats-py writes a flush's PING to the socket at once but queues SUBs for
    its flusher task, so the first PONG can come back before the server
    processed the SUBs (another connection's message then finds no one). By
    the time that PONG is read the flusher has written them, ahead of the
    second PING: its PONG confirms them.
    """
    for _ in range(2):
        await client.flush(timeout=10)


async def _close(client: NATS) -> None:
    try:
        await asyncio.wait_for(client.drain(), timeout=10)
    except Exception as error:
        log.debug("draining the NATS connection failed: %s", error)
        await client.close()


class _Parts:
    """A started worker's pieces, and the order in which they stop."""

    def __init__(self, metrics: Metrics, health: ServiceHealth) -> None:
        self._metrics = metrics
        self._health = health
        self.fetch_stop = asyncio.Event()
        self.background_stop = asyncio.Event()
        self._fetch: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[None]] = []
        self.firings: set[asyncio.Task[None]] = set()
        self.admin: AdminServer | None = None
        self.puller: Puller | None = None
        self.cancels: Any = None
        self.offers: Any = None
        self.slots: Slots
        self.running: Running
        self.heartbeat: Heartbeat
        self.reporter: Reporter

    def spawn_background(self, name: str, loop: Callable[[], Any]) -> None:
        task = supervise(name, loop, self.background_stop, self._metrics, self._health)
        self._background.append(asyncio.create_task(task))

    def spawn_fetch(self, loop: Callable[[], Any]) -> None:
        self._fetch = asyncio.create_task(supervise("fetch", loop, self.fetch_stop, self._metrics, self._health))

    def spawn_firing(self, dispatch: Awaitable[None]) -> None:
        """Runs the dispatch of a firing that holds a thread; the thread comes back when it ends."""
        task = asyncio.create_task(self._dispatch(dispatch))
        self.firings.add(task)
        task.add_done_callback(self.firings.discard)

    async def _dispatch(self, dispatch: Awaitable[None]) -> None:
        try:
            await dispatch
        except Exception:
            log.exception("a firing's dispatch failed")
        finally:
            self.slots.give_back()

    async def stop_fetching(self) -> None:
        """No more fetches and no more offers."""
        await self.stop_offers()
        self.fetch_stop.set()
        if self._fetch is not None:
            await self._fetch
        if self.puller is not None:
            await self.puller.close()
            self.puller = None

    async def stop_offers(self) -> None:
        if self.offers is not None:
            try:
                await self.offers.unsubscribe()
            except Exception as error:
                log.debug("unsubscribing from offers: %s", error)
            self.offers = None

    async def drain(self, grace: float, stop_time: float) -> tuple[bool, int]:
        """Waits for the runs, at most ``grace``; then stops the rest. Returns (drained, stopped)."""
        if self.firings:
            await asyncio.wait(set(self.firings), timeout=grace)
        if not self.firings:
            return True, 0
        interrupted = self.running.interrupt_all(SHUTDOWN_REASON)
        await asyncio.wait(set(self.firings), timeout=stop_time + 5.0)
        return False, interrupted

    async def stop_all(self) -> None:
        """Stops every loop and subscription this worker started."""
        self.fetch_stop.set()
        self.background_stop.set()
        tasks = [t for t in [self._fetch, *self._background] if t is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for task in tasks:
            task.cancel()
        if self.puller is not None:
            await self.puller.close()
            self.puller = None
        await self.stop_offers()
        if self.cancels is not None:
            try:
                await self.cancels.unsubscribe()
            except Exception as error:
                log.debug("unsubscribing from cancel requests: %s", error)
            self.cancels = None
        if self.admin is not None:
            await self.admin.close()
            self.admin = None
