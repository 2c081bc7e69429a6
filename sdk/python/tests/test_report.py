"""Finished events: the Rust worker's fields, and always within NATS's payload limit."""

import json
from datetime import datetime, timezone

from chime_worker.clock import ClockOffset
from chime_worker.report import encode_event, finished_event
from chime_worker.run import RunReport

T0 = datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc)


def report(**fields):
    base = dict(outcome="succeeded", error=None, output=None, started_at=T0, finished_at=T0, duration=0.0)
    return RunReport(**{**base, **fields})


def test_events_leave_out_empty_fields():
    event = finished_event("job@1#1", "w", report())
    assert event == {"firing_id": "job@1#1", "worker_id": "w", "outcome": "succeeded",
                     "started_at": "2026-03-28T01:30:00.000Z", "finished_at": "2026-03-28T01:30:00.000Z"}
    event = finished_event("job@1#1", "w", report(outcome="failed", error="e", output="o", interrupted="fenced"))
    assert list(event) == ["firing_id", "worker_id", "outcome", "error", "interrupted", "output",
                           "started_at", "finished_at"]


def test_an_output_of_escapes_is_cut_to_fit_the_payload_limit():
    output = "\x01" * (512 * 1024)  # each becomes \u0001: six bytes of JSON
    body = encode_event(finished_event("job@1#1", "w", report(output=output)), 1024 * 1024)
    assert len(body) <= 1024 * 1024
    event = json.loads(body)
    assert event["output"] and output.endswith(event["output"])
    small = encode_event(finished_event("job@1#1", "w", report(output="fine")), 1024 * 1024)
    assert json.loads(small)["output"] == "fine"


def test_the_clock_offset_is_the_smallest_recent_sample():
    clock = ClockOffset(window=60)
    s = 1_000_000_000
    server = 1_800_000_000 * s
    assert clock.estimate(0) is None
    clock.observe(0, server, server + 2 * s + 30_000_000)
    clock.observe(0, server, server + 12 * s)
    assert clock.estimate(0) == 2.03
    clock.observe(1, server + s, server + 3 * s + 5_000_000)
    assert clock.estimate(1) == 2.005
    assert clock.estimate(62) is None
    assert clock.observe(0, server, server - 700_000_000) == -0.7
