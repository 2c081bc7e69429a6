"""What a JetStream message's ack subject says about it.

A fetched firing's reply subject is
``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp ns>.<pending>``,
or, from servers that add a domain and an account hash,
``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp ns>.<pending>.<token>``.
The worker reads the delivery count (rejected starts back off by it), the
server's timestamp (the clock offset estimate) and checks the stream, so a
message published into the worker's inbox by anyone else is never acked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AckInfo:
    stream: str
    consumer: str
    #: 1 on the first delivery.
    delivered: int
    stream_seq: int
    #: When the server stored the message, nanoseconds since the epoch (server clock).
    timestamp_ns: int
    #: How many more messages the consumer holds.
    pending: int


def parse_ack_subject(reply: str | None) -> AckInfo | None:
    """The ack subject's fields, or ``None`` when ``reply`` is not a JetStream ack subject."""
    if not reply:
        return None
    tokens = reply.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    if len(tokens) == 9:
        fields = tokens[2:]
    elif len(tokens) >= 12:
        fields = tokens[4:11]
    else:
        return None
    stream, consumer, delivered, stream_seq, _consumer_seq, timestamp, pending = fields
    numbers = (delivered, stream_seq, _consumer_seq, timestamp, pending)
    if not stream or not consumer or not all(n.isascii() and n.isdigit() for n in numbers):
        return None
    return AckInfo(
        stream=stream,
        consumer=consumer,
        delivered=int(delivered),
        stream_seq=int(stream_seq),
        timestamp_ns=int(timestamp),
        pending=int(pending),
    )
