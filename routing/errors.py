"""Errors raised by the routing package.

Owns: the exception hierarchy the broker core maps onto AMQP channel/connection exceptions.
Must not know: AMQP reply codes or frames. The mapping below is advice for the core, not code here.

Mapping the core is expected to apply (AMQP 0-9-1 spec §1.1 "Constants"):

==========================  =====================================
``InvalidArgument``         406 PRECONDITION_FAILED (channel)
``UnknownExchangeType``     503 COMMAND_INVALID (connection)
``AccessRefused``           403 ACCESS_REFUSED (channel)
``NotFound``                404 NOT_FOUND (channel)
==========================  =====================================
"""

from __future__ import annotations

__all__ = [
    "AccessRefused",
    "InvalidArgument",
    "NotFound",
    "RoutingError",
    "UnknownExchangeType",
]


class RoutingError(Exception):
    """Base class of every error the routing package raises on purpose.

    Source: none (package convention).
    """


class InvalidArgument(RoutingError):
    """A binding or exchange argument, or a routing header, has an unacceptable type or value.

    Raised for: an invalid headers-exchange ``x-match`` (RabbitMQ: rabbit_exchange_type_headers
    ``validate_binding``), a non-string ``alternate-exchange`` argument, and a ``CC``/``BCC``
    header that is not an array (RabbitMQ: rabbit_basic ``header_routes``,
    "unacceptable_type_in_header"). Core maps it to 406 PRECONDITION_FAILED.
    """


class UnknownExchangeType(RoutingError):
    """``exchange.declare`` named an exchange type this broker does not implement.

    Source: AMQP 0-9-1 §3.1.3 (exchange types); RabbitMQ answers 503 COMMAND_INVALID
    ("invalid exchange type"), which is what the core should send.
    """


class AccessRefused(RoutingError):
    """An operation is not permitted on the default exchange (binding to/from it, deleting it).

    Source: RabbitMQ: Exchanges guide, "Default Exchange" (it cannot be bound, unbound or
    deleted). Core maps it to 403 ACCESS_REFUSED.
    """


class NotFound(RoutingError):
    """A binding named a source exchange or a destination that does not exist in the table.

    The core is expected to check existence first (and send 404 NOT_FOUND itself); this is the
    table's safety net. Source: AMQP 0-9-1 §1.8.3.x ``queue.bind``/``exchange.bind``.
    """
