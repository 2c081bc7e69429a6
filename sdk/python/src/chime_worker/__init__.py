"""Chime worker SDK: run Chime firings with your own async handlers.

    import asyncio
    from chime_worker import FiringContext, Worker

    worker = Worker(group="reports", threads=4)

    @worker.handler("hello")
    async def hello(ctx: FiringContext) -> str:
        return f"hello from {ctx.firing_id}"

    asyncio.run(worker.run("nats://127.0.0.1:4222"))

The worker implements docs/PROTOCOL.md as the Rust worker does: it pulls
only as many firings as it has free threads, asks the scheduler to start
each, runs it under its deadline, reports how it ended, heartbeats, fences
itself when it cannot heartbeat, and drains on SIGTERM.
"""

from ._version import __version__
from .config import WorkerConfig
from .connection import NatsOptions, connect
from .context import FiringContext
from .errors import ChimeWorkerError, ConfigError, ConnectError, HandlerRegistrationError
from .handler import Handler, HandlerError
from .worker import SHUTDOWN_REASON, ShutdownReport, Worker

__all__ = [
    "SHUTDOWN_REASON",
    "ChimeWorkerError",
    "ConfigError",
    "ConnectError",
    "FiringContext",
    "Handler",
    "HandlerError",
    "HandlerRegistrationError",
    "NatsOptions",
    "ShutdownReport",
    "Worker",
    "WorkerConfig",
    "__version__",
    "connect",
]
