"""RFC 3339 times: written in UTC with milliseconds and Z, read with any offset, nothing else accepted."""

from datetime import datetime, timedelta, timezone

import pytest

from chime_worker.timefmt import format_time, parse_time


def test_times_are_written_in_utc_with_milliseconds_and_z():
    t = datetime(2026, 3, 28, 3, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(t) == "2026-03-28T01:30:00.123Z"
    with pytest.raises(ValueError):
        format_time(datetime(2026, 3, 28))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-03-28T01:30:00Z", datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc)),
        ("2026-03-28T01:30:00.5Z", datetime(2026, 3, 28, 1, 30, 0, 500000, tzinfo=timezone.utc)),
        ("2026-03-28t01:30:00.123456789z", datetime(2026, 3, 28, 1, 30, 0, 123456, tzinfo=timezone.utc)),
        ("2026-03-28T03:30:00+02:00", datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc)),
        ("  2026-03-27T20:30:00-05:00 ", datetime(2026, 3, 28, 1, 30, tzinfo=timezone.utc)),
    ],
)
def test_any_rfc3339_offset_is_read(text, expected):
    assert parse_time(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "yesterday", "2026-03-28", "2026-03-28T01:30:00", "2026-13-01T00:00:00Z", "2026-03-28T01:30:00+24:00",
     "2026-W13-6T01:30:00Z", "2026-03-28T01:30Z", "0000-01-01T00:00:00+01:00"],
)
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError):
        parse_time(text)


def test_a_written_time_reads_back():
    t = datetime(2026, 3, 28, 1, 30, 0, 123000, tzinfo=timezone.utc)
    assert parse_time(format_time(t)) == t
