"""Routing: exchanges, bindings and the publish-time route walk of an AMQP 0-9-1 broker.

Owns: the exchange types (direct, fanout, topic, headers), the per-vhost ``RoutingTable`` with
exchange-to-exchange bindings, alternate exchanges and sender-selected distribution (CC/BCC).
Must not know: I/O, sockets, asyncio/anyio, ``amqp_broker`` or ``queues``. Routing is pure and
returns destination *names*; the broker core resolves them to objects and enforces permissions.

Note: the ``queue()``/``exchange()`` destination helpers live in ``routing.destination`` (or use
``Destination.of_queue``/``Destination.of_exchange``); they are not re-exported here because
``routing.exchange`` is a submodule name.
"""

from __future__ import annotations

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)

from routing.binding import Binding
from routing.destination import Destination
from routing.errors import (
    AccessRefused,
    InvalidArgument,
    NotFound,
    RoutingError,
    UnknownExchangeType,
)
from routing.exchange import Exchange
from routing.exchange_types import EXCHANGE_TYPES
from routing.sender_selected import sender_selected_keys
from routing.table import PREDECLARED_EXCHANGES, RoutingTable, UnbindResult

__all__ = [
    "EXCHANGE_TYPES",
    "PREDECLARED_EXCHANGES",
    "AccessRefused",
    "Binding",
    "Destination",
    "Exchange",
    "InvalidArgument",
    "NotFound",
    "RoutingError",
    "RoutingTable",
    "UnbindResult",
    "UnknownExchangeType",
    "sender_selected_keys",
]
