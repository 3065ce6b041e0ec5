"""Exchange types: one matcher class per type, and the registry mapping type names to them.

Owns: the set of exchange types this broker implements ("direct", "fanout", "topic", "headers",
and the delayed-message plugin's "x-delayed-message", which routes as its ``x-delayed-type``).
Must not know: exchanges as objects, the routing table, anything about queues beyond names.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from routing.errors import UnknownExchangeType
from routing.exchange_types.base import Matcher
from routing.exchange_types.default import DefaultMatcher
from routing.exchange_types.delayed import DELAYED_TYPE, DelayedMatcher, delayed_type_of
from routing.exchange_types.direct import DirectMatcher
from routing.exchange_types.fanout import FanoutMatcher
from routing.exchange_types.headers import HeadersMatcher, HeadersSpec, parse_x_match
from routing.exchange_types.topic import TopicMatcher, split_topic_key

__all__ = [
    "EXCHANGE_TYPES",
    "DefaultMatcher",
    "DelayedMatcher",
    "DirectMatcher",
    "FanoutMatcher",
    "HeadersMatcher",
    "HeadersSpec",
    "Matcher",
    "TopicMatcher",
    "matcher_for",
    "parse_x_match",
    "split_topic_key",
]

EXCHANGE_TYPES: Mapping[str, type[Matcher]] = MappingProxyType(
    {
        "direct": DirectMatcher,
        "fanout": FanoutMatcher,
        "topic": TopicMatcher,
        "headers": HeadersMatcher,
        DELAYED_TYPE: DelayedMatcher,
    }
)
"""Exchange type name -> matcher class. Source: AMQP 0-9-1 §3.1.3; RabbitMQ: Exchanges guide;
rabbitmq-delayed-message-exchange (``x-delayed-message``)."""

#: The types an ``x-delayed-message`` exchange may route as (its ``x-delayed-type``).
PLAIN_TYPES = ("direct", "fanout", "topic", "headers")


def matcher_for(type_name: str, source: str, arguments: Mapping[str, Any] | None = None) -> Matcher:
    """Return a new, empty matcher of exchange type ``type_name`` for exchange ``source``;
    ``arguments`` are the exchange's declare arguments (read by ``x-delayed-message`` only).

    Raises ``UnknownExchangeType`` if the type is not one of ``EXCHANGE_TYPES`` (or, for
    ``x-delayed-message``, its ``x-delayed-type`` is no type) and ``InvalidArgument`` for a
    missing ``x-delayed-type`` (``routing.exchange_types.delayed.delayed_type_of``).
    Source: AMQP 0-9-1 §1.7.2.1 ``exchange.declare`` (type); RabbitMQ answers 503 for unknown.
    """
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        raise UnknownExchangeType(f"invalid exchange type '{type_name}'")
    if cls is DelayedMatcher:
        inner = EXCHANGE_TYPES[delayed_type_of(arguments, PLAIN_TYPES)]
        return DelayedMatcher(source, inner(source))  # type: ignore[call-arg]
    return cls(source)  # type: ignore[call-arg]
