"""``/api/connections``, ``/api/channels``, ``/api/consumers`` (all, per vhost, per connection),
and ``DELETE /api/connections/{name}``: closes the connection with 320 CONNECTION_FORCED and the
``X-Reason`` header's text (RabbitMQ's default: "Closed via management plugin").
The API's own in-process connections are not listed. Source: "Management HTTP API".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from . import auth
from .api import endpoint, vhost_of
from .context import Management
from .http import json_response, list_response, no_content, not_found, path_vhost
from .shapes import (
    channel_json,
    connection_json,
    connection_name,
    consumer_json,
    visible_connections,
)

if TYPE_CHECKING:
    from ..core.channel import Channel
    from ..core.connection import Connection

__all__ = ["ROUTES", "connection_items", "channel_items", "consumer_items"]


def _connections(mgmt: Management, user: Account, vhost: str | None = None) -> list:
    conns = visible_connections(mgmt.broker)
    if vhost is not None:
        conns = [c for c in conns if c.vhost is not None and c.vhost.name == vhost]
    if not auth.sees_all(user):  # management users see their own connections only
        conns = [c for c in conns if c.user is not None and c.user.name == user.name]
    return conns


def connection_items(mgmt: Management, user: Account, vhost: str | None = None) -> list[dict]:
    """Client connections ``user`` may see, as ``connection_json``."""
    now = int(time.time() * 1000)
    return [connection_json(mgmt.broker, c, now, mgmt.amqp_address)
            for c in _connections(mgmt, user, vhost)]


def channel_items(mgmt: Management, user: Account, vhost: str | None = None) -> list[dict]:
    """Channels of those connections."""
    return [_channel(mgmt, c, ch) for c in _connections(mgmt, user, vhost)
            for ch in list(c.channels.values())]


def _channel(mgmt: Management, conn: Connection, ch: Channel) -> dict:
    """``channel_json`` with the channel's rates (``object_rates``)."""
    rates = mgmt.sampler.objects.channel(ch) if mgmt.sampler is not None else {}
    return channel_json(mgmt.broker, conn, ch, mgmt.amqp_address, rates)


def consumer_items(mgmt: Management, user: Account, vhost: str | None = None) -> list[dict]:
    """Consumers on those channels."""
    return [consumer_json(c, ch, consumer, mgmt.amqp_address)
            for c in _connections(mgmt, user, vhost) for ch in list(c.channels.values())
            for consumer in list(ch.consumers.values())]


def _vhost(request: Request, mgmt: Management, user: Account) -> str | None:
    return vhost_of(request, mgmt, user) if "vhost" in request.path_params else None


@endpoint()
async def list_connections(request: Request, mgmt: Management, user: Account) -> Response:
    return list_response(request, connection_items(mgmt, user, _vhost(request, mgmt, user)))


@endpoint()
async def list_channels(request: Request, mgmt: Management, user: Account) -> Response:
    return list_response(request, channel_items(mgmt, user, _vhost(request, mgmt, user)))


@endpoint()
async def list_consumers(request: Request, mgmt: Management, user: Account) -> Response:
    return list_response(request, consumer_items(mgmt, user, _vhost(request, mgmt, user)))


def _find(request: Request, mgmt: Management, user: Account):  # type: ignore[no-untyped-def]
    name = path_vhost(request, "name")
    for conn in _connections(mgmt, user):
        if connection_name(conn, mgmt.amqp_address) == name:
            return conn
    raise not_found()


@endpoint()
async def show_connection(request: Request, mgmt: Management, user: Account) -> Response:
    conn = _find(request, mgmt, user)
    return json_response(connection_json(mgmt.broker, conn, int(time.time() * 1000),
                                         mgmt.amqp_address))


@endpoint()
async def connection_channels(request: Request, mgmt: Management, user: Account) -> Response:
    conn = _find(request, mgmt, user)
    return list_response(request, [_channel(mgmt, conn, ch) for ch in list(conn.channels.values())])


@endpoint()
async def close_connection(request: Request, mgmt: Management, user: Account) -> Response:
    conn = _find(request, mgmt, user)
    reason = request.headers.get("x-reason", "Closed via management plugin")
    conn.close_forced(f"CONNECTION_FORCED - {reason}")
    return no_content()


ROUTES = [
    Route("/api/connections", list_connections),
    Route("/api/vhosts/{vhost}/connections", list_connections),
    Route("/api/connections/{name}", show_connection, methods=["GET"]),
    Route("/api/connections/{name}", close_connection, methods=["DELETE"]),
    Route("/api/connections/{name}/channels", connection_channels),
    Route("/api/channels", list_channels),
    Route("/api/vhosts/{vhost}/channels", list_channels),
    Route("/api/consumers", list_consumers),
    Route("/api/consumers/{vhost}", list_consumers),
]
