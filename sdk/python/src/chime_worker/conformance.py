"""The protocol conformance worker: ``python3 -m chime_worker.conformance [args]``.

The conformance suite (the Rust ``tests`` crate) launches it as a child
process and drives it through the protocol's cases against a real
nats-server and scheduler; the TypeScript SDK ships the same program with
the same interface. It registers the handlers ``echo``, ``sleep``,
``fail``, ``shard``, ``trace`` and ``env``, prints exactly one line
``conformance worker ready <worker id>`` on stdout once it is pulling, logs
to stderr, and exits 0 after a clean drain on SIGTERM or SIGINT (or, with
``--count N``, once N finished events were stored); non-zero with a message
on bad arguments (2) or when NATS is unreachable or unsuitable (1).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from . import cli
from .connection import connect
from .context import FiringContext
from .errors import ConfigError, ConnectError
from .handler import HandlerError
from .timefmt import format_time
from .worker import Worker


def _number_text(value: float) -> str:
    """A JSON number as JavaScript prints it: ``20``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


async def echo(ctx: FiringContext) -> str:
    payload = ctx.payload
    text = payload.get("text") if isinstance(payload, dict) else None
    return text if isinstance(text, str) else json.dumps(payload)


async def sleep(ctx: FiringContext) -> str:
    seconds = ctx.payload.get("seconds") if isinstance(ctx.payload, dict) else None
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
        raise HandlerError("payload.seconds must be a number of seconds, at least 0")
    if not await ctx.sleep(float(seconds)):
        raise HandlerError("cancelled")
    return f"slept {_number_text(seconds)}"


async def fail(ctx: FiringContext) -> str:
    message = ctx.payload.get("message") if isinstance(ctx.payload, dict) else None
    raise HandlerError(message if isinstance(message, str) else "failed on purpose")


async def shard(ctx: FiringContext) -> str:
    if ctx.shard is None:
        return "unsharded"
    return f"{ctx.shard}/{ctx.shards}"


async def trace(ctx: FiringContext) -> str:
    return ctx.traceparent or ""


async def env(ctx: FiringContext) -> str:
    return json.dumps(
        {
            "firing_id": ctx.firing_id,
            "job_id": ctx.job_id,
            "attempt": ctx.attempt,
            "scheduled_at": format_time(ctx.scheduled_at),
        }
    )


HANDLERS = {"echo": echo, "sleep": sleep, "fail": fail, "shard": shard, "trace": trace, "env": env}


def build_worker(args: Any) -> Worker:
    worker = Worker(cli.worker_config(args))
    for name, handler in HANDLERS.items():
        worker.add_handler(name, handler)
    return worker


async def serve(worker: Worker, args: Any) -> int:
    """Connects, runs until signalled (or ``--count`` stored events), drains; the exit status."""
    try:
        client = await connect(cli.nats_options(args), f"chime conformance worker {worker.id}")
    except (ConnectError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    stored = 0

    def counted(_firing_id: str, ok: bool) -> None:
        nonlocal stored
        stored += ok
        if args.count and stored >= args.count:
            worker.request_stop()

    worker.on_reported(counted)

    def ready() -> None:
        print(f"conformance worker ready {worker.id}", flush=True)

    try:
        report = await worker.run(client=client, ready=ready)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        try:
            await asyncio.wait_for(client.drain(), timeout=10)
        except Exception:
            await client.close()
    return 0 if report.unsent_events == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = cli.parse_args(argv, "python3 -m chime_worker.conformance", __doc__.splitlines()[0])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        worker = build_worker(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    return asyncio.run(serve(worker, args))


if __name__ == "__main__":
    sys.exit(main())
