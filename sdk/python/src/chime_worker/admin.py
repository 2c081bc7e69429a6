"""The worker's HTTP endpoints, served only when a metrics port is set:
``/metrics`` (Prometheus text), ``/healthz`` (liveness: 200 unless one of
its loops keeps failing; it does not depend on NATS, since restarting a
worker does not bring NATS back) and ``/readyz`` (200 while connected to NATS, started,
not fenced and not draining; else 503 with the reason).

A few lines of asyncio rather than a web framework: the requests are three
GETs. Requests are bounded (8 KiB of head, 5 s to send it) and anything
else is answered 404 or 405.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .metrics import Metrics

log = logging.getLogger("chime_worker")

MAX_HEAD = 8 * 1024
READ_TIMEOUT = 5.0
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AdminServer:
    def __init__(
        self,
        metrics: Metrics,
        not_ready: Callable[[], str | None],
        failing: Callable[[], list[tuple[str, str]]],
    ) -> None:
        self._metrics = metrics
        self._not_ready = not_ready
        self._failing = failing
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listens on ``host:port`` (0: any free port); returns the port."""
        self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        """Status, content type and body for one request."""
        path = path.split("?", 1)[0]
        if path not in ("/metrics", "/healthz", "/readyz"):
            return 404, "text/plain", b"not found\n"
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/metrics":
            return 200, METRICS_TYPE, self._metrics.render()
        if path == "/healthz":
            failing = self._failing()
            if failing:
                lines = "".join(f"service {name} keeps failing: {error}\n" for name, error in failing)
                return 503, "text/plain", lines.encode()
            return 200, "text/plain", b"ok\n"
        reason = self._not_ready()
        if reason is not None:
            return 503, "text/plain", f"{reason}\n".encode()
        return 200, "text/plain", b"ready\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=READ_TIMEOUT)
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if len(parts) != 3:
                status, kind, body = 400, "text/plain", b"bad request\n"
            else:
                status, kind, body = self.answer(parts[0], parts[1])
                if parts[0] == "HEAD":
                    body = b""
            reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(
                status, "Service Unavailable"
            )
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await asyncio.wait_for(writer.drain(), timeout=READ_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as error:
            log.debug("admin request dropped: %s", type(error).__name__)
        except Exception:
            log.exception("admin request failed")
        finally:
            writer.close()
