"""In-process management API for unit tests: a core ``Broker`` (no sockets) behind the ASGI app,
driven with httpx's ASGI transport (the client address is configurable, for loopback rules)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx

from amqp_broker.core.broker import Broker
from amqp_broker.management.app import build_app
from amqp_broker.management.context import Listener, Management


def make(broker: Broker | None = None) -> Management:
    """A Management context over a fresh broker, with listeners as a real node has them."""
    mgmt = Management(broker or Broker())
    mgmt.listeners[:] = [Listener("amqp", "127.0.0.1", 5672), Listener("http", "127.0.0.1", 15672)]
    return mgmt


def client(mgmt: Management, auth: tuple[str, str] | None = ("guest", "guest"),
           peer: str = "127.0.0.1") -> httpx.AsyncClient:
    """An httpx client talking to ``mgmt``'s app as if from ``peer``."""
    transport = httpx.ASGITransport(app=build_app(mgmt), client=(peer, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://mgmt", auth=auth)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body on asyncio."""
    return anyio.run(fn)
