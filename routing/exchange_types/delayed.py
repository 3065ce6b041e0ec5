"""The ``x-delayed-message`` exchange type: RabbitMQ's rabbitmq-delayed-message-exchange plugin.

Owns the pure rules of the plugin: the ``x-delayed-type`` argument (which exchange type's routing
the exchange borrows), the ``x-delay`` header (milliseconds a message is held before it is
routed) and the header a due message carries (``x-delay`` negated, so it is not delayed again).
``DelayedMatcher`` indexes bindings and routes exactly as the ``x-delayed-type``'s matcher does.
Must not know: holding messages, timers, disks (``amqp_broker.core.delayed`` does that).

Source: rabbitmq/rabbitmq-delayed-message-exchange, ``README.md`` (Usage, Routing, Limitations),
``src/rabbit_exchange_type_delayed_message.erl`` (``validate/1``, ``delay_message/2``: a delay
is acted on when ``0 < Delay =< 2^32-1``) and ``src/rabbit_delayed_message_utils.erl``
(``get_delay/1``: integer types as they are, strings parsed, floats truncated;
``swap_delay_header/1``: ``x-delay`` set to ``-Delay`` when the message is routed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, ClassVar

from routing.binding import Binding
from routing.destination import Destination
from routing.errors import InvalidArgument, UnknownExchangeType
from routing.exchange_types.base import Matcher
from routing.targets import Targets

__all__ = ["DELAYED_TYPE", "DELAYED_TYPE_ARG", "DELAY_HEADER", "MAX_DELAY_MS", "DelayedMatcher",
           "delay_of", "delayed_type_of", "due_headers"]

DELAYED_TYPE = "x-delayed-message"
"""The exchange type's name (the plugin's ``rabbit_registry`` entry)."""
DELAYED_TYPE_ARG = "x-delayed-type"
"""The declare argument naming the routing behaviour: direct, fanout, topic or headers."""
DELAY_HEADER = "x-delay"
"""The message header giving the delay, in milliseconds."""
MAX_DELAY_MS = 2**32 - 1
"""Longest delay acted on, ms (the plugin's ``?ERL_MAX_T``, Erlang's timer limit); a longer one
routes at once, as the plugin's ``delay_message/2`` does."""

#: The plugin's reply text for a missing or non-string ``x-delayed-type``, word for word
#: (its ``validate/1`` concatenates "must be" "an existing exchnage type" without a space).
MISSING_TYPE_TEXT = "Invalid argument, 'x-delayed-type' must bean existing exchnage type"


def delayed_type_of(arguments: Mapping[str, Any] | None, plain_types: Iterable[str]) -> str:
    """The ``x-delayed-type`` of an ``x-delayed-message`` exchange's declare ``arguments``.

    ``plain_types`` are the exchange types it may name. Raises ``InvalidArgument`` (the core
    answers 406 PRECONDITION_FAILED, the plugin's text) when the argument is missing or not a
    string, and ``UnknownExchangeType`` (503 COMMAND_INVALID "unknown exchange type 'T'", as
    ``rabbit_exchange:check_type``) when it names no exchange type; ``x-delayed-message`` itself
    is refused with the 406 (the plugin would recurse). Source: the plugin's ``validate/1``.
    """
    value = (arguments or {}).get(DELAYED_TYPE_ARG)
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str) or value == DELAYED_TYPE:
        raise InvalidArgument(MISSING_TYPE_TEXT)
    if value not in plain_types:
        raise UnknownExchangeType(f"unknown exchange type '{value}'", value)
    return value


def delay_of(headers: Mapping[str, Any] | None) -> int | None:
    """The delay (ms) a message with ``headers`` is held for, or None to route it at once.

    None when there is no ``x-delay``, when it is not a number (or a string of one), or when it
    is not in ``1 .. MAX_DELAY_MS``: negative, zero, missing or too long delays route at once
    (README: "If the x-delay header is not present, then the plugin will proceed to route the
    message without delay"). Floats and decimals are truncated, strings parsed as integers
    (``get_delay/1``). Never raises.
    """
    if not headers:
        return None
    value = headers.get(DELAY_HEADER)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("ascii", "replace")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    elif isinstance(value, (float, Decimal)):
        try:
            value = int(value)
        except (ValueError, OverflowError):  # nan, inf
            return None
    if not isinstance(value, int) or not 0 < value <= MAX_DELAY_MS:
        return None
    return value


def due_headers(headers: Mapping[str, Any], delay_ms: int) -> dict[str, Any]:
    """The headers a held message is routed with when due: a copy with ``x-delay`` set to
    ``-delay_ms``, so it is not delayed again by a delayed exchange it is routed on to, and its
    consumers can tell it came through the plugin (``swap_delay_header/1``)."""
    out = dict(headers)
    out[DELAY_HEADER] = -delay_ms
    return out


class DelayedMatcher(Matcher):
    """The bindings of an ``x-delayed-message`` exchange: indexed and routed by ``inner``, the
    matcher of its ``x-delayed-type`` ("the x-delayed-message exchange will just act as proxy",
    README "Performance Impact"). Always routes through ``route`` (``needs_headers``), so the
    table never takes its key-only fast path for it. Exchange-to-exchange bindings are allowed:
    the plugin's ``validate_binding`` refusal never matches (it tests ``kind = exchnage``)."""

    __slots__ = ("inner",)

    type_name: ClassVar[str] = DELAYED_TYPE
    needs_headers: ClassVar[bool] = True

    def __init__(self, source: str, inner: Matcher) -> None:
        super().__init__(source)
        self.inner = inner

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """The destinations the ``x-delayed-type`` routes ``routing_key``/``headers`` to."""
        return self.inner.route(routing_key, headers)

    def targets(self, routing_key: str) -> Targets:
        """Not used (``needs_headers``): raises ``NotImplementedError``."""
        raise NotImplementedError("x-delayed-message routes through route()")

    def _validate(self, binding: Binding) -> None:
        self.inner._validate(binding)

    def _add(self, binding: Binding) -> None:
        self.inner._add(binding)

    def _remove(self, binding: Binding) -> None:
        self.inner._remove(binding)
