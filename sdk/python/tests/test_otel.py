"""With OpenTelemetry installed, each run is a span that continues the firing's trace."""

import asyncio
from datetime import timedelta

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk (pip install opentelemetry-sdk)")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from chime_worker import HandlerError  # noqa: E402
from chime_worker.context import FiringContext  # noqa: E402
from chime_worker.run import run  # noqa: E402
from chime_worker.running import RunControl  # noqa: E402
from chime_worker.timefmt import utc_now  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


def ctx(traceparent):
    now = utc_now()
    return FiringContext(
        firing_id="job@1#1", job_id="job", handler="h", scheduled_at=now, due_at=now, attempt=1, priority=5,
        payload=None, deadline=now + timedelta(seconds=5), shard=None, shards=None, traceparent=traceparent,
        worker_id="w", max_output_bytes=100,
    )


def test_the_handler_runs_inside_a_span_continuing_the_firings_trace():
    exporter.clear()
    inside = []

    async def handler(c):
        inside.append(trace.get_current_span().get_span_context())
        return "ok"

    report = asyncio.run(run(handler, ctx(f"00-{TRACE_ID}-{PARENT_ID}-01"), RunControl(), 1.0))
    assert report.outcome == "succeeded"
    (span,) = exporter.get_finished_spans()
    assert span.name == "firing h"
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == PARENT_ID
    assert span.attributes["chime.firing_id"] == "job@1#1"
    assert inside[0].span_id == span.context.span_id, "the span is current in the handler"


def test_a_failed_run_marks_its_span_and_a_firing_without_trace_starts_one():
    exporter.clear()

    async def failing(c):
        raise HandlerError("bad")

    report = asyncio.run(run(failing, ctx(None), RunControl(), 1.0))
    assert report.outcome == "failed"
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert span.status.status_code == StatusCode.ERROR
