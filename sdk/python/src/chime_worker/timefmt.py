"""RFC 3339 times as the worker protocol writes and reads them.

Chime writes UTC with milliseconds and ``Z`` and accepts any RFC 3339
offset. Python's ``datetime.fromisoformat`` takes far more than RFC 3339
(dates alone, week dates, no offset), so times from messages are read with
a pattern of their own: a header that is not an RFC 3339 time makes the
message invalid, as it does for the Rust worker.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


def format_time(t: datetime) -> str:
    """``t`` in UTC with milliseconds and ``Z``: ``2026-03-28T01:30:00.000Z``."""
    if t.tzinfo is None:
        raise ValueError("a naive datetime has no offset; use an aware one")
    utc = t.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time (surrounding blanks allowed), as an aware UTC datetime.

    Raises ``ValueError`` naming the text when it is not one.
    """
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time; write e.g. \"2026-03-28T02:30:00Z\"")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = match.group(7) or ""
    micros = int((fraction + "000000")[:6]) if fraction else 0
    if match.group(8):
        offset = timedelta(0)
    else:
        sign = -1 if match.group(9) == "-" else 1
        hours, minutes = int(match.group(10)), int(match.group(11))
        if hours > 23 or minutes > 59:
            raise ValueError(f"{text!r} has an offset out of range")
        offset = sign * timedelta(hours=hours, minutes=minutes)
    try:
        local = datetime(year, month, day, hour, minute, second, micros, tzinfo=timezone(offset))
    except ValueError as e:
        raise ValueError(f"{text!r} is not an RFC 3339 time ({e})") from None
    try:
        return local.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(f"{text!r} is out of range") from None


def utc_now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(timezone.utc)
