"""The worker's Prometheus metrics, under the Rust worker's names (worker/src/metrics.rs).

``prometheus_client`` is optional (``pip install 'chime-worker[metrics]'``):
without it :class:`Metrics` records nothing. With it, each worker has a
registry of its own, so several workers in one process do not collide, and
every series carries the worker's ``group``. Other labels are small bounded
sets: ``handler`` is a registered name or ``unknown``, ``outcome`` one of
four, ``reason`` a start refusal.
"""

from __future__ import annotations

from typing import Any

_prom: Any
try:
    import prometheus_client as _prom
except ImportError:  # the optional extra is not installed
    _prom = None

LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def prometheus_available() -> bool:
    return _prom is not None


class Metrics:
    """Every metric of one worker; a no-op without ``prometheus_client``."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.registry: Any = None
        if _prom is None:
            return
        self.registry = _prom.CollectorRegistry(auto_describe=True)
        g = ["group"]

        def gauge(name: str, doc: str) -> Any:
            return _prom.Gauge(name, doc, g, registry=self.registry).labels(group)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
            metric = _prom.Counter(name, doc, [*labels, "group"], registry=self.registry)
            return metric if labels else metric.labels(group)

        def histogram(name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()) -> Any:
            metric = _prom.Histogram(name, doc, [*labels, "group"], buckets=buckets, registry=self.registry)
            return metric if labels else metric.labels(group)

        self._in_flight = gauge("chime_worker_in_flight", "Firings this worker holds: being started or running.")
        self._free_threads = gauge("chime_worker_free_threads", "Threads not holding a firing.")
        self._threads = gauge("chime_worker_threads", "Firings this worker runs at most at once.")
        self._firings = counter(
            "chime_worker_firings_total", "Finished runs by handler and outcome.", ("handler", "outcome")
        )
        self._run_duration = histogram(
            "chime_worker_run_duration_seconds", "How long runs took, by handler.", DURATION_BUCKETS, ("handler",)
        )
        self._start_lateness = histogram(
            "chime_worker_start_lateness_seconds", "Accepted start minus the firing's due time.", LATENESS_BUCKETS
        )
        self._start_decision = histogram(
            "chime_worker_start_decision_seconds",
            "Start request to the scheduler's answer (accepted, refused or none).",
            DECISION_BUCKETS,
        )
        self._fetch_errors = counter("chime_worker_fetch_errors_total", "Failed fetches from the firing consumers.")
        self._start_refusals = counter(
            "chime_worker_start_refusals_total", "Fetched firings not run, by reason.", ("reason",)
        )
        self._bad_messages = counter(
            "chime_worker_bad_messages_total", "Messages terminated because they were not valid firings."
        )
        self._report_retries = counter(
            "chime_worker_report_retries_total", "Finished-event publishes that failed once and were retried."
        )
        self._fenced = counter(
            "chime_worker_fenced_total",
            "Times the worker fenced itself: no heartbeat written for its lease, so its runs were stopped "
            "and fetching paused.",
        )
        self._service_restarts = counter(
            "chime_service_restarts_total",
            "Restarts of a supervised service after it failed or stopped early.",
            ("service",),
        )
        self._clock_offset = gauge(
            "chime_clock_offset_seconds",
            "Local clock minus the NATS server's (positive: ahead), the smallest sample of the last 5 minutes "
            "of fetched firings; an upper bound.",
        )

    @property
    def enabled(self) -> bool:
        return self.registry is not None

    def render(self) -> bytes:
        """Prometheus text exposition of every metric (empty when disabled)."""
        if _prom is None or self.registry is None:
            return b""
        # prometheus_client adds a ``_created`` series to every counter and
        # histogram; the Rust worker has none, and the names must match.
        lines = bytes(_prom.generate_latest(self.registry)).splitlines(keepends=True)
        return b"".join(line for line in lines if not _is_created(line))

    def set_in_flight(self, in_flight: int, threads: int) -> None:
        if self.registry is not None:
            self._threads.set(threads)
            self._in_flight.set(in_flight)
            self._free_threads.set(max(threads - in_flight, 0))

    def firing_finished(self, handler_label: str, outcome: str, duration: float) -> None:
        if self.registry is not None:
            self._firings.labels(handler_label, outcome, self.group).inc()
            self._run_duration.labels(handler_label, self.group).observe(duration)

    def start_lateness(self, seconds: float) -> None:
        if self.registry is not None:
            self._start_lateness.observe(max(seconds, 0.0))

    def start_decision(self, seconds: float) -> None:
        if self.registry is not None:
            self._start_decision.observe(seconds)

    def fetch_error(self) -> None:
        if self.registry is not None:
            self._fetch_errors.inc()

    def start_refusal(self, reason: str) -> None:
        if self.registry is not None:
            self._start_refusals.labels(reason, self.group).inc()

    def bad_message(self) -> None:
        if self.registry is not None:
            self._bad_messages.inc()

    def report_retry(self) -> None:
        if self.registry is not None:
            self._report_retries.inc()

    def fenced(self) -> None:
        if self.registry is not None:
            self._fenced.inc()

    def service_restart(self, service: str) -> None:
        if self.registry is not None:
            self._service_restarts.labels(service, self.group).inc()

    def clock_offset(self, seconds: float) -> None:
        if self.registry is not None:
            self._clock_offset.set(seconds)


def _is_created(line: bytes) -> bool:
    if line.startswith(b"# "):
        parts = line.split(b" ", 3)
        name = parts[2] if len(parts) > 2 else b""
    else:
        name = line.split(b"{", 1)[0].split(b" ", 1)[0]
    return name.endswith(b"_created")
