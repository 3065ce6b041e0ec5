"""The default exchange (``""``): a direct exchange implicitly bound to every queue by its name.

Owns: answering "is there a queue called <routing key>?" through the matcher interface.
Must not know: queue objects. It reads a live container of queue names owned by the routing table.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from routing.binding import Binding
from routing.destination import Destination, queue
from routing.errors import AccessRefused
from routing.exchange_types.base import Matcher
from routing.targets import EMPTY_TARGETS, Targets

__all__ = ["DefaultMatcher"]


class DefaultMatcher(Matcher):
    """Matcher of the default exchange: routing key ``k`` reaches queue ``k`` if it exists.

    Its bindings are implicit and never stored: ``len()`` is 0 and ``bindings()`` is empty.
    ``bind`` raises ``AccessRefused``; ``unbind`` returns False. ``queues`` is a live container
    of existing queue names (the routing table's set).
    Source: AMQP 0-9-1 §3.1.3.1 (default exchange); RabbitMQ: Exchanges guide, "Default Exchange".
    """

    __slots__ = ("_queues",)
    type_name = "direct"

    def __init__(self, source: str, queues: Container[str]) -> None:
        super().__init__(source)
        self._queues = queues

    def bind(
        self, destination: Destination, binding_key: str, arguments: Mapping[str, Any] | None
    ) -> bool:
        """Always raises ``AccessRefused``: the default exchange cannot be bound."""
        raise AccessRefused("operation not permitted on the default exchange")

    def targets(self, routing_key: str) -> Targets:
        """The queue named ``routing_key`` if it exists, else nothing."""
        if routing_key in self._queues:
            return Targets((queue(routing_key),), frozenset((routing_key,)), True)
        return EMPTY_TARGETS

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """The queue named ``routing_key`` if it exists; ``headers`` is ignored."""
        return (queue(routing_key),) if routing_key in self._queues else ()

    def _add(self, binding: Binding) -> None:  # pragma: no cover - bind() refuses first
        raise AccessRefused("operation not permitted on the default exchange")

    def _remove(self, binding: Binding) -> None:  # pragma: no cover - nothing is ever stored
        pass
