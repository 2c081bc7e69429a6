"""Fixtures: a real nats-server (CHIME_NATS_SERVER or on PATH) for the tests that need one."""

from collections.abc import Iterator

import pytest

from natsenv import NatsServer, nats_server_binary


@pytest.fixture
def nats_url() -> Iterator[str]:
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("needs nats-server 2.11+: set CHIME_NATS_SERVER or put it on PATH")
    server = NatsServer(binary)
    try:
        yield server.url
    finally:
        server.stop()
