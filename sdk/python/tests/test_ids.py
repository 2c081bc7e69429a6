"""Firing ids and JetStream ack subjects, read strictly."""

import pytest

from chime_worker.ackinfo import parse_ack_subject
from chime_worker.firing_id import FiringId, parse_firing_id


def test_firing_ids_split_at_the_last_at_sign():
    assert parse_firing_id("nightly-report@1774661400000#2") == FiringId("nightly-report", 1774661400000, None, 2)
    assert parse_firing_id("scan@1774661400000.3#1") == FiringId("scan", 1774661400000, 3, 1)
    assert parse_firing_id("a@b@5#1").job_id == "a@b"
    assert str(parse_firing_id("scan@1774661400000.3#1")) == "scan@1774661400000.3#1"


@pytest.mark.parametrize(
    "text",
    ["", "job", "@1#1", "job@1", "job@x#1", "job@1#", "job@1#-1", "job@1.#1", "job@1.-2#1", "job@1.+2#1",
     "job@1 #1", "job@1#1 ", "job@1_000#1", "job@99999999999999999999#1", "job@1#4294967296"],
)
def test_anything_else_is_not_a_firing_id(text):
    with pytest.raises(ValueError):
        parse_firing_id(text)


def test_ack_subjects_of_both_forms_are_read():
    info = parse_ack_subject("$JS.ACK.CHIME_FIRE.fire_g_py_normal.3.17.9.1796641705360915736.16")
    assert info is not None
    assert (info.stream, info.consumer, info.delivered, info.stream_seq, info.pending) == (
        "CHIME_FIRE", "fire_g_py_normal", 3, 17, 16)
    assert info.timestamp_ns == 1796641705360915736
    info = parse_ack_subject("$JS.ACK.hub.ACCHASH.CHIME_FIRE.fire_g_py_high.1.2.3.1796641705360915736.0.tok")
    assert info is not None and (info.consumer, info.delivered, info.pending) == ("fire_g_py_high", 1, 0)


@pytest.mark.parametrize(
    "reply",
    [None, "", "_INBOX.abc", "$JS.ACK.CHIME_FIRE.c.1.2.3", "$JS.ACK.CHIME_FIRE.c.x.2.3.4.5",
     "$JS.API.CHIME_FIRE.c.1.2.3.4.5", "$JS.ACK.a.b.CHIME_FIRE.c.1.2.3.4"],
)
def test_other_subjects_are_not_ack_subjects(reply):
    assert parse_ack_subject(reply) is None
