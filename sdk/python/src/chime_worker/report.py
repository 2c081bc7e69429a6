"""Reporting finished runs: JSON on JetStream ``chime.events.finished.<group>.<worker id>``
with ``Nats-Msg-Id: finished:<firing id>``, so a re-sent report is dropped.

Each report is kept in memory and retried with backoff (100 ms doubling to
5 s) until JetStream acknowledges it, through NATS restarts; only the end of
a shutdown's flush grace stops the retries. A run's thread is free as soon
as it ended: reporting happens in the background.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from nats.js.client import JetStreamContext

from .metrics import Metrics
from .run import RunReport
from .running import Running
from .timefmt import format_time

log = logging.getLogger("chime_worker")

FIRST_RETRY = 0.1
MAX_RETRY = 5.0
#: How long one publish waits for JetStream's ack, in seconds.
PUBLISH_TIMEOUT = 5.0
#: Room left in NATS's payload limit for the subject and headers.
PAYLOAD_MARGIN = 4096


def finished_event(firing_id: str, worker_id: str, report: RunReport) -> dict[str, Any]:
    """The finished event's body, fields in the Rust worker's order, empty ones left out."""
    event: dict[str, Any] = {"firing_id": firing_id, "worker_id": worker_id, "outcome": report.outcome}
    if report.error:
        event["error"] = report.error
    if report.interrupted:
        event["interrupted"] = report.interrupted
    if report.output:
        event["output"] = report.output
    event["started_at"] = format_time(report.started_at)
    event["finished_at"] = format_time(report.finished_at)
    return event


def encode_event(event: dict[str, Any], max_payload: int) -> bytes:
    """The event as JSON within ``max_payload`` bytes: an output whose escapes
    (control characters take 6 bytes each) overflow it keeps a shorter tail."""
    body = json.dumps(event, ensure_ascii=False).encode("utf-8")
    limit = max(max_payload - PAYLOAD_MARGIN, 1024)
    while len(body) > limit and event.get("output"):
        output = event["output"]
        # Keep the share of the tail that fits, a little less, and measure again.
        keep = int(len(output) * limit / len(body) * 0.95)
        event = {**event, "output": output[len(output) - keep :] if keep > 0 else ""}
        if not event["output"]:
            del event["output"]
        body = json.dumps(event, ensure_ascii=False).encode("utf-8")
    return body


class Reporter:
    """Publishes finished events in the background."""

    def __init__(
        self,
        js: JetStreamContext,
        subject: str,
        running: Running,
        metrics: Metrics,
        max_payload: Callable[[], int],
        on_reported: Callable[[str, bool], None] | None = None,
    ) -> None:
        self._js = js
        self._subject = subject
        self._running = running
        self._metrics = metrics
        self._max_payload = max_payload
        self._on_reported = on_reported
        self._tasks: set[asyncio.Task[None]] = set()
        self.unsent = 0

    def report(self, event: dict[str, Any]) -> None:
        """Queues ``event`` for publishing; returns at once."""
        task = asyncio.create_task(self._publish_until_acked(event), name=f"report {event['firing_id']}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish_until_acked(self, event: dict[str, Any]) -> None:
        firing_id = event["firing_id"]
        sent = False
        try:
            body = encode_event(event, self._max_payload())
            headers = {"Nats-Msg-Id": f"finished:{firing_id}"}
            delay, failures = FIRST_RETRY, 0
            while True:
                try:
                    await self._js.publish(self._subject, body, timeout=PUBLISH_TIMEOUT, headers=headers)
                    sent = True
                    if failures:
                        log.info("firing %s: finished event published after %d retries", firing_id, failures)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    failures += 1
                    self._metrics.report_retry()
                    if failures == 1:
                        log.warning("firing %s: cannot publish its finished event; retrying: %s", firing_id, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY)
        except asyncio.CancelledError:
            self.unsent += 1
            log.error(
                "firing %s: gave up publishing its finished event (%s) at shutdown; "
                "the scheduler will treat the firing as lost",
                firing_id,
                event["outcome"],
            )
        finally:
            self._running.reported(firing_id)
            if self._on_reported is not None:
                self._on_reported(firing_id, sent)

    async def flush(self, grace: float) -> int:
        """Waits until every queued event is published, at most ``grace``
        seconds, then stops retrying. Returns how many events were given up."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        left = set(self._tasks)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)
        return self.unsent
