"""Start replies map to decisions as in the Rust worker; rejected firings back off, bounded."""

from datetime import datetime, timezone

from chime_worker.start import Accepted, Refused, Rejected, Unavailable, decide, rejected_delay


def test_replies_map_to_decisions():
    assert decide(b'{"accepted": true, "deadline": "2026-03-28T01:30:00.000Z"}') == Accepted(
        datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc))
    assert decide(b'{"accepted": true}') == Accepted(None)
    assert decide(b'{"accepted": true, "deadline": "soon"}') == Accepted(None)
    assert decide(b'{"accepted": false, "refusal": "already_started"}') == Refused("already_started")
    assert decide(b'{"accepted": false, "refusal": "some_future_reason"}') == Refused(None)
    assert decide(b'{"accepted": false}') == Refused(None)
    unavailable = decide(b'{"error": {"code": "unavailable", "message": "db down"}}')
    assert isinstance(unavailable, Unavailable) and "db down" in unavailable.error
    rejected = decide(b'{"error": {"code": "internal", "message": "corrupt row"}}')
    assert isinstance(rejected, Rejected) and "corrupt row" in rejected.error
    assert isinstance(decide(b'{"error": "plain"}'), Rejected)
    for garbage in (b"garbage", b"[]", b'"text"', b"{}", b'{"accepted": 1}', b"\xff"):
        assert isinstance(decide(garbage), Unavailable), garbage


def test_rejected_firings_stay_away_longer_each_time():
    assert rejected_delay(1.0, 1) == 1.0
    assert rejected_delay(1.0, 3) == 4.0
    assert rejected_delay(1.0, 40) == 60.0
    assert rejected_delay(1.0, 2**63) == 60.0
