"""Fixtures: a broker on a fake clock and connected test clients."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from amqp_broker.core.broker import Broker
from amqp_broker.core.settings import BrokerSettings, User

from .client import Client


class FakeClock:
    """Seconds, monotonic, moved by hand: ``clock.advance(1.5)``."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SETTINGS = BrokerSettings(
    vhosts=("/", "other"),
    users=(User("guest", "guest", ("*",), loopback_only=True),
           User("alice", "secret", ("/",)),
           User("bob", "hunter2", ("other",))),
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(clock: FakeClock) -> Broker:
    return Broker(SETTINGS, clock=clock)


@pytest.fixture
def make_client(broker: Broker) -> Callable[..., Client]:
    """``make_client(channels=1, **handshake_kw)``: a handshaken client with channels 1..n open."""
    ports = iter(range(50000, 60000))

    def make(channels: int = 1, peer_host: str = "127.0.0.1", **kw) -> Client:
        cl = Client(broker, peer_host, next(ports))
        cl.handshake(**kw)
        for n in range(1, channels + 1):
            cl.open_channel(n)
        return cl

    return make


@pytest.fixture
def client(make_client) -> Client:
    return make_client()
