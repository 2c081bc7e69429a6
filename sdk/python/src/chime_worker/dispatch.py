"""One firing message, from receipt to report: check it, ask to start it,
settle it, run it, report how it ended (docs/PROTOCOL.md sections 3-6).

A pulled message and an offer take the same path; how each is settled
(acked, NAKed, terminated, or for an offer nothing at all) is its
:class:`~chime_worker.delivery.Acker`'s. Every NAK of a firing this worker
does not start carries a delay: a bare NAK is redelivered at once and
would spin.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from .context import FiringContext
from .delivery import Delivery
from .handler import Handlers
from .message import BadMessage, FiringMessage, check_addressee, parse_firing
from .metrics import Metrics
from .report import Reporter, finished_event
from .run import run
from .running import Running
from .start import (
    MAX_REJECTED_DELIVERIES,
    Accepted,
    Refused,
    Rejected,
    Starter,
    Unavailable,
    rejected_delay,
)
from .timefmt import utc_now

log = logging.getLogger("chime_worker")


def deadline_of(firing: FiringMessage, from_reply: datetime | None, now: datetime) -> datetime:
    """The run's cut-off: the scheduler's, else start + ``Chime-Timeout-Ms``, else ``Chime-Deadline``."""
    if from_reply is not None:
        return from_reply
    if firing.timeout is not None:
        try:
            return now + timedelta(seconds=firing.timeout)
        except OverflowError:
            pass
    return firing.deadline


@dataclass
class DispatchSettings:
    worker_id: str
    nak_delay: float
    stop_grace: float
    max_output_bytes: int


class Dispatcher:
    """Takes deliveries from receipt to report; one per worker."""

    def __init__(
        self,
        settings: DispatchSettings,
        starter: Starter,
        handlers: Handlers,
        running: Running,
        reporter: Reporter,
        metrics: Metrics,
    ) -> None:
        self._settings = settings
        self._starter = starter
        self._handlers = handlers
        self._running = running
        self._reporter = reporter
        self._metrics = metrics

    async def dispatch(self, delivery: Delivery) -> None:
        """Handles one firing message; the caller holds its thread until this returns."""
        firing = await self.check(delivery)
        if firing is not None:
            await self.take(delivery, firing)

    async def check(self, delivery: Delivery) -> FiringMessage | None:
        """The firing a message carries; ``None`` for one that is not a valid
        firing (or an offer for another worker), which is counted, logged and
        settled here."""
        msg = delivery.msg
        try:
            firing = parse_firing(msg.headers, msg.data)
            if delivery.addressee is not None:
                check_addressee(msg.headers, delivery.addressee)
        except BadMessage as error:
            self._metrics.bad_message()
            log.warning(
                "%s the %s on %s, not a valid firing: %s", delivery.acker.discards, delivery.what, msg.subject, error
            )
            await delivery.acker.term()
            return None
        return firing

    async def take(self, delivery: Delivery, firing: FiringMessage) -> None:
        """Starts, runs and reports a checked firing; the caller holds its thread until this returns."""
        try:
            await self._handle(delivery, firing)
        except Exception:
            # A bug, not the firing's fault: let go of it, so that the heartbeats
            # stop listing it and the scheduler runs it again.
            fid = str(firing.firing_id)
            log.exception("firing %s: dispatch failed", fid)
            self._running.release(fid)
            self._running.reported(fid)

    async def _handle(self, delivery: Delivery, firing: FiringMessage) -> None:
        acker = delivery.acker
        fid = str(firing.firing_id)
        control = self._running.claim(fid)
        if control is None:
            # This worker runs or just ran this attempt: a redelivery. It is ours; drop the copy.
            self._metrics.start_refusal("duplicate_delivery")
            log.info("firing %s: dropping a second %s of an attempt this worker holds", fid, delivery.what)
            await acker.ack(fid)
            return
        if control.stopped is not None:
            # Past the drain grace, or fenced: leave it to another worker, later.
            self._running.release(fid)
            await acker.nak(self._settings.nak_delay, fid)
            return

        asked = time.monotonic()
        decision = await self._starter.ask(fid, firing.handler, firing.payload_sha256)
        self._metrics.start_decision(time.monotonic() - asked)
        if not isinstance(decision, Accepted):
            self._running.release(fid)
            await self._not_started(delivery, fid, decision)
            return

        # From here the scheduler's executing table owns the firing, and the
        # heartbeats list it until its report is acknowledged.
        self._running.accepted(fid)
        await acker.ack(fid)
        now = utc_now()
        self._metrics.start_lateness((now - firing.due_at).total_seconds())
        deadline = deadline_of(firing, decision.deadline, now)
        log.info("firing %s: started (handler %s, deadline %s)", fid, firing.handler, deadline.isoformat())
        ctx = FiringContext(
            firing_id=fid,
            job_id=firing.job_id,
            handler=firing.handler,
            scheduled_at=firing.scheduled_at,
            due_at=firing.due_at,
            attempt=firing.attempt,
            priority=firing.priority,
            payload=firing.payload,
            deadline=deadline,
            shard=firing.shard,
            shards=firing.shards,
            traceparent=firing.traceparent,
            worker_id=self._settings.worker_id,
            max_output_bytes=self._settings.max_output_bytes,
        )
        report = await run(self._handlers.get(firing.handler), ctx, control, self._settings.stop_grace)
        self._running.finish(fid, time.monotonic())
        self._metrics.firing_finished(self._handlers.label(firing.handler), report.outcome, report.duration)
        log.info(
            "firing %s: finished %s after %.3fs%s",
            fid,
            report.outcome,
            report.duration,
            f": {report.error}" if report.error else "",
        )
        self._reporter.report(finished_event(fid, self._settings.worker_id, report))

    async def _not_started(self, delivery: Delivery, fid: str, decision: Refused | Rejected | Unavailable) -> None:
        """Settles a firing whose start was not accepted. An offer settles as
        nothing: the scheduler offers it again until it starts or gives up."""
        acker = delivery.acker
        if isinstance(decision, Refused):
            reason = decision.refusal or "unspecified"
            self._metrics.start_refusal(reason)
            log.info("firing %s: start refused (%s); dropping the %s", fid, reason, delivery.what)
            await acker.ack(fid)
        elif isinstance(decision, Rejected):
            self._metrics.start_refusal("rejected")
            delivered = acker.delivered
            if delivered >= MAX_REJECTED_DELIVERIES:
                log.error("firing %s: the scheduler keeps rejecting it (%s); dropping it", fid, decision.error)
                await acker.term(fid)
            else:
                delay = rejected_delay(self._settings.nak_delay, delivered)
                log.warning("firing %s: start rejected (%s); the %s comes back in %gs", fid, decision.error, delivery.what, delay)
                await acker.nak(delay, fid)
        else:
            self._metrics.start_refusal("scheduler_unavailable")
            log.warning("firing %s: no start decision (%s); handing the %s back", fid, decision.error, delivery.what)
            await acker.nak(self._settings.nak_delay, fid)
