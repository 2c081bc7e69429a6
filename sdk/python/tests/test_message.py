"""Firing messages: headers and body read as the Rust worker reads them; anything else is a BadMessage naming the header."""

import hashlib
from datetime import timedelta

import pytest

from chime_worker.message import BadMessage, check_addressee, parse_firing

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def good() -> dict[str, str]:
    return {
        "Nats-Msg-Id": "job-1@1774661400000#2",
        "Chime-Firing-Id": "job-1@1774661400000#2",
        "Chime-Job-Id": "job-1",
        "Chime-Handler": "echo",
        "Chime-Scheduled-At": "2026-03-28T01:30:00.000Z",
        "Chime-Due-At": "2026-03-28T01:30:05.000Z",
        "Chime-Attempt": "2",
        "Chime-Priority": "5",
        "Chime-Deadline": "2026-03-28T02:30:05.000Z",
        "Chime-Timeout-Ms": "3600000",
        "traceparent": TRACEPARENT,
    }


def sharded() -> dict[str, str]:
    h = good()
    h["Chime-Firing-Id"] = "job-1@1774661400000.3#2"
    h["Chime-Shard"] = "3"
    h["Chime-Shards"] = "8"
    return h


def test_a_complete_message_parses():
    body = b'{"x": 1}'
    m = parse_firing(good(), body)
    assert str(m.firing_id) == "job-1@1774661400000#2"
    assert (m.job_id, m.handler, m.attempt, m.priority) == ("job-1", "echo", 2, 5)
    assert m.payload == {"x": 1}
    assert m.timeout == 3600.0
    assert m.due_at - m.scheduled_at == timedelta(seconds=5)
    assert (m.shard, m.shards) == (None, None)
    assert m.traceparent == TRACEPARENT
    assert m.payload_sha256 == hashlib.sha256(body).hexdigest()


def test_optional_headers_and_empty_bodies_have_defaults():
    h = good()
    h["Chime-Due-At"] = ""
    del h["Chime-Timeout-Ms"]
    del h["traceparent"]
    m = parse_firing(h, b"")
    assert m.timeout is None
    assert m.due_at == m.scheduled_at
    assert m.payload is None
    assert m.traceparent is None
    assert parse_firing(good(), b" \n").payload is None


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        TRACEPARENT + "-extra",
        "",
    ],
)
def test_a_malformed_traceparent_is_none_and_the_firing_still_runs(value):
    h = good()
    h["traceparent"] = value
    assert parse_firing(h, b"{}").traceparent is None


def test_a_shard_is_read_and_checked_against_its_id():
    m = parse_firing(sharded(), b"")
    assert (m.shard, m.shards) == (3, 8)
    assert m.firing_id.shard == 3
    for name, value, header in [
        ("Chime-Shard", "4", "Chime-Shard"),
        ("Chime-Shard", "x", "Chime-Shard"),
        ("Chime-Shards", "3", "Chime-Shard"),
        ("Chime-Shards", "1", "Chime-Shard"),
        ("Chime-Shards", "0", "Chime-Shards"),
        ("Chime-Shards", "-8", "Chime-Shards"),
        ("Chime-Shards", "", "Chime-Shards"),
    ]:
        h = sharded()
        h[name] = value
        with pytest.raises(BadMessage) as error:
            parse_firing(h, b"")
        assert error.value.header == header, (name, value, error.value)
    h = good()
    h["Chime-Shard"], h["Chime-Shards"] = "0", "2"
    with pytest.raises(BadMessage) as error:
        parse_firing(h, b"")
    assert error.value.header == "Chime-Shard"


def test_a_broadcast_to_one_worker_is_shard_0_of_1():
    h = sharded()
    h["Chime-Firing-Id"], h["Chime-Shard"], h["Chime-Shards"] = "job-1@1774661400000.0#2", "0", "1"
    m = parse_firing(h, b"")
    assert (m.shard, m.shards, m.firing_id.shard) == (0, 1, 0)


def test_an_offer_must_name_this_worker():
    check_addressee({**good(), "Chime-Worker-Id": "w1"}, "w1")
    for headers, problem in [(good(), "missing"), ({**good(), "Chime-Worker-Id": "w2"}, "invalid")]:
        with pytest.raises(BadMessage) as error:
            check_addressee(headers, "w1")
        assert error.value.header == "Chime-Worker-Id" and problem in str(error.value)


@pytest.mark.parametrize(
    "name, value",
    [
        ("Chime-Firing-Id", "not-a-firing"),
        ("Chime-Firing-Id", "job@1#x"),
        ("Chime-Job-Id", "other-job"),
        ("Chime-Scheduled-At", "yesterday"),
        ("Chime-Due-At", "2026-03-28"),
        ("Chime-Attempt", "3"),
        ("Chime-Attempt", "two"),
        ("Chime-Priority", "12"),
        ("Chime-Priority", "-1"),
        ("Chime-Deadline", "soon"),
        ("Chime-Timeout-Ms", "-5"),
        ("Chime-Timeout-Ms", "1.5"),
    ],
)
def test_garbage_is_rejected_with_the_header_named(name, value):
    h = good()
    h[name] = value
    with pytest.raises(BadMessage) as error:
        parse_firing(h, b"{}")
    assert error.value.header == name


@pytest.mark.parametrize("name", ["Chime-Firing-Id", "Chime-Job-Id", "Chime-Handler", "Chime-Scheduled-At",
                                  "Chime-Attempt", "Chime-Priority", "Chime-Deadline"])
def test_a_missing_required_header_is_named(name):
    h = good()
    del h[name]
    with pytest.raises(BadMessage) as error:
        parse_firing(h, b"{}")
    assert error.value.header == name
    assert "missing" in str(error.value)


@pytest.mark.parametrize("body", [b"{nope", b"NaN", b'{"x": Infinity}', b"\xff\xfe", b"[" * 100_000])
def test_a_body_that_is_not_strict_json_is_rejected(body):
    with pytest.raises(BadMessage) as error:
        parse_firing(good(), body)
    assert error.value.header is None
    assert str(error.value).startswith("the body is not JSON")


def test_a_message_without_headers_is_rejected():
    for headers in (None, {}):
        with pytest.raises(BadMessage, match="no headers"):
            parse_firing(headers, b"{}")
