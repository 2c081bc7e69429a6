"""The firing's W3C trace context, and the handler's span when OpenTelemetry is there.

Every firing message carries a ``traceparent`` header. The handler sees it
as ``ctx.traceparent`` (``None`` when absent or malformed, so a handler can
pass it on without checking it). When the ``opentelemetry-api`` package is
installed, each run is wrapped in a span that continues that trace; the
package stays optional, and without it nothing here imports it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse_traceparent(value: str | None) -> str | None:
    """A valid W3C ``traceparent`` (surrounding blanks dropped), else ``None``.

    Valid: version, trace id, parent id and flags in lower-case hex; version
    ``ff`` and all-zero ids are invalid; version ``00`` has exactly these four
    fields, a later version may append more after a ``-``.
    """
    if value is None:
        return None
    text = value.strip()
    match = _TRACEPARENT.match(text)
    if match is None:
        return None
    version, trace_id, parent_id, _flags = match.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    rest = text[match.end() :]
    if version == "00" and rest:
        return None
    if rest and not rest.startswith("-"):
        return None
    return text


def _otel() -> Any | None:
    """The OpenTelemetry API modules, if installed."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    return trace, TraceContextTextMapPropagator


_OTEL = _otel()


def otel_available() -> bool:
    """Whether runs are wrapped in OpenTelemetry spans."""
    return _OTEL is not None


@contextlib.contextmanager
def firing_span(handler: str, traceparent: str | None, attributes: dict[str, Any]) -> Iterator[Any]:
    """A span named ``firing <handler>`` continuing ``traceparent`` (a new trace
    without one), current while the handler runs; a no-op without OpenTelemetry.
    An exception leaving the block is recorded on the span and re-raised."""
    if _OTEL is None:
        yield None
        return
    trace, propagator = _OTEL
    carrier = {"traceparent": traceparent} if traceparent else {}
    parent = propagator().extract(carrier)
    tracer = trace.get_tracer("chime_worker")
    with tracer.start_as_current_span(
        f"firing {handler}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span
