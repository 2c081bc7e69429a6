"""Handler output and error text as Chime keeps it.

A handler may return any bytes: NUL, invalid UTF-8, megabytes. PostgreSQL
refuses a NUL in text and an unbounded text slows every history read, so the
worker cleans and caps what it reports: invalid UTF-8 (and lone surrogates,
which Python strings can hold) and NUL become U+FFFD, every other character
is kept; the output keeps its last bytes and the error its first, cut on a
character boundary. Cleaning comes first: a replacement takes 3 bytes.
"""

from __future__ import annotations

#: The default bound on a firing's output tail: 64 KiB.
MAX_OUTPUT_BYTES = 64 * 1024
#: The most output a worker may keep: a finished event must fit NATS's 1 MiB payload.
MAX_OUTPUT_LIMIT = 512 * 1024
#: The most error text kept per firing: its first 8 KiB.
MAX_ERROR_BYTES = 8 * 1024

REPLACEMENT = "\ufffd"


def clean(value: str | bytes) -> str:
    """``value`` as storable text: invalid UTF-8, lone surrogates and NUL become U+FFFD."""
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogatepass")
    return value.decode("utf-8", "replace").replace("\0", REPLACEMENT)


def tail(value: str | bytes, limit: int) -> str:
    """The last at most ``limit`` bytes of ``value``, cleaned, cut at a character boundary."""
    data = clean(value).encode("utf-8")
    if len(data) <= limit:
        return data.decode("utf-8")
    start = len(data) - limit
    # Continuation bytes are 0b10xxxxxx: skip them to the next character's start.
    while start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:].decode("utf-8")


def head(value: str | bytes, limit: int) -> str:
    """The first at most ``limit`` bytes of ``value``, cleaned, cut at a character boundary."""
    data = clean(value).encode("utf-8")
    if len(data) <= limit:
        return data.decode("utf-8")
    end = limit
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end].decode("utf-8")
