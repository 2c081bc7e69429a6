"""Supervised loops come back after failures; five in a row make /healthz answer 503."""

import asyncio

from chime_worker.admin import AdminServer
from chime_worker.metrics import Metrics
from chime_worker.supervise import ServiceHealth, supervise


def test_a_failing_loop_is_restarted_counted_and_reported_unhealthy():
    metrics, health = Metrics("g"), ServiceHealth()
    admin = AdminServer(metrics, lambda: None, health.failing)
    runs = []

    async def scenario():
        stop = asyncio.Event()

        async def flaky():
            runs.append(1)
            if len(runs) == 6:
                stop.set()
                return
            raise RuntimeError(f"boom {len(runs)}")

        await asyncio.wait_for(supervise("fetch", flaky, stop, metrics, health), 10)

    assert admin.answer("GET", "/healthz")[:2] == (200, "text/plain")
    asyncio.run(scenario())
    assert len(runs) == 6
    assert 'chime_service_restarts_total{group="g",service="fetch"} 5.0' in metrics.render().decode()
    assert health.failing() == [("fetch", "RuntimeError: boom 5")]
    status, _, body = admin.answer("GET", "/healthz")
    assert (status, body) == (503, b"service fetch keeps failing: RuntimeError: boom 5\n")


def test_a_loop_that_ends_when_asked_is_not_restarted():
    metrics, health = Metrics("g"), ServiceHealth()

    async def scenario():
        stop = asyncio.Event()

        async def polite():
            stop.set()

        await asyncio.wait_for(supervise("fence", polite, stop, metrics, health), 5)

    asyncio.run(scenario())
    assert health.failing() == []
    assert "chime_service_restarts_total{" not in metrics.render().decode()


def test_the_admin_endpoints_answer_only_what_they_serve():
    admin = AdminServer(Metrics("g"), lambda: "draining: shutting down", lambda: [])
    assert admin.answer("GET", "/readyz") == (503, "text/plain", b"draining: shutting down\n")
    assert admin.answer("POST", "/metrics")[0] == 405
    assert admin.answer("GET", "/../etc/passwd")[0] == 404
    assert admin.answer("GET", "/metrics?x=1")[0] == 200
